/*
 * inject.h - `rbtrace --inject[=DIR]`: rbtrace loaded into a Ruby process
 * that never required it (docs/DESIGN.md, "Injection"). Everything that
 * can refuse is checked before the process is touched; the touching itself
 * is inject_ptrace.c's, done by a child of the client's that no signal of
 * the client's reaches.
 */
#ifndef RBTRACE_CLI_INJECT_H
#define RBTRACE_CLI_INJECT_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

/*
 * Makes pid load rbtrace, unless it has already, and waits (timeout_ms)
 * until it has. dir: --inject=DIR, the lib directory of an rbtrace built
 * for pid's Ruby; NULL: the one beside this client, or the checkout's
 * build for that Ruby. CLI_OK loaded; CLI_ERR with errstr (what to do);
 * CLI_INTERRUPTED if *stop was set while waiting.
 */
int inject_rbtrace(pid_t pid, const char *dir, int timeout_ms, volatile sig_atomic_t *stop,
                   char *errstr, size_t size);

#endif
