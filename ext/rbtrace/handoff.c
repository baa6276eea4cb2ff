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
 * once ours has it, it says so (rbtrace_handoff_done). On Ruby 3.3+
 * (handoff_job.c, rb_postponed_job_trigger) a postponed job, run by
 * whichever thread holds the GVL, releases it until ours has it. Nothing
 * is signalled or woken; any busy thread passes it on.
 *
 * Before 3.3 nothing is asked, and a command waits up to a time slice per
 * hand-off behind a busy thread. A job cannot be triggered safely from
 * another thread there (https://bugs.ruby-lang.org/issues/19991); the one
 * other way, a trap on the main thread, touched the app: it interrupted
 * the main thread's GVL-free C calls, took the app's trap('URG'), and
 * needed the helper at a raised priority (removed for that).
 *
 * An app that is not busy never sees any of it: the GVL is free, and ours
 * has it before the delay is over.
 *
 * Work that can wait its turn asks nothing (RBTRACE_NOGVL_UNHURRIED):
 * --profile's drain, ten times a second. Asked for, ten hand-offs a
 * second upset the order in which the app's own busy threads take the
 * GVL: of two busy threads, one had 3 to 80 % of their CPU in a second
 * instead of half (Ruby 3.4 and 4.0; spec/e2e/profile_fairness_spec.rb). In turn,
 * ours takes the GVL when Ruby's time slices give it, like any thread.
 */
#include "handoff.h" /* first: ruby.h sets _GNU_SOURCE */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct rbtrace_handoff rbtrace_handoff;

/* How long RBTrace.handoff_wait_started waits for a thread to start, at
 * most (a thread starts in well under a millisecond), and how often it
 * looks. The app waits meanwhile: it is the GVL's holder that waits. */
#define HANDOFF_START_WAIT_NS 5000000L
#define HANDOFF_START_POLL_NS 20000L

static int handoff_ready; /* the way of asking works here */
static ID id_own_thread;  /* the mark of rbtrace's Ruby threads */
static ID id_native_thread_id;

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

struct rbtrace_nogvl_call {
    void *(*func)(void *);
    void *arg;
    rb_unblock_function_t *ubf;
    void *ubf_arg;
};

/* func, then a word that this thread now waits for the GVL (handoff.c),
 * unless func said the work can wait its turn. */
static void *rbtrace_nogvl_body(void *p)
{
    struct rbtrace_nogvl_call *c = p;

    if (c->func(c->arg) != RBTRACE_NOGVL_UNHURRIED) rbtrace_handoff_request();
    return NULL;
}

static VALUE rbtrace_nogvl_i(VALUE p)
{
    struct rbtrace_nogvl_call *c = (struct rbtrace_nogvl_call *)p;

    rb_thread_call_without_gvl(rbtrace_nogvl_body, c, c->ubf, c->ubf_arg);
    rbtrace_handoff_done();
    return Qnil;
}

/*
 * Runs func without the GVL. An interrupt for this thread (Thread#kill at
 * exit, Thread#raise) may be raised before or after func; it is caught:
 * -1, its state in *state, so that the caller finishes what it was doing (a
 * detach, an event) and then re-raises it with rb_jump_tag
 * (docs/DESIGN.md, "Errors"). 0 when none came. func may not have run at
 * all: callers check.
 */
int rbtrace_nogvl(void *(*func)(void *), void *arg, rb_unblock_function_t *ubf, void *ubf_arg,
                  int *state)
{
    struct rbtrace_nogvl_call c = { func, arg, ubf, ubf_arg };

    *state = 0;
    rb_protect(rbtrace_nogvl_i, (VALUE)&c, state);
    rbtrace_handoff_done(); /* also when an interrupt was raised */
    return *state ? -1 : 0;
}

void rbtrace_handoff_report_unavailable(const char *what, int err)
{
    static int reported;

    if (!reported)
        fprintf(stderr,
                "rbtrace: %s: %s (attaching to a busy process will take up to "
                "100 ms a command)\n",
                what, strerror(err));
    reported = 1;
}

void rbtrace_handoff_install(void)
{
    handoff_ready = rbtrace_handoff_ask_install() == 0;
}

void rbtrace_handoff_after_fork(void)
{
    rbtrace_handoff.wanted = 0;
    if (handoff_ready) handoff_ready = rbtrace_handoff_ask_after_fork() == 0;
}

/*
 * call-seq: RBTrace.handoff_asks? -> true or false
 *
 * Whether a busy thread is asked to pass the GVL on to ours (Ruby 3.3+).
 */
static VALUE handoff_asks_p_m(VALUE self)
{
    return handoff_ready ? Qtrue : Qfalse;
}

int rbtrace_handoff_own_thread_p(void)
{
    return RTEST(rb_thread_local_aref(rb_thread_current(), id_own_thread));
}

/*
 * call-seq: RBTrace.handoff_own_thread(thread = Thread.current) -> nil
 *
 * Marks thread as rbtrace's (the helper, an eval's thread): it is never
 * asked to pass the GVL on, being what the GVL is passed to. An eval's
 * thread is marked by the thread that starts it, before it can run: its
 * first interrupt check may run the job of the request made for it, and
 * unmarked it would pass the GVL on to itself until the asking gave up.
 */
static VALUE handoff_own_thread_m(int argc, VALUE *argv, VALUE self)
{
    VALUE thread = rb_check_arity(argc, 0, 1) ? argv[0] : rb_thread_current();

    if (!rb_obj_is_kind_of(thread, rb_cThread))
        rb_raise(rb_eTypeError, "RBTrace.handoff_own_thread: expected a Thread");
    rb_thread_local_aset(thread, id_own_thread, Qtrue);
    return Qnil;
}

/* The state letter of a /proc stat file (R, S, D, Z, ...), or 0 if it
 * cannot be read. Plain syscalls: no Ruby IO, which would let the GVL go. */
static char handoff_proc_state(const char *path)
{
    char buf[512];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) return 0;
    n = read(fd, buf, sizeof(buf));
    close(fd);
    /* "pid (comm) S ...": the name may hold spaces and parentheses. */
    while (n > 0 && buf[n - 1] != ')') n--;
    return n > 0 && n + 1 < (ssize_t)sizeof(buf) && buf[n] == ' ' ? buf[n + 1] : 0;
}

/*
 * call-seq: RBTrace.handoff_wait_started(thread) -> true or false
 *
 * Waits, GVL held (at most HANDOFF_START_WAIT_NS), until thread, just
 * created, has started: its native thread sleeps, waiting for the GVL.
 * false if it did not within that time, or this Ruby cannot tell (no
 * Thread#native_thread_id before 3.1, no /proc), or nothing is asked here
 * (before 3.3: there is nothing to wait for, and no reason to read /proc).
 *
 * Why: a native thread that starts points the VM's postponed jobs at its
 * own thread (3.3+: ruby_thread_set_native sets the ractor's running_ec,
 * GVL or not). Had this thread let the GVL go first, to a busy app
 * thread, the hand-off's job would flag the new thread, which waits,
 * instead of the busy one, until that one's time slice ends: a -e in
 * three took ~120 ms against a busy app. Once the new thread waits, the
 * next thread to take the GVL points them back at itself.
 */
static VALUE handoff_wait_started_m(VALUE self, VALUE thread)
{
    struct timespec pause = { 0, HANDOFF_START_POLL_NS };
    long waited = 0;

    if (!handoff_ready || !rb_respond_to(thread, id_native_thread_id)) return Qfalse;
    for (;;) {
        VALUE tid = rb_funcall(thread, id_native_thread_id, 0);

        if (FIXNUM_P(tid)) {
            char path[64];
            char state;

            snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", FIX2LONG(tid));
            state = handoff_proc_state(path);
            if (state == 'S') return Qtrue;
            if (state == 0) return Qfalse; /* /proc cannot tell */
        }
        if (waited >= HANDOFF_START_WAIT_NS) return Qfalse;
        nanosleep(&pause, NULL);
        waited += HANDOFF_START_POLL_NS;
    }
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
    rb_define_singleton_method(mod, "handoff_asks?", handoff_asks_p_m, 0);
    id_own_thread = rb_intern("__rbtrace_own_thread");
    rb_define_singleton_method(mod, "handoff_own_thread", handoff_own_thread_m, -1);
    id_native_thread_id = rb_intern("native_thread_id");
    rb_define_singleton_method(mod, "handoff_wait_started", handoff_wait_started_m, 1);
    rb_define_singleton_method(mod, "handoff_yielder", handoff_yielder_m, 0);
    rb_define_singleton_method(mod, "handoff_request", handoff_request_m, 0);
    rb_define_singleton_method(mod, "handoff_done", handoff_done_m, 0);
}
