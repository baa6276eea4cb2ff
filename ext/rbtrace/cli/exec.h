/*
 * exec.h - --exec CMD ARG...: start a Ruby program with rbtrace loaded and
 * trace it from its first line.
 */
#ifndef RBTRACE_CLI_EXEC_H
#define RBTRACE_CLI_EXEC_H

#include <sys/types.h>
#include "cli.h"
#include "options.h"

/*
 * Starts o->exec_argv with rbtrace loaded (RUBYLIB, RUBYOPT) and waits
 * until rbtrace is ready in it; the program then waits in `require
 * 'rbtrace'` until the session sends RESUME (o->resume is set). Sets
 * o->pid. CLI_OK, or CLI_ERR after saying why on stderr.
 */
int exec_start(struct options *o, pid_t *child);

/* After the session: the program's own exit status if it ended (rc says
 * the target is gone), else rc (the program runs on, detached). */
enum cli_exit exec_finish(pid_t child, enum cli_exit rc);

#endif
