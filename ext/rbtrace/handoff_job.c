/*
 * handoff_job.c - asking for the GVL on Ruby 3.3 and later (handoff.c): a
 * postponed job that the thread holding the GVL runs, and that passes the
 * GVL on to ours. Before 3.3 nothing is asked (the stubs at the end).
 *
 * A thread of ours that is about to wait for the GVL posts `kick`. The
 * kicker, a native thread of ours (not a Ruby thread), waits
 * HANDOFF_JOB_DELAY_NS and then, every HANDOFF_JOB_DELAY_NS while ours
 * still waits, triggers the job. It has to be a thread Ruby does not
 * know: rb_postponed_job_trigger called on a Ruby thread flags that thread
 * (ours, which waits), and from any other thread the one that runs Ruby
 * now (the one holding the GVL). The kicker is started by the first
 * request and ends HANDOFF_KICKER_IDLE_NS after the last: a detached app
 * keeps no thread of it.
 *
 * The job releases the GVL with rb_thread_call_without_gvl2 and waits until
 * ours has it (RBTRACE_HANDOFF_YIELD_MAX_NS at most). That function never
 * runs interrupts: an app's Thread#raise (a Timeout) that arrives meanwhile
 * stays pending and is raised at the VM's next check as usual, not inside
 * the job, where the job runner would swallow it; the thread that waits in
 * the job is woken for it (the unblocking function below).
 *
 * Nothing here signals or wakes a thread that sleeps: a sleeping thread
 * does not hold the GVL, and runs a job only once it wakes by itself. Any
 * busy thread passes the GVL on, not only the main one. A thread inside one
 * long C call that keeps the GVL runs the job only when the call returns.
 */
#include "handoff.h" /* first: ruby.h sets _GNU_SOURCE */

#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <ruby/debug.h>
#include <ruby/thread.h>

/* How long a thread of ours waits for the GVL before the thread that holds
 * it is asked to pass it on: longer than a free GVL takes, short against
 * Ruby's 100 ms time slice. Also the period of the asking. An ask that
 * was not needed costs the app a GVL round trip. */
#define HANDOFF_JOB_DELAY_NS 250000L

/* How long the kicker waits for another request before it ends. */
#define HANDOFF_KICKER_IDLE_NS 200000000L

static struct {
    rb_postponed_job_handle_t job;
    pthread_mutex_t lock; /* for `taken`, the kicker's start and end */
    pthread_cond_t taken; /* ours has the GVL (CLOCK_MONOTONIC) */
    sem_t kick;           /* a thread of ours waits for the GVL */
    pid_t kicker_pid;     /* the kicker runs in this process (0: none) */
    VALUE yielder;        /* the thread in the job now, or nil */
    int closing;          /* the VM is ending: no more triggers */
} job_way;

/* What one run of the job waits on, without the GVL. */
struct handoff_job_wait {
    struct timespec deadline;
    int unblocked; /* Ruby wants this thread back (an interrupt) */
};

static void handoff_sleep_ns(long ns)
{
    struct timespec left = { 0, ns };

    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

/* Waits for a request: 0 when one came, -1 when the kicker is to end (idle
 * for long, or its semaphore failed). Requests are posted with the lock
 * held, so none is posted between the last look and the end. */
static int handoff_kicker_wait(void)
{
    struct timespec deadline;
    long ns;

    clock_gettime(CLOCK_REALTIME, &deadline); /* sem_timedwait's clock */
    ns = deadline.tv_nsec + HANDOFF_KICKER_IDLE_NS;
    deadline.tv_sec += ns / 1000000000L;
    deadline.tv_nsec = ns % 1000000000L;
    while (sem_timedwait(&job_way.kick, &deadline) != 0) {
        if (errno == EINTR) continue;
        pthread_mutex_lock(&job_way.lock);
        if (sem_trywait(&job_way.kick) == 0) {
            pthread_mutex_unlock(&job_way.lock);
            return 0;
        }
        job_way.kicker_pid = 0;
        pthread_mutex_unlock(&job_way.lock);
        return -1;
    }
    return 0;
}

static void *handoff_kicker(void *unused)
{
    while (handoff_kicker_wait() == 0) {
        int asks = 0;

        while (sem_trywait(&job_way.kick) == 0)
            ; /* one look serves every request so far */
        while (rbtrace_handoff.wanted && asks++ < RBTRACE_HANDOFF_MAX_ASKS) {
            handoff_sleep_ns(HANDOFF_JOB_DELAY_NS);
            /* Under the lock: never after handoff_job_end (freed queues). */
            pthread_mutex_lock(&job_way.lock);
            if (rbtrace_handoff.wanted && !job_way.closing) rb_postponed_job_trigger(job_way.job);
            pthread_mutex_unlock(&job_way.lock);
        }
    }
    return NULL;
}

/* Starts the kicker in this process unless it runs. Lock held. Every
 * signal blocked in it, so that none meant for the app (or SIGURG for
 * rbtrace) lands there. */
static int handoff_kicker_start(void)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, old;
    int err;

    if (job_way.kicker_pid == getpid()) return 0;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    err = pthread_create(&thread, &attr, handoff_kicker, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        rbtrace_handoff_report_unavailable("cannot start a thread", err);
        return -1;
    }
    job_way.kicker_pid = getpid();
    return 0;
}

static void *handoff_job_wait_nogvl(void *p)
{
    struct handoff_job_wait *w = p;

    pthread_mutex_lock(&job_way.lock);
    while (rbtrace_handoff.wanted && !w->unblocked &&
           pthread_cond_timedwait(&job_way.taken, &job_way.lock, &w->deadline) == 0)
        ;
    pthread_mutex_unlock(&job_way.lock);
    return NULL;
}

static void handoff_job_unblock(void *p)
{
    struct handoff_job_wait *w = p;

    pthread_mutex_lock(&job_way.lock);
    w->unblocked = 1;
    pthread_cond_broadcast(&job_way.taken);
    pthread_mutex_unlock(&job_way.lock);
}

/* The job, on the thread that holds the GVL: lets ours have it. */
static void handoff_job_i(void *unused)
{
    struct handoff_job_wait w;
    long ns;

    if (!rbtrace_handoff.wanted) return;
    /* The thread that waits has the GVL: it is about to say so. And one
     * of ours that has it is what ours wait for: it goes on. */
    if (rbtrace_handoff.requester == (pid_t)syscall(SYS_gettid) || rbtrace_handoff_own_thread_p())
        return;
    clock_gettime(CLOCK_MONOTONIC, &w.deadline);
    ns = w.deadline.tv_nsec + RBTRACE_HANDOFF_YIELD_MAX_NS;
    w.deadline.tv_sec += ns / 1000000000L;
    w.deadline.tv_nsec = ns % 1000000000L;
    w.unblocked = 0;
    job_way.yielder = rb_thread_current();
    rb_thread_call_without_gvl2(handoff_job_wait_nogvl, &w, handoff_job_unblock, &w);
    /* Another thread may have run the job meanwhile, and be in it still. */
    if (job_way.yielder == rb_thread_current()) job_way.yielder = Qnil;
}

void rbtrace_handoff_ask_start(void)
{
    pthread_mutex_lock(&job_way.lock);
    if (handoff_kicker_start() == 0) sem_post(&job_way.kick);
    pthread_mutex_unlock(&job_way.lock);
}

void rbtrace_handoff_ask_stop(void)
{
    pthread_mutex_lock(&job_way.lock);
    pthread_cond_broadcast(&job_way.taken);
    pthread_mutex_unlock(&job_way.lock);
}

/* Locks, condition and semaphore afresh: the threads that used them in the
 * parent are not in the child. The kicker starts again on first use.
 * Returns 0, or -1 if one of them could not be made. */
static int handoff_job_sync_init(void)
{
    pthread_condattr_t attr;
    int ok;

    if (pthread_condattr_init(&attr) != 0) return -1;
    ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
        pthread_cond_init(&job_way.taken, &attr) == 0 &&
        pthread_mutex_init(&job_way.lock, NULL) == 0 && sem_init(&job_way.kick, 0, 0) == 0;
    pthread_condattr_destroy(&attr);
    job_way.kicker_pid = 0;
    return ok ? 0 : -1;
}

int rbtrace_handoff_ask_after_fork(void)
{
    return handoff_job_sync_init();
}

/* An end proc: Ruby frees its postponed jobs' queue when the VM ends. */
static void handoff_job_end(VALUE unused)
{
    pthread_mutex_lock(&job_way.lock);
    job_way.closing = 1;
    pthread_mutex_unlock(&job_way.lock);
}

int rbtrace_handoff_ask_install(void)
{
    if (handoff_job_sync_init() != 0) return -1;
    job_way.yielder = Qnil;
    rb_gc_register_address(&job_way.yielder);
    rb_set_end_proc(handoff_job_end, Qnil);
    job_way.job = rb_postponed_job_preregister(0, handoff_job_i, NULL);
    return job_way.job != POSTPONED_JOB_HANDLE_INVALID ? 0 : -1;
}

VALUE rbtrace_handoff_ask_yielder(void)
{
    return job_way.yielder;
}

#else
/* Before Ruby 3.3 nothing is asked: a thread of ours that waits for the
 * GVL behind a busy thread has it at Ruby's next time slice (~100 ms).
 * A postponed job cannot be triggered safely from another thread there
 * (https://bugs.ruby-lang.org/issues/19991), and every other way touches
 * the app (a trap on its main thread interrupts its C calls). */
int rbtrace_handoff_ask_install(void)
{
    return -1;
}
void rbtrace_handoff_ask_start(void) {}
void rbtrace_handoff_ask_stop(void) {}
int rbtrace_handoff_ask_after_fork(void)
{
    return -1;
}
VALUE rbtrace_handoff_ask_yielder(void)
{
    return Qnil;
}
#endif
