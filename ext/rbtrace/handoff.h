/*
 * handoff.h - the GVL for rbtrace's own threads while an app thread is
 * busy (handoff.c), and calls without the GVL that ask for it back
 * (rbtrace_nogvl); then what handoff.c shares with handoff_job.c, the way
 * of asking the thread that holds the GVL to pass it on (Ruby 3.3 and
 * later; before, its stubs ask nothing), which defines the
 * rbtrace_handoff_ask_* functions below.
 */
#ifndef RBTRACE_HANDOFF_H
#define RBTRACE_HANDOFF_H

#include <ruby.h>
#include <ruby/thread.h>
#include <signal.h>
#include <sys/types.h>

/* handoff.c: the GVL for our threads while an app thread is busy */
void rbtrace_handoff_request(void);
void rbtrace_handoff_done(void);
void rbtrace_handoff_install(void);
void rbtrace_handoff_after_fork(void);
void Init_rbtrace_handoff(VALUE mod);
/* What a func run by rbtrace_nogvl returns when the work it woke for can
 * wait for the GVL in turn: no hand-off is asked for (handoff.c). */
#define RBTRACE_NOGVL_UNHURRIED ((void *)1)
int rbtrace_nogvl(void *(*func)(void *), void *arg, rb_unblock_function_t *ubf, void *ubf_arg,
                  int *state);

/* What handoff.c shares with handoff_job.c: */

/* How long a thread asked to pass the GVL on keeps waiting for ours to
 * take it, at most, per asking. */
#define RBTRACE_HANDOFF_YIELD_MAX_NS 5000000L

/* How many times one request asks, at most: if the GVL has not come after
 * that, something keeps it that asking cannot move (a long C call), and
 * Ruby's time slices bring it. Also bounds what a request that is never
 * answered by rbtrace_handoff_done could cost the app. */
#define RBTRACE_HANDOFF_MAX_ASKS 200

struct rbtrace_handoff {
    volatile sig_atomic_t wanted; /* a thread of ours waits for the GVL */
    volatile pid_t requester;     /* the native thread (tid) that said so */
};

extern struct rbtrace_handoff rbtrace_handoff;

/* Whether the current Ruby thread is one of rbtrace's (marked by
 * RBTrace.handoff_own_thread): those never pass the GVL on. GVL held. */
int rbtrace_handoff_own_thread_p(void);

/* Says once on stderr that `what` failed (err: an errno) and what it
 * costs: no asking, the GVL comes at Ruby's next time slice. */
void rbtrace_handoff_report_unavailable(const char *what, int err);

/* Sets the way up, once, GVL held. Returns 0 if it can work here, else -1. */
int rbtrace_handoff_ask_install(void);
/* rbtrace_handoff.wanted was just set: start asking. Any thread, no GVL. */
void rbtrace_handoff_ask_start(void);
/* ... and was just cleared (GVL held, by the thread that waited). */
void rbtrace_handoff_ask_stop(void);
/* A forked child: what the parent's threads held is gone. Returns 0 if
 * the way still works, else -1. */
int rbtrace_handoff_ask_after_fork(void);
/* The app's thread that waits in the job now for ours to take the GVL,
 * or nil. Its status reads 'sleep' meanwhile. */
VALUE rbtrace_handoff_ask_yielder(void);

#endif
