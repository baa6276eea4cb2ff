/*
 * handoff_trap.c - asking for the GVL before Ruby 3.3 (handoff.c): a trap
 * on the main thread, set off only while the main thread is busy.
 *
 * A thread of ours that waits for the GVL arms a timer aimed at itself,
 * every HANDOFF_TRAP_TICK_NS while it waits. At each tick the SIGURG
 * handler (channel.c) looks whether the main thread is busy, and if so
 * passes the signal on to Ruby's own handler for SIGURG, whose trap
 * (installed here) runs RBTrace.handoff_yield on the main thread at its
 * next interrupt check: it passes the GVL on (Thread.pass) while one of
 * our threads wants it. A request queues one trap at a time: a main thread
 * inside a long C call would otherwise run it once for every tick it missed.
 *
 * Why not a postponed job: before 3.3, rb_postponed_job_register_one from
 * another thread can race with a flush and run a stale job
 * (https://bugs.ruby-lang.org/issues/19991). Why a trap is safe for the
 * app: it is ordinary Ruby code on the main thread, so an app's Thread#raise
 * (a Timeout) arriving while it yields is raised there as usual.
 *
 * The danger is a main thread that sleeps (ConditionVariable#wait, IO,
 * sleep): it does not hold the GVL, and a trap would wake it, a spurious
 * wakeup that ConditionVariable#wait, for one, returns early from. So the
 * trap is set off only when the main thread is on a CPU (state R in
 * /proc/self/stat) *and* has used at least a quarter of a CPU since the
 * last tick (its CPU-time clock): a sleeping thread that wakes for a moment
 * (to run a signal handler, to take the GVL on its way to sleep again) is
 * running then, but uses microseconds. Where that clock cannot be read,
 * the trap is never set off and the GVL comes at the next time slice.
 *
 * Limits: only the main thread yields so; a busy thread other than main
 * keeps the GVL for its time slice. A main thread that runs C code without
 * the GVL (a computation that releases it) counts as busy, and is
 * interrupted like by any trapped signal (its unblocking function runs).
 */
#include "rbtrace.h"  /* first: ruby.h sets _GNU_SOURCE */
#include "handoff.h"

#if !defined(HAVE_RB_POSTPONED_JOB_PREREGISTER) && defined(HAVE_TIMER_CREATE)
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id   /* glibc before 2.35 names it so */
#define sigev_notify_thread_id _sigev_un._tid
#endif

/* The timer's period, also the first delay: longer than a free GVL takes,
 * short against Ruby's 100 ms time slice; and the window in which the main
 * thread must use a quarter of a CPU to count as busy: long enough that
 * the few Ruby calls a thread makes on its way to sleep do not. */
#define HANDOFF_TRAP_TICK_NS 1000000L

/* Tells our timer's signal from a client's (si_value of the timer). */
#define HANDOFF_TRAP_MAGIC 0x72627467

static struct {
    struct sigaction ruby_urg;      /* Ruby's handler, which runs the trap */
    timer_t timer;
    pid_t timer_pid;                /* timers do not survive fork */
    pid_t timer_tid;                /* the thread it signals */
    /* The main thread's CPU time (ns) at the last tick, and when. */
    volatile uint64_t main_cpu_ns;
    volatile uint64_t main_cpu_at;
    volatile sig_atomic_t ticks;    /* of this request */
    /* Ruby's handler was run and the trap has not started yet: later ticks
     * would only queue more runs of it (Ruby runs a trap once per signal),
     * one a millisecond while the main thread is in a long C call. */
    volatile sig_atomic_t trap_queued;
} trap_way;

/* Whether the main thread is on a CPU or waiting for one: state R in
 * /proc/self/stat, which is the main thread's. Async-signal-safe. */
static int handoff_main_running(void)
{
    return rbtrace_handoff_proc_state("/proc/self/stat") == 'R';
}

/*
 * The main thread's time on a CPU so far, in ns; 0 if unknown.
 * Async-signal-safe. The clock of a thread given by its tid is Linux's ABI
 * (what glibc's pthread_getcpuclockid computes): ~tid << 3, per thread (4),
 * scheduler time (2); the main thread's tid is the pid, also after a fork.
 * Not /proc/self/schedstat, which moves only at the scheduler's ticks
 * (every 4 ms here), too coarse for a 1 ms look.
 */
static uint64_t handoff_main_cpu_ns(void)
{
    /* Unsigned: shifting a negative int is undefined (UBSan says so). */
    clockid_t main_clock = (clockid_t)((~(unsigned int)getpid() << 3) | 6u);
    struct timespec ts;

    if (clock_gettime(main_clock, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Notes the main thread's CPU time now, for the next tick to compare. */
static void handoff_sample_main(void)
{
    trap_way.main_cpu_ns = handoff_main_cpu_ns();
    trap_way.main_cpu_at = rbtrace_now_ns();
}

/* Whether the main thread is busy: running now, and on a CPU for at least a
 * quarter of the time since the last sample. Takes the next sample. */
static int handoff_main_busy(void)
{
    uint64_t cpu0 = trap_way.main_cpu_ns, at0 = trap_way.main_cpu_at;
    uint64_t cpu, at;

    handoff_sample_main();
    cpu = trap_way.main_cpu_ns;
    at = trap_way.main_cpu_at;
    if (cpu0 == 0 || cpu < cpu0 || at <= at0) return 0;
    return (cpu - cpu0) * 4 >= at - at0 && handoff_main_running();
}

static void handoff_arm(long ns)
{
    struct itimerspec when;

    memset(&when, 0, sizeof(when));
    when.it_value.tv_nsec = ns;
    when.it_interval.tv_nsec = ns;
    /* Failing costs only speed: the GVL comes at the next time slice. */
    (void)timer_settime(trap_way.timer, 0, &when, NULL);
}

/*
 * The timer, made to signal the helper thread (or, before it runs, this
 * one): a signal sent to the process could go to the main thread, which is
 * then on a CPU (running the handler) whatever it was doing. Not the
 * requester: an eval's thread asks for the helper, which waits for it, and
 * then ends; a timer aimed at it would tick into a thread that is gone,
 * and the helper waited for the next time slice (100 ms). Returns 0, or -1.
 */
static int handoff_timer(void)
{
    struct sigevent sev;
    pid_t tid = rbtrace_handoff.helper ? rbtrace_handoff.helper : (pid_t)syscall(SYS_gettid);

    if (trap_way.timer_pid == getpid() && trap_way.timer_tid == tid) return 0;
    if (trap_way.timer_pid == getpid()) timer_delete(trap_way.timer);
    trap_way.timer_pid = 0;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_notify_thread_id = tid;
    sev.sigev_signo = SIGURG;
    sev.sigev_value.sival_int = HANDOFF_TRAP_MAGIC;
    if (timer_create(CLOCK_MONOTONIC, &sev, &trap_way.timer) != 0) {
        rbtrace_handoff_report_unavailable("timer_create", errno);
        return -1;
    }
    trap_way.timer_pid = getpid();
    trap_way.timer_tid = tid;
    return 0;
}

void rbtrace_handoff_ask_start(void)
{
    if (handoff_timer() != 0) return;
    handoff_sample_main();
    trap_way.ticks = 0;
    /* Each request may queue a trap, whatever became of the last one. */
    trap_way.trap_queued = 0;
    handoff_arm(HANDOFF_TRAP_TICK_NS);
}

void rbtrace_handoff_ask_stop(void)
{
    if (trap_way.timer_pid == getpid()) handoff_arm(0);
}

int rbtrace_handoff_ask_after_fork(void)
{
    trap_way.timer_pid = 0;   /* the parent's timer is not the child's */
    trap_way.trap_queued = 0;
    return 1;
}

/*
 * From the SIGURG handler: whether the signal is our timer's, which is not
 * a command; if one of our threads still waits and the main thread is
 * busy, Ruby's handler is run so that the main thread runs the trap.
 */
int rbtrace_handoff_signal(int sig, siginfo_t *info, void *ctx)
{
    if (info == NULL || info->si_code != SI_TIMER ||
        info->si_value.sival_int != HANDOFF_TRAP_MAGIC)
        return 0;
    if (!rbtrace_handoff.wanted || ++trap_way.ticks > RBTRACE_HANDOFF_MAX_ASKS) {
        handoff_arm(0);
        return 1;
    }
    if (trap_way.trap_queued) {
        /* Still sampled: once the trap has run, the next tick's look at the
         * main thread covers the last millisecond, not the whole wait. */
        handoff_sample_main();
        return 1;
    }
    if (!handoff_main_busy()) return 1;
    trap_way.trap_queued = 1;
    if (trap_way.ruby_urg.sa_flags & SA_SIGINFO)
        trap_way.ruby_urg.sa_sigaction(sig, info, ctx);
    else
        trap_way.ruby_urg.sa_handler(sig);
    return 1;
}

/* The trap, on the main thread: lets our waiting thread have the GVL, and
 * the next one of ours after it, for a few milliseconds at most. */
VALUE rbtrace_handoff_ask_yield(void)
{
    uint64_t start = rbtrace_now_ns();

    trap_way.trap_queued = 0;
    while (rbtrace_handoff.wanted && rbtrace_now_ns() - start < RBTRACE_HANDOFF_YIELD_MAX_NS)
        rb_thread_schedule();
    return Qnil;
}

/* The trap runs on the main thread, whose status stays 'run'. */
VALUE rbtrace_handoff_ask_yielder(void)
{
    return Qnil;
}

/*
 * Sets Ruby's trap for SIGURG and keeps Ruby's handler, which ours (set
 * next, channel.c) passes our timer's signals on to. Without the main
 * thread's CPU clock its business cannot be told: no trap then.
 */
int rbtrace_handoff_ask_install(void)
{
    VALUE signal = rb_path2class("Signal");
    VALUE trap = rb_obj_method(rbtrace_mRBTrace, ID2SYM(rb_intern("handoff_yield")));

    if (handoff_main_cpu_ns() == 0) return 0;
    rb_funcall(signal, rb_intern("trap"), 2, rb_str_new_cstr("URG"), trap);
    if (sigaction(SIGURG, NULL, &trap_way.ruby_urg) != 0)
        rb_sys_fail("rbtrace: sigaction(SIGURG)");
    return (trap_way.ruby_urg.sa_flags & SA_SIGINFO)
        ? trap_way.ruby_urg.sa_sigaction != NULL
        : trap_way.ruby_urg.sa_handler != SIG_DFL && trap_way.ruby_urg.sa_handler != SIG_IGN;
}
#elif !defined(HAVE_RB_POSTPONED_JOB_PREREGISTER)
/* Neither way: the GVL comes at the next time slice. */
int rbtrace_handoff_ask_install(void) { return 0; }
void rbtrace_handoff_ask_start(void) {}
void rbtrace_handoff_ask_stop(void) {}
int rbtrace_handoff_ask_after_fork(void) { return 0; }
VALUE rbtrace_handoff_ask_yield(void) { return Qnil; }
VALUE rbtrace_handoff_ask_yielder(void) { return Qnil; }
int rbtrace_handoff_signal(int sig, siginfo_t *info, void *ctx) { return 0; }
#endif
