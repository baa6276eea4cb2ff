/*
 * rbtrace.h - the extension's private header: its one global state struct
 * and the functions each file offers the others, grouped by file.
 *
 * Threads and locks: all Ruby-facing state is touched only with the GVL
 * held. The writer pthread (writer.c) shares only the ring buffer (ring.h,
 * lock-free single producer / single consumer), a few volatile int
 * flags, each written by one side only (writer_stop by Ruby, peer_gone by
 * the writer; sock_readable set by the writer and cleared by the helper
 * thread once it read the socket dry), and the eventfd that wakes it (made before it starts,
 * closed once it is joined). A Ruby thread that waits for room in the ring without the
 * GVL (emit.c, emit_wait_nogvl) reads only the consumer's tail.
 */
#ifndef RBTRACE_H
#define RBTRACE_H

#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/thread.h>
#include <ruby/version.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "clock_tsc.h"
#include "codec.h"
#include "ring.h"

/* A hot function without the stack protector (extconf.rb's check). */
#ifdef RBTRACE_HAVE_NO_STACK_PROTECTOR
#define RBTRACE_NO_STACK_PROTECTOR __attribute__((no_stack_protector))
#else
#define RBTRACE_NO_STACK_PROTECTOR
#endif

/* The TSC, where the compiler can read it (clock.c decides if it may). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <x86intrin.h>
#define RBTRACE_HAVE_TSC 1
#endif

/* Bytes of the event ring between the app's threads and the writer. 2 MiB
 * rather than 1: the lines the app writes were read by the writer a lap
 * before, and the longer the lap, the less often the writer's core still
 * holds them (a firehose call 3-4 ns cheaper, bench/RESULTS.md 2026-11-26
 * 15:40); 4 MiB gained little more. */
#define RBTRACE_RING_SIZE (1u << 21)

/* Slots of the (class, method) -> method id table, powers of two: it
 * starts with the first and doubles up to the second (768 KiB), then starts
 * afresh (a FORGET event tells the client). */
#define RBTRACE_METHOD_SLOTS 8192
#define RBTRACE_METHOD_SLOTS_MAX 32768

/* A command a postponed job left for the helper thread (session.c). */
struct rbtrace_deferred {
    struct rbtrace_deferred *next;
    size_t len;
    char data[];        /* the command's msgpack bytes */
};

/* One method selector the user asked for (-m). */
struct rbtrace_tracer {
    VALUE klass;        /* owner to match, or 0 for any */
    ID mid;             /* method name to match, or 0 for any */
    VALUE exprs;        /* Array of expression Strings, or Qnil */
    VALUE selector;     /* the selector's text, as the client sent it */
    VALUE tp;           /* a TracePoint of calls of this Ruby method alone,
                           or 0 (the global hook watches it) */
    VALUE tp_return;    /* ... and of its returns */
};

/* A method name Symbol (or nil) as the ID the hooks compare (0 for nil).
 * SYM2ID makes a dynamic Symbol permanent: it then needs no marking. */
static inline ID rbtrace_method_id_of(VALUE sym)
{
    return NIL_P(sym) ? 0 : SYM2ID(sym);
}

/* Whether a call of (klass, mid) is one a selector's pair names; 0 in the
 * pair means any class or any method. On the hot path: no call. */
static inline int rbtrace_selects(VALUE want_klass, ID want_mid, VALUE klass, ID mid)
{
    return (want_mid == 0 || want_mid == mid) && (want_klass == 0 || want_klass == klass);
}

/* A thread evaluating trace expressions (tracer.c): a node on the stack of
 * its evaluation, linked into rbtrace.evaluators while it lasts. Several
 * threads may evaluate at once: the VM switches threads inside Ruby code. */
struct rbtrace_evaluator {
    uint64_t thread;                 /* rbtrace_thread_id() */
    struct rbtrace_evaluator *next;
};

/* A slot of the method id table; klass == 0 means empty. Methods are
 * named by ID, as the VM hands them to the hook: a Symbol would cost a
 * lookup an event for the IDs that have no static Symbol (operators). */
struct rbtrace_method_slot {
    VALUE klass;
    ID mid;
    uint32_t id;
};

struct rbtrace_state {
    /* command channel (channel.c) */
    sem_t wake;                      /* posted by the signal handler */
    volatile sig_atomic_t pending;   /* a signal arrived, not yet served */
    int queue_id;                    /* our message queue, or -1 */
    pid_t queue_pid;                 /* the process that created it */
    int queue_refused;               /* a foreign queue was reported */
    int servicing;                   /* a command is being carried out */
    uint64_t servicing_thread;       /* ... by this thread (rbtrace_thread_id), or 0 */
    uint64_t helper_thread;          /* the helper thread (rbtrace_thread_id), once it runs */
    int in_job;                      /* ... from a postponed job, on an app thread */
    struct rbtrace_deferred *deferred;       /* commands left for the helper, oldest first */
    struct rbtrace_deferred **deferred_tail; /* where the next one is linked */
    char *command;                   /* the socket's command being received */
    size_t command_len, command_cap;
    unsigned char frame_header[RBTRACE_FRAME_HEADER];   /* its length, as read so far */
    size_t frame_header_len;         /* bytes of it read (all: the length is known) */
    uint32_t frame_len;              /* the command's length, once known */
    volatile int sock_readable;      /* set by the writer: the client sent bytes */

    /*
     * What every traced event looks at, a byte each, 0 or 1, sharing one
     * word: the global hook tells "--firehose and nothing else" with one
     * compare (rbtrace_firehose_only). No more than eight (the assertion
     * after the struct).
     */
    union {
        struct {
            uint8_t attached;        /* session.c: a client is attached */
            uint8_t firehose;        /* tracer.c: --firehose */
            uint8_t slow;            /* tracer.c: --slow: the hook feeds slow.c */
            uint8_t in_expr;         /* tracer.c: a thread evaluates trace expressions
                                        (rbtrace.evaluators is not empty) */
            uint8_t big_event;       /* emit.c: a large event is being pushed */
            uint8_t sealed;          /* emit.c: DETACHED is in the ring: nothing may follow */
            uint8_t calls_ended;     /* emit.c: detaching: calls and returns are not recorded */
            uint8_t thread_names;    /* threadnames.c: THREAD_NAME events asked for */
        };
        uint64_t event_flags;   /* the bytes above, all at once */
    };

    /* session (session.c) */
    pid_t client_pid;
    int sock;                        /* the client's socket, or -1 */
    uint64_t clock_origin_ns;
    int resumed;                     /* RESUME came (rbtrace --exec) */

    /* writer (writer.c) */
    struct rbtrace_ring ring;
    pthread_t writer;
    int writer_running;
    volatile int writer_stop;        /* asks the writer to drain and exit */
    volatile int peer_gone;          /* set by the writer: client went away */

    /* events (emit.c) */
    uint64_t lost;                   /* events dropped, not yet reported */
    struct rbtrace_method_slot *methods;
    uint32_t method_slots;           /* the table's size, a power of two */
    uint32_t methods_used;
    uint32_t next_method_id;
    uint32_t forget_from;            /* a FORGET of ids below this is due (0: none) */
    struct rbtrace_call_chain chain; /* the last call event in the ring */

    /* tracing (tracer.c) */
    int hook_installed;
    int hook_raw;                    /* ... the RAW_ARG kind (trace expressions) */
    struct rbtrace_evaluator *evaluators;   /* threads evaluating expressions, or NULL */
    struct rbtrace_tracer tracers[RBTRACE_SELECTORS_MAX];
    uint32_t n_tracers;
};

extern struct rbtrace_state rbtrace;

/* A flag added past the word's end would go unseen by rbtrace_firehose_only:
 * the union is one word (client_pid is the member after it). */
_Static_assert(offsetof(struct rbtrace_state, client_pid) - offsetof(struct rbtrace_state, event_flags)
               == sizeof(uint64_t), "the event flags fit in event_flags");

/* Whether a client is attached with --firehose on and nothing else of
 * event_flags set: the event_flags word then (a constant, folded). */
static inline int rbtrace_firehose_only(void)
{
    union { uint8_t bytes[sizeof(uint64_t)]; uint64_t word; } want = { { 0 } };

    want.bytes[offsetof(struct rbtrace_state, attached) - offsetof(struct rbtrace_state, event_flags)] = 1;
    want.bytes[offsetof(struct rbtrace_state, firehose) - offsetof(struct rbtrace_state, event_flags)] = 1;
    return rbtrace.event_flags == want.word;
}
extern VALUE rbtrace_mRBTrace;

/* rbtrace.c */
uint64_t rbtrace_now_ns(void);   /* clock_gettime(CLOCK_MONOTONIC), any thread */

/* rbtrace.c: whether Ruby threads share native threads (M:N scheduling,
 * RUBY_MN_THREADS=1 on 3.3+), and then the Ruby thread that holds the
 * GVL now (its rb_thread_t), which a VM thread hook keeps. */
extern int rbtrace_mn_threads;
extern uint64_t rbtrace_mn_thread;

/*
 * Which thread an event is of. Its native thread while Ruby runs each
 * Ruby thread on its own (every Ruby up to 3.4, unless RUBY_MN_THREADS=1 on
 * 3.3+): its thread pointer (one instruction; on x86-64 glibc the same
 * value as pthread_self, which is a call through the PLT), unique to each
 * live thread. Asking Ruby (rb_thread_current, through its thread-local
 * storage) cost ~10 ns an event, and a call would give the hook a stack
 * frame. Under M:N several Ruby threads take turns on one native thread,
 * and one moves between them: the Ruby thread then, as the VM last told
 * (a load; the caller holds the GVL). (Non-main Ractors run M:N always
 * and hold GVLs of their own: rbtrace does not tell their threads apart.)
 */
static inline uint64_t rbtrace_thread_id(void)
{
#ifdef RBTRACE_HAVE_MN_THREAD_HOOK
    if (__builtin_expect(rbtrace_mn_threads, 0)) return rbtrace_mn_thread;
#endif
#ifdef RBTRACE_HAVE_THREAD_POINTER
    return (uint64_t)(uintptr_t)__builtin_thread_pointer();
#else
    return (uint64_t)pthread_self();
#endif
}

/* clock.c: the events' time stamps (GVL held), in CLOCK_MONOTONIC ns */
extern struct rbtrace_clock rbtrace_clock;
uint64_t rbtrace_clock_renew(void);
void rbtrace_clock_init(void);
void Init_rbtrace_clock(VALUE mod);

static inline uint64_t rbtrace_clock_ns(void)
{
#ifdef RBTRACE_HAVE_TSC
    uint64_t tsc = __rdtsc();

    if (rbtrace_clock_fresh(&rbtrace_clock, tsc)) return rbtrace_clock_ns_at(&rbtrace_clock, tsc);
#endif
    return rbtrace_clock_renew();
}

/* rbtrace_clock_ns without a call: 0 (nothing in *now) where it needs one
 * (the anchor is due, or there is no TSC). */
static inline int rbtrace_clock_ns_quick(uint64_t *now)
{
#ifdef RBTRACE_HAVE_TSC
    uint64_t tsc = __rdtsc();

    if (rbtrace_clock_fresh(&rbtrace_clock, tsc)) {
        *now = rbtrace_clock_ns_at(&rbtrace_clock, tsc);
        return 1;
    }
#endif
    (void)now;
    return 0;
}
VALUE rbtrace_protect(VALUE (*func)(VALUE), VALUE arg, int *state, VALUE *error);
int rbtrace_nogvl(void *(*func)(void *), void *arg, rb_unblock_function_t *ubf, void *ubf_arg);

/* channel.c: signal, queue, the socket's commands */
void rbtrace_channel_init(void);
void rbtrace_channel_reset_socket(void);
void rbtrace_channel_after_fork(void);
void rbtrace_channel_wake(void);
int rbtrace_channel_handler_installed(void);   /* SIGURG still ours */
VALUE rbtrace_channel_handler_before(void);    /* what trap('URG') returned before rbtrace */
void Init_rbtrace_channel(VALUE mod);

/* inplace.c: Kernel#trap, Signal.trap, Process.daemon replaced in place */
void rbtrace_inplace_install(void);

/* handoff.c: the GVL for our threads while an app thread is busy */
void rbtrace_handoff_request(void);
void rbtrace_handoff_done(void);
void rbtrace_handoff_install(void);
void rbtrace_handoff_after_fork(void);
void Init_rbtrace_handoff(VALUE mod);

/* session.c: carrying out commands */
/* from_socket: the attached client's socket (else the queue: ATTACH only). */
void rbtrace_session_execute(const char *buf, size_t len, int from_socket);
void rbtrace_session_run_deferred(void);
void rbtrace_session_drop_deferred(void);
void rbtrace_session_detach(int tell_client);
void rbtrace_session_after_fork(void);
void rbtrace_session_check_peer(void);
void Init_rbtrace_session(VALUE mod);

/* writer.c: ring -> socket */
int rbtrace_writer_start(void);
int rbtrace_writer_stop(void);
void rbtrace_writer_nudge(void);
void rbtrace_writer_after_fork(void);

/* emit.c: encoding events into the ring */
int rbtrace_emit_open(void);
void rbtrace_emit_close(void);
void rbtrace_emit_mark(void);
/* rbtrace_emit_call: emit_call.h, inline */
void rbtrace_emit_call_args(VALUE klass, ID mid, uint64_t now, VALUE exprs, VALUE values);
int rbtrace_emit_message(enum rbtrace_event_type type, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void rbtrace_emit_eval_result(uint32_t eval_id, enum rbtrace_eval_status status, VALUE text);
void rbtrace_emit_slow(VALUE klass, ID mid, uint64_t start_ns, uint64_t duration_ns,
                       uint32_t depth);
void rbtrace_emit_gc(uint64_t thread, uint64_t start_ns, uint64_t mark_ns, uint64_t sweep_ns,
                     const char *major_by, const char *gc_by);
void rbtrace_emit_raise(uint64_t now, VALUE klass, VALUE message, VALUE location, uint64_t reraise);
/* No Ruby call, no allocation: gvlwatch.c's thread hook, GVL just taken. */
void rbtrace_emit_gvl(uint64_t thread, uint64_t start_ns, uint64_t wait_ns);
void rbtrace_emit_attached(void);
int rbtrace_emit_detached(void);
/* THREAD_NAME; 0 if sent, -1 if dropped (counted as lost) */
int rbtrace_emit_thread_name(uint64_t thread, const char *name, size_t len);
void rbtrace_emit_end_calls(void);

/* tracer.c: selectors and hooks */
void rbtrace_tracer_add(VALUE selectors);
int rbtrace_tracer_add_one(VALUE selector, VALUE *error);
void rbtrace_tracer_firehose(void);
void rbtrace_tracer_slow(uint64_t threshold_ns, int cpu, VALUE selectors);
void rbtrace_tracer_gc(void);
void rbtrace_tracer_raise(void);
void rbtrace_report_selector_error(VALUE selector, VALUE error);
VALUE rbtrace_selector_error(ID name);
void rbtrace_tracer_clear(void);
int rbtrace_tracer_evaluating(void);
void rbtrace_tracer_after_fork(void);
void rbtrace_tracer_mark(void);
void Init_rbtrace_tracer(VALUE mod);

/* slow.c: --slow, --slowcpu (fed by tracer.c's hook) */
int rbtrace_slow_start(uint64_t threshold_ns, int cpu, VALUE selectors);
void rbtrace_slow_event(rb_event_flag_t ev, VALUE klass, ID mid);
void rbtrace_slow_stop(void);
void rbtrace_slow_mark(void);
void Init_rbtrace_slow(VALUE mod);

/* gcwatch.c: --gc */
void rbtrace_gc_start(void);
void rbtrace_gc_stop(void);
uint64_t rbtrace_gc_take_other(void);
void Init_rbtrace_gcwatch(VALUE mod);

/* raisewatch.c: --raise */
void rbtrace_raise_start(void);
void rbtrace_raise_stop(void);
void Init_rbtrace_raisewatch(VALUE mod);

/* threadnames.c: THREAD_NAME events (--thread-names) */
void rbtrace_thread_names_start(void);
void rbtrace_thread_names_stop(void);
void rbtrace_thread_name_note(uint64_t thread);   /* GVL held; a Ruby call */
void Init_rbtrace_threadnames(VALUE mod);

/* gvlwatch.c: --gvl, each thread's waits for the GVL */
int rbtrace_gvl_supported(void);   /* this build has the thread event hooks */
void rbtrace_gvl_start(void);
void rbtrace_gvl_stop(void);
void Init_rbtrace_gvlwatch(VALUE mod);

/* devmode.c: --devmode, selectors that follow reloaded classes */
void rbtrace_devmode_start(void);
int rbtrace_devmode_watch(VALUE selector);
void rbtrace_devmode_traced(VALUE selector);
void rbtrace_devmode_failed(VALUE selector, VALUE error);
void rbtrace_devmode_stop(void);
void rbtrace_devmode_mark(void);
void Init_rbtrace_devmode(VALUE mod);

/* ractors.c: the main Ractor alone is traced */
#ifdef RBTRACE_HAVE_RACTORS
#include <ruby/ractor.h>
extern rb_ractor_local_key_t rbtrace_main_ractor_key;

/* Whether the running thread is the main Ractor's: a call into Ruby, which
 * answers for the main Ractor with two loads. */
static inline int rbtrace_main_ractor_p(void)
{
    return rb_ractor_local_storage_ptr(rbtrace_main_ractor_key) != NULL;
}
#else
static inline int rbtrace_main_ractor_p(void)
{
    return 1;
}
#endif
void rbtrace_ractors_count_other(void);
uint64_t rbtrace_ractors_take_other(void);
void rbtrace_ractors_restore_hooks(void);
void Init_rbtrace_ractors(VALUE mod);

/* wrapper.c: tracing one method by wrapping it */
void rbtrace_wrapper_add(VALUE owner, VALUE name, VALUE mid, VALUE visibility, VALUE arity);
int rbtrace_wrapper_module_p(VALUE klass);
void rbtrace_wrapper_shadow(VALUE klass, ID mid);
void rbtrace_wrapper_clear(void);
void rbtrace_wrapper_mark(void);
void Init_rbtrace_wrapper(VALUE mod);

#endif
