/*
 * profile.c - --profile: samples the stack of every Ruby thread of the
 * main Ractor, hz times a second, wall or CPU time
 * (docs/DESIGN.md, "Sampling").
 *
 * Three parts, and what each may do:
 *
 * - the sampler, a native thread of ours (every signal blocked, never a
 *   Ruby call): at each tick it sends each app thread a real-time signal
 *   of its own (rt_tgsigqueueinfo, the thread's slot in the value). Wall
 *   mode signals every thread; cpu mode reads each thread's CPU clock and
 *   signals those that used at least a tick's worth since, with that
 *   many ticks as the sample's weight.
 * - the handler runs on the signalled thread itself, whatever it does
 *   (Ruby code, a C call, asleep, blocked on I/O or on the GVL): it reads
 *   its own frames with rb_profile_frames (what stackprof does in its
 *   handler) and its state, and copies them into a sample buffer shared
 *   by all threads (claimed by a compare-and-swap, no lock, no
 *   allocation). A thread without the GVL does not move its frames
 *   meanwhile; the one that holds it is stopped by the signal, as under
 *   stackprof. So every Ruby has one way: no rb_profile_thread_frames
 *   (3.3+), which runs on the GVL's holder only at a safe point, and
 *   would wait for it.
 * - the drain, with the GVL (the helper thread, woken by the sampler every
 *   PROF_DRAIN_NS): names the frames not seen yet (PROFILE_FRAME, once)
 *   and sends each sample as a list of frame ids (PROFILE_SAMPLE, an empty
 *   list when a thread's stack has not changed) into the ring like any
 *   other event.
 *
 * Samples that find the buffer full, a thread that has not taken the
 * tick before yet, or a sampler that woke late, are counted and reported
 * (PROFILE_MISSED), as lost events are.
 *
 * The app's own signals and timers are left alone: the signal is a
 * real-time one that nothing else in the process handles (chosen at the
 * first start, SA_RESTART), not SIGPROF or SIGALRM, and no itimer is set.
 * The handler stays installed once installed (a no-op when no profile
 * runs): a signal still queued when a profile ends must not meet the
 * default action, which ends the process.
 *
 * Threads: those alive at the start (Thread.list, but rbtrace's own) and
 * those started later (a THREAD_BEGIN hook; THREAD_END frees the slot).
 * Ruby 3.2+: a thread event hook keeps whether each waits for the GVL
 * (READY) or not (SUSPENDED), for the samples' state. Other Ractors' and
 * M:N threads are not sampled: --profile says so and does nothing there.
 * A forked child keeps nothing of it (rbtrace_trace_clear).
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "emit.h"
#include "profile.h"
#include "threadnames.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <ruby/debug.h>
#include <ruby/thread.h>


/* Threads sampled at most (others are said once, and not sampled). */
#define PROF_THREADS 256
/* Bytes of the sample buffer: at 1,000 Hz, 20 threads of 30 frames fill
 * it in about a second; it is drained ten times a second. */
#define PROF_BUF_SIZE (4u << 20)
/* How often the helper thread drains the buffer. */
#define PROF_DRAIN_NS 100000000L
/* Wall mode without the thread hooks: a thread that used less CPU than
 * this since its last sample has not run Ruby code (prof_wall_same). */
#define PROF_STILL_NS 50000
/* Frame ids table: slots, a power of two, grown when half full. */
#define PROF_FRAME_SLOTS 4096

struct prof_thread {
    pid_t tid;                /* its native thread (0: a free slot) */
    VALUE thread;             /* the Ruby Thread (Qnil once ended) */
    uint64_t self;            /* its thread pointer, known once it ran the handler or
                                  the BEGIN hook (0: not yet) */
    volatile int waiting_gvl; /* 3.2+: READY seen, RESUMED not yet */
    volatile int holds_gvl;   /* 3.2+: RESUMED seen, SUSPENDED not yet */
    volatile int known;       /* 3.2+: the hook has seen an event of it */
    volatile int ran;         /* 3.2+: RESUMED since its last sample */
    volatile int sampled;     /* the handler has taken a sample of it */
    volatile int pending;     /* signalled, the handler not yet run */
    volatile int on_cpu;      /* the kernel's word at the tick: running (R) */
    int stat_fd;              /* the sampler's: /proc/self/task/TID/stat, or -1 */
    pid_t stat_tid;           /* ... of this tid */
    uint32_t weight;          /* ticks the pending signal stands for (atomic: the sampler adds,
                                  the handler takes) */
    uint64_t cpu_ns;          /* its CPU clock: cpu mode, the sampler's at its last sample;
                                  wall mode, the handler's as it sampled */
    /* the drain's: the last stack sent for this slot, to send "the same" */
    uint64_t last_thread;
    uint32_t last_n;
    uint64_t last[RBTRACE_PROFILE_FRAMES_MAX];
};

/* A sample in the buffer: the header, then n frames. len is a multiple
 * of 8; ready is set last (release) by the handler that wrote it. A
 * record of kind skip fills the buffer's end when the next did not fit. */
struct prof_record {
    uint32_t len;
    uint32_t ready;
    uint32_t slot; /* UINT32_MAX: a skip record */
    uint32_t state;
    uint32_t weight;
    uint32_t n;
    uint64_t thread;
    uint64_t time_ns;
    VALUE frames[];
};

struct prof_frame_slot {
    VALUE frame; /* 0: empty */
    uint32_t id;
};

static struct {
    volatile int active; /* the handler samples */
    int mode;
    uint32_t hz;
    pid_t pid;     /* the process that started it (a forked child has none of it) */
    uid_t uid;     /* its real uid, for the signals' siginfo */
    int signo;     /* the signal, once chosen (0: not yet) */
    int installed; /* our handler is on signo */
    pthread_t sampler;
    int sampler_running;
    volatile int sampler_stop;
    volatile int in_handler; /* handlers running now (atomic) */
    volatile int drain_due;  /* the sampler asks the helper to drain */
    char *buf;               /* PROF_BUF_SIZE bytes, mmap'd */
    uint64_t head;           /* bytes claimed (atomic, handlers) */
    uint64_t tail;           /* bytes drained (the drain) */
    uint64_t missed;         /* samples missed, not yet reported (atomic) */
    uint64_t samples;        /* samples taken, ever (RBTrace.profile_stats) */
    uint32_t high;           /* slots in use are below this */
    struct prof_thread threads[PROF_THREADS];
    struct prof_frame_slot *frames; /* frame -> id */
    uint32_t frame_slots, frames_used, next_frame_id;
    VALUE hook_threads; /* the THREAD_BEGIN/END hook is in place (Qtrue) */
#ifdef RBTRACE_HAVE_GVL_HOOK
    rb_internal_thread_event_hook_t *gvl_hook;
#endif
} prof;

static uint64_t prof_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t prof_self(void)
{
#ifdef RBTRACE_HAVE_THREAD_POINTER
    return (uint64_t)(uintptr_t)__builtin_thread_pointer();
#else
    return (uint64_t)pthread_self();
#endif
}

/* ---- the handler ---- */

/* Claims len bytes of the buffer (a multiple of 8); NULL when full. */
static struct prof_record *prof_claim(uint32_t len)
{
    uint64_t head, tail, need, off;
    struct prof_record *skip;

    for (;;) {
        head = __atomic_load_n(&prof.head, __ATOMIC_RELAXED);
        tail = __atomic_load_n(&prof.tail, __ATOMIC_ACQUIRE);
        off = head & (PROF_BUF_SIZE - 1);
        need = off + len > PROF_BUF_SIZE ? PROF_BUF_SIZE - off + len : len;
        if (head + need - tail > PROF_BUF_SIZE) return NULL;
        if (__atomic_compare_exchange_n(&prof.head, &head, head + need, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            break;
    }
    if (need != len) {
        skip = (struct prof_record *)(prof.buf + off);
        skip->len = (uint32_t)(PROF_BUF_SIZE - off);
        skip->slot = UINT32_MAX;
        __atomic_store_n(&skip->ready, 1, __ATOMIC_RELEASE);
        off = 0;
    }
    return (struct prof_record *)(prof.buf + off);
}

/* The thread's state at the tick: on a CPU or not, as the kernel said to
 * the sampler just before the signal (the signal itself wakes a sleeping
 * thread); off it, waiting for the GVL where the thread hooks said so
 * (3.2+), else blocked; on it while the collector runs, in GC. */
static uint32_t prof_state(const struct prof_thread *t)
{
    if (t->on_cpu) return rb_during_gc() ? RBTRACE_STATE_GC : RBTRACE_STATE_RUNNING;
    return t->waiting_gvl ? RBTRACE_STATE_GVL : RBTRACE_STATE_BLOCKED;
}

static void prof_sample(struct prof_thread *t, uint32_t slot)
{
    VALUE frames[RBTRACE_PROFILE_FRAMES_MAX];
    int lines[RBTRACE_PROFILE_FRAMES_MAX];
    struct prof_record *r;
    int n;
    uint32_t len, weight = __atomic_exchange_n(&t->weight, 0, __ATOMIC_ACQ_REL);

    if (!weight) weight = 1;
    if (!t->self) t->self = prof_self();
    t->ran = 0;
    n = rb_profile_frames(0, RBTRACE_PROFILE_FRAMES_MAX, frames, lines);
    if (n < 0) n = 0;
    len = (uint32_t)(sizeof(*r) + (size_t)n * sizeof(VALUE));
    len = (len + 7) & ~7u;
    if ((r = prof_claim(len)) == NULL) {
        __atomic_fetch_add(&prof.missed, weight, __ATOMIC_RELAXED);
        return;
    }
    r->len = len;
    r->slot = slot;
    r->state = prof.mode == RBTRACE_PROFILE_CPU ? RBTRACE_STATE_RUNNING : prof_state(t);
    r->weight = weight;
    r->n = (uint32_t)n;
    r->thread = t->self;
    r->time_ns = prof_now_ns();
    memcpy(r->frames, frames, (size_t)n * sizeof(VALUE));
    __atomic_fetch_add(&prof.samples, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
    if (prof.mode == RBTRACE_PROFILE_WALL) {
        struct timespec ts;

        /* Where its CPU clock stands now (prof_wall_same). */
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
            t->cpu_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    t->sampled = 1;
}

/* The sampler's sample of a thread that has not held the GVL since its
 * last one (3.2+): its Ruby frames cannot have changed, so it is not
 * signalled (a sleeping thread is not woken); the sample says "the same
 * stack" (no frames). */
static void prof_sample_same(struct prof_thread *t, uint32_t slot, uint32_t weight)
{
    struct prof_record *r = prof_claim((uint32_t)sizeof(*r));

    if (!r) {
        __atomic_fetch_add(&prof.missed, weight, __ATOMIC_RELAXED);
        return;
    }
    r->len = (uint32_t)sizeof(*r);
    r->slot = slot;
    r->state = t->waiting_gvl ? RBTRACE_STATE_GVL : RBTRACE_STATE_BLOCKED;
    r->weight = weight;
    r->n = 0;
    r->thread = t->self;
    r->time_ns = prof_now_ns();
    __atomic_fetch_add(&prof.samples, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&r->ready, 1, __ATOMIC_RELEASE);
}

static void prof_handler(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    uint32_t slot;
    struct prof_thread *t;

    (void)sig;
    (void)uc;
    __atomic_fetch_add(&prof.in_handler, 1, __ATOMIC_ACQUIRE);
    /* Only our sampler's signals: queued by this process (prof.pid: no
     * getpid system call a sample), naming a slot whose thread is this one. */
    if (!__atomic_load_n(&prof.active, __ATOMIC_ACQUIRE) || si->si_code != SI_QUEUE ||
        si->si_pid != prof.pid)
        goto out;
    slot = (uint32_t)si->si_value.sival_int;
    if (slot >= PROF_THREADS) goto out;
    t = &prof.threads[slot];
    /* This thread's slot? Its thread pointer once known (one instruction),
     * its tid the first time (a system call). */
    if (t->self ? t->self != prof_self() || !__atomic_load_n(&t->tid, __ATOMIC_ACQUIRE)
                : __atomic_load_n(&t->tid, __ATOMIC_ACQUIRE) != (pid_t)syscall(SYS_gettid))
        goto out;
    prof_sample(t, slot);
    __atomic_store_n(&t->pending, 0, __ATOMIC_RELEASE);
out:
    __atomic_fetch_sub(&prof.in_handler, 1, __ATOMIC_RELEASE);
    errno = saved;
}

/* ---- the sampler ---- */

/* A thread's CPU clock, by its tid (what pthread_getcpuclockid makes). */
static uint64_t prof_thread_cpu_ns(pid_t tid, int *ok)
{
    struct timespec ts;
    clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6);

    if (clock_gettime(clock, &ts) != 0) {
        *ok = 0;
        return 0;
    }
    *ok = 1;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Whether the kernel has the thread running or runnable (R in its stat
 * file, read through a descriptor kept open: one pread a tick). Unknown
 * counts as running. */
static int prof_on_cpu(struct prof_thread *t, pid_t tid)
{
    char path[64], buf[256], *p;
    ssize_t n;

    if (t->stat_fd >= 0 && t->stat_tid != tid) {
        close(t->stat_fd);
        t->stat_fd = -1;
    }
    if (t->stat_fd < 0) {
        snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
        if ((t->stat_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return 1;
        t->stat_tid = tid;
    }
    n = pread(t->stat_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return 1;
    buf[n] = '\0';
    /* "tid (comm) S ...": comm may hold spaces and parentheses. */
    if (!(p = strrchr(buf, ')')) || p[1] != ' ') return 1;
    return p[2] == 'R';
}

static void prof_close_stats(void)
{
    uint32_t i;

    for (i = 0; i < PROF_THREADS; i++)
        if (prof.threads[i].stat_fd >= 0) {
            close(prof.threads[i].stat_fd);
            prof.threads[i].stat_fd = -1;
        }
}

static void prof_signal(pid_t tid, uint32_t slot)
{
    siginfo_t info;

    memset(&info, 0, sizeof(info));
    info.si_signo = prof.signo;
    info.si_code = SI_QUEUE;
    info.si_pid = prof.pid;
    info.si_uid = prof.uid;
    info.si_value.sival_int = (int)slot;
    /* Fails for a thread that just ended (ESRCH): its slot goes soon. */
    (void)syscall(SYS_rt_tgsigqueueinfo, prof.pid, tid, prof.signo, &info);
}

/* Wall mode: whether the thread cannot have moved its Ruby frames since
 * its last sample, so needs no signal (a sleeping thread is not woken).
 * 3.2+, once the hook has seen it: it has not held the GVL since. Else
 * (3.1, or not seen yet): its CPU clock has not moved since it was last
 * signalled (a thread waiting for the GVL or blocked uses none). */
static int prof_wall_same(struct prof_thread *t, pid_t tid)
{
    int ok;
    uint64_t cpu;

    if (t->known && t->sampled && t->self) return !t->holds_gvl && !t->ran;
    cpu = prof_thread_cpu_ns(tid, &ok);
    /* The handler's return and the thread's way back to its wait use some
     * microseconds after the handler read its clock. */
    return ok && t->sampled && t->self && cpu - t->cpu_ns < PROF_STILL_NS;
}

static void prof_tick(uint64_t period_ns, uint32_t ticks)
{
    uint32_t i, high = __atomic_load_n(&prof.high, __ATOMIC_ACQUIRE);

    for (i = 0; i < high; i++) {
        struct prof_thread *t = &prof.threads[i];
        pid_t tid = __atomic_load_n(&t->tid, __ATOMIC_ACQUIRE);
        uint32_t weight = ticks;

        if (tid == 0) continue;
        if (prof.mode == RBTRACE_PROFILE_CPU) {
            int ok;
            uint64_t cpu = prof_thread_cpu_ns(tid, &ok);

            if (!ok) continue;
            if (t->cpu_ns == 0 || cpu < t->cpu_ns) t->cpu_ns = cpu;
            if (cpu - t->cpu_ns < period_ns) continue;
            weight = (uint32_t)((cpu - t->cpu_ns) / period_ns);
            t->cpu_ns += (uint64_t)weight * period_ns;
        }
        if (__atomic_load_n(&t->pending, __ATOMIC_ACQUIRE)) {
            /* The thread has not taken the last tick yet (a loaded machine
             * has not run it): its sample, when it comes, stands for this
             * tick too, as for a sampler that woke late. */
            __atomic_fetch_add(&t->weight, weight, __ATOMIC_ACQ_REL);
            continue;
        }
        if (prof.mode == RBTRACE_PROFILE_WALL && prof_wall_same(t, tid)) {
            prof_sample_same(t, i, weight);
            continue;
        }
        __atomic_fetch_add(&t->weight, weight, __ATOMIC_ACQ_REL);
        /* The state: the GVL's, where the hook has seen the thread, else
         * the kernel's. */
        t->on_cpu = prof.mode == RBTRACE_PROFILE_CPU ||
            (t->known ? t->holds_gvl : prof_on_cpu(t, tid));
        __atomic_store_n(&t->pending, 1, __ATOMIC_RELEASE);
        prof_signal(tid, i);
    }
}

static void prof_add_ns(struct timespec *ts, uint64_t ns)
{
    ns += (uint64_t)ts->tv_nsec;
    ts->tv_sec += (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

static void *prof_sampler_main(void *unused)
{
    uint64_t period = 1000000000ull / prof.hz, since_drain = 0, now, due;
    struct timespec next;
    sigset_t all;

    (void)unused;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!prof.sampler_stop) {
        uint32_t ticks = 1;

        prof_add_ns(&next, period);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
            ;
        if (prof.sampler_stop) break;
        /* Woke late (a loaded machine): the ticks slept through count as
         * one sample each of weight ticks; wall mode's weight, cpu mode's
         * clocks say it anyway. */
        now = prof_now_ns();
        due = (uint64_t)next.tv_sec * 1000000000ull + (uint64_t)next.tv_nsec;
        if (now > due + period) {
            ticks += (uint32_t)((now - due) / period);
            prof_add_ns(&next, (uint64_t)(ticks - 1) * period);
        }
        prof_tick(period, ticks);
        since_drain += (uint64_t)ticks * period;
        if (since_drain >= PROF_DRAIN_NS) {
            since_drain = 0;
            prof.drain_due = 1;
            rbtrace_channel_wake();
        }
    }
    return NULL;
}

/* ---- threads ---- */

/* A slot for the thread (GVL held); -1 if none is left. */
static int prof_thread_add(VALUE thread, pid_t tid, uint64_t self)
{
    uint32_t i;

    for (i = 0; i < PROF_THREADS; i++) {
        struct prof_thread *t = &prof.threads[i];

        if (t->tid != 0) continue;
        t->thread = thread;
        t->self = self;
        t->on_cpu = 1;
        t->holds_gvl = t->known = t->ran = t->sampled = 0;
        t->waiting_gvl = 0;
        t->pending = 0;
        t->cpu_ns = 0;
        t->last_thread = 0;
        t->last_n = 0;
        __atomic_store_n(&t->tid, tid, __ATOMIC_RELEASE);
        if (i + 1 > prof.high) __atomic_store_n(&prof.high, i + 1, __ATOMIC_RELEASE);
        return (int)i;
    }
    return -1;
}

static void prof_thread_remove(pid_t tid)
{
    uint32_t i;

    for (i = 0; i < prof.high; i++)
        if (prof.threads[i].tid == tid) {
            __atomic_store_n(&prof.threads[i].tid, 0, __ATOMIC_RELEASE);
            prof.threads[i].thread = Qnil;
        }
}

static int prof_own_thread(VALUE thread)
{
    return RTEST(rb_thread_local_aref(thread, rb_intern("__rbtrace_own_thread")));
}

/* THREAD_BEGIN and THREAD_END, on the thread itself, GVL held. */
static void prof_thread_hook_i(rb_event_flag_t event, VALUE data, VALUE self, ID mid, VALUE klass)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);

    (void)data, (void)self, (void)mid, (void)klass;
    if (!prof.active) return;
    if (event & RUBY_EVENT_THREAD_END) {
        prof_thread_remove(tid);
        return;
    }
    if (prof_own_thread(rb_thread_current())) return;
    prof_thread_add(rb_thread_current(), tid, prof_self());
}

static VALUE prof_add_existing_i(VALUE unused)
{
    VALUE list = rb_funcall(rb_cThread, rb_intern("list"), 0);
    ID id_tid = rb_intern("native_thread_id");
    long i;

    (void)unused;
    for (i = 0; i < RARRAY_LEN(list); i++) {
        VALUE th = RARRAY_AREF(list, i), tid;

        if (prof_own_thread(th)) continue;
        tid = rb_funcall(th, id_tid, 0);
        if (!FIXNUM_P(tid)) continue; /* not started, or ended */
        prof_thread_add(th, (pid_t)FIX2LONG(tid), th == rb_thread_current() ? prof_self() : 0);
    }
    return Qnil;
}

#ifdef RBTRACE_HAVE_GVL_HOOK
/* The slot of the thread the event is of; NULL if none. */
static struct prof_thread *prof_event_thread(const rb_internal_thread_event_data_t *data)
{
    uint32_t i;
#ifdef HAVE_RB_INTERNAL_THREAD_EVENT_DATA_T_THREAD
    VALUE th = data->thread;

    for (i = 0; i < prof.high; i++)
        if (prof.threads[i].tid && prof.threads[i].thread == th) return &prof.threads[i];
#else
    uint64_t self = prof_self();

    (void)data;
    for (i = 0; i < prof.high; i++)
        if (prof.threads[i].tid && prof.threads[i].self == self) return &prof.threads[i];
#endif
    return NULL;
}

/* No Ruby call, no allocation: runs with or without the GVL. */
static void prof_gvl_hook_i(rb_event_flag_t event, const rb_internal_thread_event_data_t *data,
                            void *unused)
{
    struct prof_thread *t = prof_event_thread(data);

    (void)unused;
    if (!t) return;
    if (event & RUBY_INTERNAL_THREAD_EVENT_READY) {
        t->waiting_gvl = 1;
    } else if (event & RUBY_INTERNAL_THREAD_EVENT_RESUMED) {
        t->waiting_gvl = 0;
        t->holds_gvl = 1;
        t->ran = 1;
    } else {
        t->waiting_gvl = 0;
        t->holds_gvl = 0;
    }
    t->known = 1;
}
#endif

/* ---- the drain ---- */

static int prof_frames_grow(void)
{
    uint32_t slots = prof.frame_slots ? prof.frame_slots * 2 : PROF_FRAME_SLOTS, i;
    struct prof_frame_slot *table = calloc(slots, sizeof(*table));

    if (!table) return -1;
    for (i = 0; i < prof.frame_slots; i++) {
        const struct prof_frame_slot *old = &prof.frames[i];
        uint32_t j;

        if (!old->frame) continue;
        for (j = (uint32_t)((old->frame >> 3) * 0x9E3779B97F4A7C15ull >> 40) & (slots - 1);
             table[j].frame; j = (j + 1) & (slots - 1))
            ;
        table[j] = *old;
    }
    free(prof.frames);
    prof.frames = table;
    prof.frame_slots = slots;
    return 0;
}

static VALUE prof_frame_name_i(VALUE frame)
{
    return rb_profile_frame_full_label(frame);
}

static VALUE prof_frame_path_i(VALUE frame)
{
    return rb_profile_frame_path(frame);
}

static VALUE prof_frame_line_i(VALUE frame)
{
    return rb_profile_frame_first_lineno(frame);
}

/* The frame's id, naming it first if new; 0 if it could not be named. */
static uint32_t prof_frame_id(VALUE frame)
{
    uint32_t j;
    VALUE name, path, line;
    int state = 0;
    uint64_t lineno;

    if (prof.frames_used * 2 >= prof.frame_slots && prof_frames_grow() != 0) return 0;
    for (j = (uint32_t)((frame >> 3) * 0x9E3779B97F4A7C15ull >> 40) & (prof.frame_slots - 1);
         prof.frames[j].frame; j = (j + 1) & (prof.frame_slots - 1))
        if (prof.frames[j].frame == frame) return prof.frames[j].id;
    name = rbtrace_protect(prof_frame_name_i, frame, &state, NULL);
    if (state || !RB_TYPE_P(name, T_STRING)) name = rb_str_new_cstr("(unknown)");
    path = rbtrace_protect(prof_frame_path_i, frame, &state, NULL);
    line = rbtrace_protect(prof_frame_line_i, frame, &state, NULL);
    lineno = FIXNUM_P(line) && FIX2LONG(line) > 0 ? (uint64_t)FIX2LONG(line) : 0;
    if (rbtrace_emit_profile_frame(prof.next_frame_id, RSTRING_PTR(name), (size_t)RSTRING_LEN(name),
                                   RB_TYPE_P(path, T_STRING) ? RSTRING_PTR(path) : "",
                                   RB_TYPE_P(path, T_STRING) ? (size_t)RSTRING_LEN(path) : 0,
                                   lineno) != 0)
        return 0;
    prof.frames[j].frame = frame;
    prof.frames[j].id = prof.next_frame_id++;
    prof.frames_used++;
    return prof.frames[j].id;
}

static void prof_send(const struct prof_record *r)
{
    uint64_t ids[RBTRACE_PROFILE_FRAMES_MAX];
    struct prof_thread *t = &prof.threads[r->slot];
    uint64_t at = r->time_ns > rbtrace.clock_origin_ns ? r->time_ns - rbtrace.clock_origin_ns : 0;
    uint32_t i, n = r->n;

    if (n == 0 && t->last_thread != r->thread) {
        /* "the same stack" of a thread whose last was not sent */
        __atomic_fetch_add(&prof.missed, r->weight, __ATOMIC_RELAXED);
        return;
    }
    for (i = 0; i < n; i++)
        if ((ids[i] = prof_frame_id(r->frames[i])) == 0) {
            __atomic_fetch_add(&prof.missed, r->weight, __ATOMIC_RELAXED);
            t->last_thread = 0;
            return;
        }
    if (t->last_thread == r->thread && t->last_n == n && n > 0 &&
        memcmp(t->last, ids, n * sizeof(ids[0])) == 0)
        n = 0; /* the same stack as its sample before */
    if (rbtrace_emit_profile_sample(r->thread, at, r->state, r->weight, ids, n) != 0) {
        t->last_thread = 0;
        return;
    }
    if (n) {
        memcpy(t->last, ids, n * sizeof(ids[0]));
        t->last_n = n;
        t->last_thread = r->thread;
    }
}

/* Sends what the handlers put in the buffer, GVL held. */
void rbtrace_profile_drain(void)
{
    uint64_t head, missed;
    uint32_t i;

    prof.drain_due = 0;
    if (!prof.buf) return;
    /* the threads named (THREAD_NAME, when new or changed) before their samples */
    for (i = 0; i < prof.high; i++)
        if (prof.threads[i].tid && prof.threads[i].self && prof.threads[i].thread != Qnil)
            rbtrace_thread_name_of(prof.threads[i].thread, prof.threads[i].self);
    head = __atomic_load_n(&prof.head, __ATOMIC_ACQUIRE);
    while (prof.tail != head) {
        struct prof_record *r = (struct prof_record *)(prof.buf +
                                                       (prof.tail & (PROF_BUF_SIZE - 1)));
        uint32_t len;

        if (!__atomic_load_n(&r->ready, __ATOMIC_ACQUIRE)) break; /* still being written */
        len = r->len;
        if (r->slot != UINT32_MAX && rbtrace.attached) prof_send(r);
        /* Zeroed: the next lap's ready flags may fall anywhere in it. */
        memset(r, 0, len);
        __atomic_store_n(&prof.tail, prof.tail + len, __ATOMIC_RELEASE);
    }
    missed = __atomic_exchange_n(&prof.missed, 0, __ATOMIC_RELAXED);
    if (missed && rbtrace_emit_profile_missed(missed) != 0)
        __atomic_fetch_add(&prof.missed, missed, __ATOMIC_RELAXED);
}

int rbtrace_profile_drain_due(void)
{
    return prof.drain_due;
}

/* ---- start and stop ---- */

/* A real-time signal nothing else handles here; 0 if none. */
static int prof_choose_signal(void)
{
    int sig;

    for (sig = SIGRTMAX - 2; sig >= SIGRTMIN + 2; sig--) {
        struct sigaction cur;

        if (sigaction(sig, NULL, &cur) != 0) continue;
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) return sig;
    }
    return 0;
}

static int prof_install_handler(void)
{
    struct sigaction sa;

    if (prof.installed) return 0;
    if (!prof.signo && (prof.signo = prof_choose_signal()) == 0) return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = prof_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(prof.signo, &sa, NULL) != 0) return -1;
    prof.installed = 1;
    return 0;
}

static VALUE prof_ractor_count_i(VALUE unused)
{
    (void)unused;
    if (!rb_const_defined(rb_cObject, rb_intern("Ractor"))) return INT2FIX(1);
    return rb_funcall(rb_const_get(rb_cObject, rb_intern("Ractor")), rb_intern("count"), 0);
}

void rbtrace_profile_start(uint32_t mode, uint32_t hz)
{
    uint32_t i;
    int state = 0;
    VALUE n;
    void *buf;

    if (prof.active) {
        rbtrace_emit_message(RBTRACE_EV_ERROR, "--profile: a profile runs already");
        return;
    }
    if (mode > RBTRACE_PROFILE_CPU || hz == 0 || hz > RBTRACE_PROFILE_HZ_MAX) {
        rbtrace_emit_message(RBTRACE_EV_ERROR, "--profile: mode %u at %u Hz is not one to run",
                             mode, hz);
        return;
    }
    if (rbtrace_mn_threads) {
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "--profile: process %d runs M:N threads (RUBY_MN_THREADS=1), "
                             "whose Ruby threads share native threads: nothing is sampled",
                             (int)getpid());
        return;
    }
    n = rbtrace_protect(prof_ractor_count_i, Qnil, &state, NULL);
    if (!state && FIXNUM_P(n) && FIX2LONG(n) > 1)
        rbtrace_emit_message(RBTRACE_EV_NOTICE,
                             "--profile: process %d runs other Ractors: the main Ractor's "
                             "threads only are sampled",
                             (int)getpid());
    if (prof_install_handler() != 0) {
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "--profile: no real-time signal is free for the sampler: nothing "
                             "is sampled");
        return;
    }
    buf = mmap(NULL, PROF_BUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        rbtrace_emit_message(RBTRACE_EV_ERROR, "--profile: no memory for the samples (%s)",
                             strerror(errno));
        return;
    }
    prof.buf = buf;
    prof.head = prof.tail = 0;
    prof.missed = 0;
    prof.mode = (int)mode;
    prof.hz = hz;
    prof.pid = getpid();
    prof.uid = getuid();
    prof.high = 0;
    memset(prof.threads, 0, sizeof(prof.threads));
    for (i = 0; i < PROF_THREADS; i++) prof.threads[i].stat_fd = -1;
    prof.frames_used = 0;
    prof.next_frame_id = 1;
    rbtrace_thread_names_forget(); /* this session's client has none of them */
    prof.active = 1;
    rb_add_event_hook(prof_thread_hook_i, RUBY_EVENT_THREAD_BEGIN | RUBY_EVENT_THREAD_END, Qnil);
    prof.hook_threads = Qtrue;
    rbtrace_protect(prof_add_existing_i, Qnil, &state, NULL);
#ifdef RBTRACE_HAVE_GVL_HOOK
    prof.gvl_hook = rb_internal_thread_add_event_hook(prof_gvl_hook_i,
                                                      RUBY_INTERNAL_THREAD_EVENT_READY |
                                                          RUBY_INTERNAL_THREAD_EVENT_RESUMED |
                                                          RUBY_INTERNAL_THREAD_EVENT_SUSPENDED,
                                                      NULL);
#endif
    prof.sampler_stop = 0;
    if (pthread_create(&prof.sampler, NULL, prof_sampler_main, NULL) != 0) {
        rbtrace_emit_message(RBTRACE_EV_ERROR, "--profile: could not start the sampler (%s)",
                             strerror(errno));
        rbtrace_profile_stop();
        return;
    }
    prof.sampler_running = 1;
}

void rbtrace_profile_stop(void)
{
    int child = prof.pid != getpid();

    if (!prof.active && !prof.buf) return;
    __atomic_store_n(&prof.active, 0, __ATOMIC_RELEASE);
    if (prof.sampler_running) {
        prof.sampler_stop = 1;
        if (!child) pthread_join(prof.sampler, NULL);
        prof.sampler_running = 0;
    }
    if (prof.hook_threads == Qtrue) {
        rb_remove_event_hook(prof_thread_hook_i);
        prof.hook_threads = Qfalse;
    }
#ifdef RBTRACE_HAVE_GVL_HOOK
    if (prof.gvl_hook) {
        rb_internal_thread_remove_event_hook(prof.gvl_hook);
        prof.gvl_hook = NULL;
    }
#endif
    /* Handlers that passed the active test before it was cleared end
     * in a few microseconds; later signals find it clear. */
    if (!child)
        while (__atomic_load_n(&prof.in_handler, __ATOMIC_ACQUIRE)) sched_yield();
    if (!child && rbtrace.attached) rbtrace_profile_drain();
    prof_close_stats();
    if (prof.buf) munmap(prof.buf, PROF_BUF_SIZE);
    prof.buf = NULL;
    free(prof.frames);
    prof.frames = NULL;
    prof.frame_slots = prof.frames_used = 0;
    memset(prof.threads, 0, sizeof(prof.threads));
    prof.high = 0;
    prof.drain_due = 0;
}

int rbtrace_profile_active(void)
{
    return prof.active;
}

/* The named frames and the samples not yet drained are kept alive, and
 * in place (their addresses are the table's keys). */
void rbtrace_profile_mark(void)
{
    uint32_t i;
    uint64_t at, head;

    for (i = 0; i < prof.frame_slots; i++)
        if (prof.frames[i].frame) rb_gc_mark(prof.frames[i].frame);
    for (i = 0; i < prof.high; i++)
        if (prof.threads[i].tid) rb_gc_mark(prof.threads[i].thread);
    if (!prof.buf) return;
    head = __atomic_load_n(&prof.head, __ATOMIC_ACQUIRE);
    for (at = prof.tail; at != head;) {
        const struct prof_record *r = (const struct prof_record *)(prof.buf +
                                                                   (at & (PROF_BUF_SIZE - 1)));
        uint32_t k;

        if (!__atomic_load_n(&r->ready, __ATOMIC_ACQUIRE)) break;
        if (r->slot != UINT32_MAX)
            for (k = 0; k < r->n; k++) rb_gc_mark_maybe(r->frames[k]);
        at += r->len;
    }
}

/*
 * call-seq: RBTrace.profile_stats -> [active, samples, signal]
 *
 * Whether a profile runs, the samples taken in this process ever, and the
 * real-time signal the sampler uses (0: none yet). For the specs.
 */
static VALUE prof_stats_m(VALUE self)
{
    (void)self;
    return rb_ary_new_from_args(3, prof.active ? Qtrue : Qfalse,
                                ULL2NUM(__atomic_load_n(&prof.samples, __ATOMIC_RELAXED)),
                                INT2FIX(prof.signo));
}

void Init_rbtrace_profile(VALUE mod)
{
    prof.hook_threads = Qfalse;
    rb_define_singleton_method(mod, "profile_stats", prof_stats_m, 0);
}
