/*
 * handoff.c - getting the GVL to rbtrace's own threads quickly while the
 * app's main thread is busy.
 *
 * The helper thread, and an eval's thread, wait for the GVL like any other
 * thread: behind a thread busy in Ruby that is one time slice of the VM's
 * scheduler (100 ms) per hand-off, and `rbtrace -p PID -e 1` needs several
 * (attach, eval there and back, detach): about 0.4 s.
 *
 * So a thread of ours that is about to wait for the GVL says so
 * (rbtrace_handoff_request) and arms a one-shot timer. If the GVL has not
 * come when the timer fires (RBTRACE_HANDOFF_DELAY_NS), the timer's SIGURG
 * is passed on to Ruby's own handler for SIGURG, whose trap (installed here)
 * runs RBTrace.handoff_yield on the main thread at its next interrupt check:
 * it passes the GVL on (Thread.pass) while one of our threads wants it. An
 * app that is not busy never sees any of this: the GVL is free, and the
 * timer is disarmed before it fires.
 *
 * Why a trap rather than the postponed job: yielding checks interrupts, and
 * an app's Thread#raise (a Timeout) delivered inside a postponed job would
 * be swallowed by the job runner; a trap proc is ordinary Ruby code on the
 * main thread, where it is raised as usual.
 *
 * The trap is set off only while the main thread is on a CPU: asleep
 * (in ConditionVariable#wait, IO, sleep) it does not hold the GVL, and a
 * trap would wake it for nothing. Limits: only the main thread yields so;
 * a busy thread other than main still keeps the GVL for its time slice.
 * And a main thread that runs C code without the GVL (a computation that
 * releases it) is woken like by any trapped signal (its unblocking
 * function runs).
 */
#include "rbtrace.h"  /* first: ruby.h sets _GNU_SOURCE */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id   /* glibc before 2.35 names it so */
#define sigev_notify_thread_id _sigev_un._tid
#endif

#ifdef HAVE_TIMER_CREATE
/* How long a thread of ours waits for the GVL before the main thread is
 * asked to yield it: longer than a free GVL takes, short against 100 ms. */
#define RBTRACE_HANDOFF_DELAY_NS 1000000L

/* How long the main thread keeps yielding, at most, per trap. */
#define RBTRACE_HANDOFF_YIELD_MAX_NS 5000000ull

/* Tells our timer's signal from a client's (si_value of the timer). */
#define RBTRACE_HANDOFF_MAGIC 0x72627467

static struct {
    volatile sig_atomic_t wanted;   /* a thread of ours waits for the GVL */
    struct sigaction ruby_urg;      /* Ruby's handler, which runs the trap */
    int trapped;                    /* ruby_urg is Ruby's trap handler */
    timer_t timer;
    pid_t timer_pid;                /* timers do not survive fork */
    pid_t timer_tid;                /* the thread it signals */
} handoff;

static void handoff_arm(long ns)
{
    struct itimerspec when;

    memset(&when, 0, sizeof(when));
    when.it_value.tv_nsec = ns;
    /* Failing costs only speed: the GVL comes at the next time slice. */
    (void)timer_settime(handoff.timer, 0, &when, NULL);
}

/*
 * The timer, made to signal this thread: a signal sent to the process
 * could go to the main thread, which is then on a CPU (running the
 * handler) whatever it was doing. Returns 0, or -1.
 */
static int handoff_timer(void)
{
    struct sigevent sev;
    pid_t tid = (pid_t)syscall(SYS_gettid);

    if (handoff.timer_pid == getpid() && handoff.timer_tid == tid) return 0;
    if (handoff.timer_pid == getpid()) timer_delete(handoff.timer);
    handoff.timer_pid = 0;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_notify_thread_id = tid;
    sev.sigev_signo = SIGURG;
    sev.sigev_value.sival_int = RBTRACE_HANDOFF_MAGIC;
    if (timer_create(CLOCK_MONOTONIC, &sev, &handoff.timer) != 0) {
        static int reported;

        if (!reported)
            fprintf(stderr, "rbtrace: timer_create: %s (attaching to a busy process will "
                    "take up to 100 ms a command)\n", strerror(errno));
        reported = 1;
        return -1;
    }
    handoff.timer_pid = getpid();
    handoff.timer_tid = tid;
    return 0;
}

/* A thread of ours is about to wait for the GVL (or, for an eval's thread
 * that is to start, the thread that starts it). GVL or not. */
void rbtrace_handoff_request(void)
{
    if (!handoff.trapped || handoff_timer() != 0) return;
    handoff.wanted = 1;
    handoff_arm(RBTRACE_HANDOFF_DELAY_NS);
}

/* ... and has it now. */
void rbtrace_handoff_done(void)
{
    if (!handoff.wanted) return;
    handoff.wanted = 0;
    handoff_arm(0);
}

/*
 * Whether the main thread is on a CPU (state R in /proc/self/stat, which
 * is the main thread's): then it is the one that keeps the GVL. Asleep, it
 * does not hold it, and a trap would only wake it: a spurious wakeup that
 * ConditionVariable#wait, for one, returns early from. Async-signal-safe.
 */
static int handoff_main_running(void)
{
    char buf[512];
    ssize_t n;
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);

    if (fd < 0) return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    /* "pid (comm) S ...": the name may hold spaces and parentheses. */
    while (n > 0 && buf[n - 1] != ')') n--;
    return n > 0 && n + 1 < (ssize_t)sizeof(buf) && buf[n] == ' ' && buf[n + 1] == 'R';
}

/*
 * From the SIGURG handler: whether the signal is our timer's, which is not
 * a command; if one of our threads still waits and the main thread is
 * busy, Ruby's handler is run so that the main thread runs the trap.
 */
int rbtrace_handoff_signal(int sig, siginfo_t *info, void *ctx)
{
    if (info == NULL || info->si_code != SI_TIMER ||
        info->si_value.sival_int != RBTRACE_HANDOFF_MAGIC)
        return 0;
    if (!handoff.wanted || !handoff_main_running()) return 1;
    if (handoff.ruby_urg.sa_flags & SA_SIGINFO)
        handoff.ruby_urg.sa_sigaction(sig, info, ctx);
    else
        handoff.ruby_urg.sa_handler(sig);
    return 1;
}

/*
 * call-seq: RBTrace.handoff_yield(signo = nil) -> nil
 *
 * The SIGURG trap, on the main thread: lets our waiting thread have the
 * GVL, and the next one of ours after it, for a few milliseconds at most.
 */
static VALUE handoff_yield_m(int argc, VALUE *argv, VALUE self)
{
    uint64_t start = rbtrace_now_ns();

    while (handoff.wanted && rbtrace_now_ns() - start < RBTRACE_HANDOFF_YIELD_MAX_NS)
        rb_thread_schedule();
    return Qnil;
}

/*
 * Sets Ruby's trap for SIGURG and keeps Ruby's handler, which ours (set
 * next, channel.c) passes our timer's signals on to.
 */
void rbtrace_handoff_install(void)
{
    VALUE signal = rb_path2class("Signal");
    VALUE trap = rb_obj_method(rbtrace_mRBTrace, ID2SYM(rb_intern("handoff_yield")));

    rb_funcall(signal, rb_intern("trap"), 2, rb_str_new_cstr("URG"), trap);
    if (sigaction(SIGURG, NULL, &handoff.ruby_urg) != 0)
        rb_sys_fail("rbtrace: sigaction(SIGURG)");
    handoff.trapped = (handoff.ruby_urg.sa_flags & SA_SIGINFO)
        ? handoff.ruby_urg.sa_sigaction != NULL
        : handoff.ruby_urg.sa_handler != SIG_DFL && handoff.ruby_urg.sa_handler != SIG_IGN;
}
#else
void rbtrace_handoff_request(void) {}
void rbtrace_handoff_done(void) {}
int rbtrace_handoff_signal(int sig, siginfo_t *info, void *ctx) { return 0; }
void rbtrace_handoff_install(void) {}

static VALUE handoff_yield_m(int argc, VALUE *argv, VALUE self)
{
    return Qnil;
}
#endif

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
    rb_define_singleton_method(mod, "handoff_request", handoff_request_m, 0);
    rb_define_singleton_method(mod, "handoff_done", handoff_done_m, 0);
}
