/*
 * handoff.c - getting the GVL to rbtrace's own threads quickly while a
 * thread of the app is busy.
 *
 * The helper thread, and an eval's thread, wait for the GVL like any other
 * thread: behind a thread busy in Ruby that is one time slice of the VM's
 * scheduler (100 ms) per hand-off, and `rbtrace -p PID -e 1` needs several
 * (attach, eval there and back, detach): about 0.4 s.
 *
 * So a thread of ours that is about to wait for the GVL says so
 * (rbtrace_handoff_request). If the GVL has not come after a short delay
 * (well under a millisecond), the thread holding it is asked to pass it on;
 * once ours has it, it says so (rbtrace_handoff_done). How the holder is
 * asked depends on the Ruby:
 *
 * - handoff_job.c (3.3+, rb_postponed_job_trigger): a postponed job, run
 *   by whichever thread holds the GVL, releases it until ours has it.
 *   Nothing is signalled or woken; any busy thread passes it on.
 * - handoff_trap.c (before 3.3, where a job cannot be triggered safely from
 *   another thread): a trap on the main thread, set off only while the main
 *   thread is busy on a CPU; other busy threads keep their time slice.
 *
 * An app that is not busy never sees either: the GVL is free, and ours has
 * it before the delay is over.
 */
#include "rbtrace.h"  /* first: ruby.h sets _GNU_SOURCE */
#include "handoff.h"
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct rbtrace_handoff rbtrace_handoff;

static int handoff_ready;   /* the way of asking works here */
static ID id_own_thread;    /* the mark of rbtrace's Ruby threads */

/* A thread of ours is about to wait for the GVL (or, for an eval's thread
 * that is to start, the thread that starts it). GVL or not. */
void rbtrace_handoff_request(void)
{
    if (!handoff_ready) return;
    rbtrace_handoff.requester = (pid_t)syscall(SYS_gettid);
    rbtrace_handoff.wanted = 1;
    rbtrace_handoff_ask_start();
}

/* ... and has it now. */
void rbtrace_handoff_done(void)
{
    if (!rbtrace_handoff.wanted) return;
    rbtrace_handoff.wanted = 0;
    rbtrace_handoff_ask_stop();
}

void rbtrace_handoff_report_unavailable(const char *what, int err)
{
    static int reported;

    if (!reported)
        fprintf(stderr, "rbtrace: %s: %s (attaching to a busy process will take up to "
                "100 ms a command)\n", what, strerror(err));
    reported = 1;
}

void rbtrace_handoff_install(void)
{
    handoff_ready = rbtrace_handoff_ask_install();
}

void rbtrace_handoff_after_fork(void)
{
    rbtrace_handoff.wanted = 0;
    if (handoff_ready) handoff_ready = rbtrace_handoff_ask_after_fork();
}

/*
 * call-seq: RBTrace.handoff_yield(signo = nil) -> nil
 *
 * The SIGURG trap of handoff_trap.c, on the main thread; does nothing
 * where the GVL is asked for with a postponed job.
 */
static VALUE handoff_yield_m(int argc, VALUE *argv, VALUE self)
{
    return handoff_ready ? rbtrace_handoff_ask_yield() : Qnil;
}

int rbtrace_handoff_own_thread_p(void)
{
    return RTEST(rb_thread_local_aref(rb_thread_current(), id_own_thread));
}

/*
 * call-seq: RBTrace.handoff_own_thread -> nil
 *
 * Marks the current thread as rbtrace's (the helper, an eval's thread):
 * it is never asked to pass the GVL on, being what the GVL is passed to.
 */
static VALUE handoff_own_thread_m(VALUE self)
{
    rb_thread_local_aset(rb_thread_current(), id_own_thread, Qtrue);
    return Qnil;
}

/*
 * call-seq: RBTrace.handoff_yielder -> thread or nil
 *
 * The app's thread that is passing the GVL to one of ours right now, in
 * the postponed job (handoff_job.c): busy, though its status reads 'sleep'.
 */
static VALUE handoff_yielder_m(VALUE self)
{
    return handoff_ready ? rbtrace_handoff_ask_yielder() : Qnil;
}

/* call-seq: RBTrace.handoff_request -> nil (for lib/rbtrace/evaluator.rb) */
static VALUE handoff_request_m(VALUE self)
{
    rbtrace_handoff_request();
    return Qnil;
}

/* call-seq: RBTrace.handoff_done -> nil */
static VALUE handoff_done_m(VALUE self)
{
    rbtrace_handoff_done();
    return Qnil;
}

void Init_rbtrace_handoff(VALUE mod)
{
    rb_define_singleton_method(mod, "handoff_yield", handoff_yield_m, -1);
    id_own_thread = rb_intern("__rbtrace_own_thread");
    rb_define_singleton_method(mod, "handoff_own_thread", handoff_own_thread_m, 0);
    rb_define_singleton_method(mod, "handoff_yielder", handoff_yielder_m, 0);
    rb_define_singleton_method(mod, "handoff_request", handoff_request_m, 0);
    rb_define_singleton_method(mod, "handoff_done", handoff_done_m, 0);
}
