/*
 * session.h - one run of the client: attach, send the command the options
 * ask for, read and render events until the user stops us or the target
 * goes away, detach.
 */
#ifndef RBTRACE_CLI_SESSION_H
#define RBTRACE_CLI_SESSION_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "cli.h"
#include "options.h"

/* Runs the session opts describe; returns the exit code. Status lines
 * and errors go to stderr. */
enum cli_exit session_run(const struct options *opts);

/*
 * One attach for many evals (the REPL, repl.c): session_start attaches,
 * session_eval_code runs one piece of code and hands its result to a sink,
 * session_end detaches and frees. Status lines go to stderr as above.
 */
struct session;

/* Takes an eval's result: status is an enum rbtrace_eval_status, text
 * (len bytes, not NUL-terminated) is valid during the call only. */
typedef void (*session_eval_sink)(void *ctx, uint32_t status, const char *text, size_t len);

/* How session_eval_code ended. */
enum session_eval_end {
    SESSION_EVAL_ANSWERED,    /* the sink had the result */
    SESSION_EVAL_INTERRUPTED, /* ^C (SIGINT) while waiting; the code may still run */
    SESSION_EVAL_UNANSWERED,  /* no answer within --timeout and a grace period */
    SESSION_EVAL_ENDED        /* the target went away, the user stopped us (SIGTERM,
                                * SIGHUP) or an error: only session_end is left, and
                                * it says what happened */
};

/* Attaches as opts says. CLI_EXIT_OK with *out set, or the exit code
 * (after saying why on stderr) with *out NULL. */
enum cli_exit session_start(const struct options *opts, struct session **out);

/* Sends code as an EVAL with a new id and the --timeout, and waits for
 * its answer (events that come meanwhile are handled as usual). */
enum session_eval_end session_eval_code(struct session *s, const char *code, uint32_t len,
                                        session_eval_sink sink, void *ctx);

/* The signal (SIGINT, SIGTERM or SIGHUP) caught since the session last
 * looked, or 0; the session then counts it as seen. For a caller that
 * blocked elsewhere (reading the terminal). */
int session_take_signal(struct session *s);

/* Whether session_take_signal has a signal to give (async-signal-safe
 * reads only: for a loop that must not block past a signal). */
int session_signal_pending(const struct session *s);

/* The set of the signals a session counts (SIGINT, SIGTERM, SIGHUP). */
void session_signal_set(sigset_t *set);

/* 1 while the target exists, 0 once it is gone. */
int session_target_alive(const struct session *s);

/* Detaches (unless the session ended), releases everything and frees s;
 * returns rc, or the exit code of how the session ended (3: the target
 * exited). */
enum cli_exit session_end(struct session *s, enum cli_exit rc);

#endif
