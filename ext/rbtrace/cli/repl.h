/*
 * repl.h - rbtrace -p PID -i: a Ruby prompt in the target process.
 *
 * One attach for the whole REPL (session_start); each entry is one EVAL
 * (session_eval_code) whose result is printed; an entry that is only
 * incomplete Ruby reads more lines. On a terminal, lines are edited with
 * libedit, with a history in ~/.rbtrace_history, when the client was
 * built with it (RBTRACE_HAVE_LIBEDIT).
 */
#ifndef RBTRACE_CLI_REPL_H
#define RBTRACE_CLI_REPL_H

#include "cli.h"
#include "options.h"

/* Runs the REPL until end of input (Ctrl-D), SIGTERM/SIGHUP, or the
 * target's end; returns the exit code (3: the target exited). */
enum cli_exit repl_run(const struct options *opts);

/* How this build reads lines, for --help: line editing or plain lines. */
const char *repl_line_editing(void);

#endif
