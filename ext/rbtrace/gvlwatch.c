/*
 * gvlwatch.c - --gvl: each thread's waits for the GVL, from the moment it
 * asked for it (READY) to the moment it got it (RESUMED), as GVL events.
 * The client shows the long ones inline and adds each to the traced calls
 * of its thread then open (docs/DESIGN.md, "GVL waits").
 *
 * Ruby 3.2+'s thread event hooks (rb_internal_thread_add_event_hook,
 * found by extconf.rb); without them --gvl says what it needs and the
 * attach says it cannot (ATTACHED's features).
 *
 * The hook runs outside Ruby's usual rules: READY on a thread that does
 * not hold the GVL (several at once), RESUMED on the thread that has just
 * taken it, before it runs any Ruby. So it calls no Ruby API, allocates nothing
 * and takes no lock: it reads the clock, keeps READY's time per thread, and at
 * RESUMED encodes the event straight into the ring. RESUMED may write to
 * the ring because the thread then holds the GVL, which is what makes it
 * the ring's one producer (ring.h); and it does so before its thread's
 * next call event, so the stream's order says which calls a wait was in.
 *
 * Where READY's time is kept until RESUMED: a fixed table keyed by the
 * waiting thread (gvl_waiter), a slot claimed by a compare-and-swap at
 * READY and given back at RESUMED, on every Ruby with the hooks. Only
 * threads waiting at the same moment compete for slots; a wait whose slot
 * another waiting thread holds is not measured (counted, RBTrace.gvl_stats).
 * Nothing of it outlives the session: Ruby 3.3+'s thread-specific slots
 * would have served 3.3+ alone, and their key, once made, stays for the
 * process's life (a process may make 8), with slots for every new thread.
 *
 * Ractors: another Ractor's threads hold a GVL of their own, and at
 * RESUMED would write into the ring beside the main Ractor's. The hook
 * cannot tell them apart without a Ruby call, so --gvl is refused in a
 * process that has other Ractors when it starts; one started later is a
 * known limit (docs/limits.md).
 *
 * The hook is removed at detach, when the client goes away, and in a
 * forked child (rbtrace_trace_clear): Ruby then calls nothing of ours.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "emit.h"
#include "gvlwatch.h"
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef RBTRACE_HAVE_GVL_HOOK

#define GVL_EVENTS (RUBY_INTERNAL_THREAD_EVENT_READY | RUBY_INTERNAL_THREAD_EVENT_RESUMED)

static struct {
    rb_internal_thread_event_hook_t *hook; /* installed, or NULL */
    uint64_t since_ns;                     /* when it was installed: older READY times are stale */
    uint64_t runs;                         /* hook calls, ever (RBTrace.gvl_stats; atomic) */
    uint64_t unmeasured;                   /* waits whose READY time had no slot (atomic) */
} gvl;

/* CLOCK_MONOTONIC, the events' time line. Not the TSC (rbtrace_clock_ns):
 * its anchor is renewed by threads that hold the GVL, which READY's
 * thread does not. vDSO: no system call, no lock. */
static inline uint64_t gvl_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Slots: far more than threads that wait at one moment (a power of two). */
#define GVL_SLOTS 1024

struct gvl_slot {
    uint64_t thread; /* the waiting thread that claimed it (gvl_waiter), or 0 */
    uint64_t ready_ns;
};

static struct gvl_slot gvl_slots[GVL_SLOTS];

/* The thread waiting for the GVL, the slots' key. Ruby 3.3+: the Ruby
 * thread the event names, for READY may run on another native thread than
 * the waiting one's (the one that wakes it from a Queue#pop or a sleep, or
 * creates it; under M:N the scheduler's). Ruby 3.2 names none, and runs
 * both events on the waiting thread itself: its native thread. */
static inline uint64_t gvl_waiter(const rb_internal_thread_event_data_t *data)
{
#ifdef HAVE_RB_INTERNAL_THREAD_EVENT_DATA_T_THREAD
    return (uint64_t)data->thread;
#else
    (void)data;
#ifdef RBTRACE_HAVE_THREAD_POINTER
    return (uint64_t)(uintptr_t)__builtin_thread_pointer();
#else
    return (uint64_t)pthread_self();
#endif
#endif
}

static inline struct gvl_slot *gvl_slot_of(uint64_t thread)
{
    return &gvl_slots[(thread * 0x9E3779B97F4A7C15ull) >> 54 & (GVL_SLOTS - 1)];
}

static inline void gvl_ready_note(const rb_internal_thread_event_data_t *data, uint64_t now)
{
    uint64_t self = gvl_waiter(data), owner = 0;
    struct gvl_slot *s = gvl_slot_of(self);

    if (__atomic_compare_exchange_n(&s->thread, &owner, self, 0, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED) ||
        owner == self) {
        s->ready_ns = now;
        return;
    }
    __atomic_fetch_add(&gvl.unmeasured, 1, __ATOMIC_RELAXED);
}

/* READY's time for this thread, and gives its slot back; 0 if none. */
static inline uint64_t gvl_ready_take(const rb_internal_thread_event_data_t *data)
{
    uint64_t self = gvl_waiter(data), t;
    struct gvl_slot *s = gvl_slot_of(self);

    if (__atomic_load_n(&s->thread, __ATOMIC_RELAXED) != self) return 0;
    t = s->ready_ns;
    __atomic_store_n(&s->thread, 0, __ATOMIC_RELEASE);
    return t;
}

/* The thread an event is of, as the call events name it (state.h). */
static inline uint64_t gvl_thread_id(const rb_internal_thread_event_data_t *data)
{
#if defined(RBTRACE_HAVE_MN_THREAD_HOOK)
    /* Under M:N, the Ruby thread; rbtrace_mn_thread is not set yet (the
     * hooks run newest first, and this one is newer). */
    if (rbtrace_mn_threads) return (uint64_t)(uintptr_t)RTYPEDDATA_GET_DATA(data->thread);
#endif
    (void)data;
    return rbtrace_thread_id();
}

static void gvl_hook_i(rb_event_flag_t event, const rb_internal_thread_event_data_t *data,
                       void *unused)
{
    uint64_t now = gvl_now_ns(), ready, thread;

    (void)unused;
    __atomic_fetch_add(&gvl.runs, 1, __ATOMIC_RELAXED);
    if (event & RUBY_INTERNAL_THREAD_EVENT_READY) {
        gvl_ready_note(data, now);
        return;
    }
    /* RESUMED: this thread holds the GVL from here on. */
    ready = gvl_ready_take(data);
    if (ready < gvl.since_ns || ready > now) return; /* none, or of a hook before this one */
    thread = gvl_thread_id(data);
    /* The helper thread's waits (to carry out the client's commands) are
     * rbtrace's, not the app's. */
    if (thread != rbtrace.helper_thread) rbtrace_emit_gvl(thread, ready, now - ready);
}

/* Other Ractors than the main one, now (GVL held). */
static VALUE gvl_ractor_count_i(VALUE unused)
{
    (void)unused;
    if (!rb_const_defined(rb_cObject, rb_intern("Ractor"))) return INT2FIX(1);
    return rb_funcall(rb_const_get(rb_cObject, rb_intern("Ractor")), rb_intern("count"), 0);
}

static int gvl_other_ractors(void)
{
    int state = 0;
    VALUE n = rbtrace_protect(gvl_ractor_count_i, Qnil, &state, NULL);

    return !state && FIXNUM_P(n) && FIX2LONG(n) > 1;
}

int rbtrace_gvl_supported(void)
{
    return 1;
}

void rbtrace_gvl_start(void)
{
    if (gvl.hook) return;
    if (gvl_other_ractors()) {
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "--gvl: process %d runs Ractors besides the main "
                             "one, whose threads rbtrace cannot tell apart in the GVL's hook: "
                             "GVL waits are not traced",
                             (int)getpid());
        return;
    }
    /* No hook runs now: slots left claimed by the last session are freed. */
    memset(gvl_slots, 0, sizeof(gvl_slots));
    gvl.since_ns = gvl_now_ns();
    gvl.hook = rb_internal_thread_add_event_hook(gvl_hook_i, GVL_EVENTS, NULL);
    if (gvl.hook == NULL) {
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "--gvl: Ruby refused the thread event hook: GVL "
                             "waits are not traced");
        return;
    }
    /* The answer (protocol.h): waits are measured from here on. */
    rbtrace_emit_gvl(rbtrace_thread_id(), gvl.since_ns, 0);
}

/* Removes the hook: once Ruby's removal returns, no call of it is left
 * running (Ruby runs the hooks under a lock the removal takes), so the
 * ring can go. */
void rbtrace_gvl_stop(void)
{
    if (!gvl.hook) return;
    rb_internal_thread_remove_event_hook(gvl.hook);
    gvl.hook = NULL;
}

int rbtrace_gvl_active(void)
{
    return gvl.hook != NULL;
}

/*
 * call-seq: RBTrace.gvl_stats -> [hooked, runs, unmeasured]
 *
 * Whether the GVL hook is installed, how many times Ruby has called it
 * in this process, and the waits it could not measure (their slot held
 * by another waiting thread). For the specs: after a detach the count
 * stays still.
 */
static VALUE gvl_stats_m(VALUE self)
{
    (void)self;
    return rb_ary_new_from_args(3, gvl.hook ? Qtrue : Qfalse,
                                ULL2NUM(__atomic_load_n(&gvl.runs, __ATOMIC_RELAXED)),
                                ULL2NUM(__atomic_load_n(&gvl.unmeasured, __ATOMIC_RELAXED)));
}

#else /* no thread event hooks: Ruby before 3.2 */

int rbtrace_gvl_supported(void)
{
    return 0;
}

void rbtrace_gvl_start(void)
{
    rbtrace_emit_message(RBTRACE_EV_ERROR,
                         "--gvl needs Ruby 3.2 or newer (its thread event hooks); "
                         "process %d runs Ruby %s: GVL waits are not traced",
                         (int)getpid(), ruby_version);
}

void rbtrace_gvl_stop(void) {}

int rbtrace_gvl_active(void)
{
    return 0;
}

static VALUE gvl_stats_m(VALUE self)
{
    (void)self;
    return rb_ary_new_from_args(3, Qfalse, INT2FIX(0), INT2FIX(0));
}
#endif

/* call-seq: RBTrace.gvl_supported? -> true or false (--gvl works here) */
static VALUE gvl_supported_p_m(VALUE self)
{
    (void)self;
    return rbtrace_gvl_supported() ? Qtrue : Qfalse;
}

void Init_rbtrace_gvlwatch(VALUE mod)
{
    rb_define_singleton_method(mod, "gvl_stats", gvl_stats_m, 0);
    rb_define_singleton_method(mod, "gvl_supported?", gvl_supported_p_m, 0);
}
