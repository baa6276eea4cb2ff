/*
 * state.h - the bottom of the extension (docs/DESIGN.md, "Layers"): its
 * one global state struct, the method selectors and evaluators it holds,
 * which thread runs, and the operations on the state every layer needs
 * (state.c).
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
#ifndef RBTRACE_STATE_H
#define RBTRACE_STATE_H

#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/thread.h>
#include <ruby/version.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include "codec.h"
#include "ring.h"

/* A command a postponed job left for the helper thread (command.c). */
struct rbtrace_deferred {
    struct rbtrace_deferred *next;
    size_t len;
    char data[]; /* the command's msgpack bytes */
};

/* A selection: one method selector the user asked for (-m, -c), as it is
 * traced (trace.c). */
struct rbtrace_selection {
    VALUE klass;     /* owner to match, or 0 for any */
    ID mid;          /* method name to match, or 0 for any */
    VALUE exprs;     /* Array of expression Strings, or Qnil */
    VALUE selector;  /* the selector's text, as the client sent it */
    VALUE tp;        /* a TracePoint of calls of this Ruby method alone,
                           or 0 (the global hook watches it) */
    VALUE tp_return; /* ... and of its returns */
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

/* A thread evaluating trace expressions (trace.c): a node on the stack of
 * its evaluation, linked into rbtrace.evaluators while it lasts. Several
 * threads may evaluate at once: the VM switches threads inside Ruby code. */
struct rbtrace_evaluator {
    uint64_t thread; /* rbtrace_thread_id() */
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
    sem_t wake;                        /* posted by the signal handler */
    volatile sig_atomic_t pending;     /* a signal arrived, not yet served */
    int servicing;                     /* a command is being carried out */
    uint64_t servicing_thread;         /* ... by this thread (rbtrace_thread_id), or 0 */
    uint64_t helper_thread;            /* the helper thread (rbtrace_thread_id), once it runs */
    int in_job;                        /* ... from a postponed job, on an app thread */
    struct rbtrace_deferred *deferred; /* commands left for the helper, oldest first */
    struct rbtrace_deferred **deferred_tail; /* where the next one is linked */
    char *command;                           /* the socket's command being received */
    size_t command_len, command_cap;
    unsigned char frame_header[RBTRACE_FRAME_HEADER]; /* its length, as read so far */
    size_t frame_header_len;    /* bytes of it read (all: the length is known) */
    uint32_t frame_len;         /* the command's length, once known */
    volatile int sock_readable; /* set by the writer: the client sent bytes */

    /*
     * What every traced event looks at, a byte each, 0 or 1, sharing one
     * word: the global hook tells "--firehose and nothing else" with one
     * compare (rbtrace_firehose_only). No more than eight (the assertion
     * after the struct).
     */
    union {
        struct {
            uint8_t attached;     /* command.c: a client is attached */
            uint8_t firehose;     /* trace.c: --firehose */
            uint8_t slow;         /* trace.c: --slow: the hook feeds slow.c */
            uint8_t in_expr;      /* trace.c: a thread evaluates trace expressions
                                        (rbtrace.evaluators is not empty) */
            uint8_t big_event;    /* emit.c: a large event is being pushed */
            uint8_t sealed;       /* emit.c: DETACHED is in the ring: nothing may follow */
            uint8_t calls_ended;  /* emit.c: detaching: calls and returns are not recorded */
            uint8_t thread_names; /* threadnames.c: THREAD_NAME events asked for */
        };
        uint64_t event_flags; /* the bytes above, all at once */
    };

    /* session (command.c) */
    pid_t client_pid;
    int sock; /* the client's socket, or -1 */
    uint64_t clock_origin_ns;
    int resumed; /* RESUME came (rbtrace --exec) */

    /* writer (writer.c) */
    struct rbtrace_ring ring;
    pthread_t writer;
    int writer_running;
    volatile int writer_stop; /* asks the writer to drain and exit */
    volatile int peer_gone;   /* set by the writer: client went away */

    /* events (emit.c) */
    uint64_t lost; /* events dropped, not yet reported */
    struct rbtrace_method_slot *methods;
    uint32_t method_slots; /* the table's size, a power of two */
    uint32_t methods_used;
    uint32_t next_method_id;
    uint32_t forget_from;            /* a FORGET of ids below this is due (0: none) */
    struct rbtrace_call_chain chain; /* the last call event in the ring */

    /* tracing (trace.c) */
    int hook_installed;
    int hook_raw;                         /* ... the RAW_ARG kind (trace expressions) */
    struct rbtrace_evaluator *evaluators; /* threads evaluating expressions, or NULL */
    struct rbtrace_selection selections[RBTRACE_SELECTORS_MAX];
    uint32_t n_selections;
};

extern struct rbtrace_state rbtrace;

/* A flag added past the word's end would go unseen by rbtrace_firehose_only:
 * the union is one word (client_pid is the member after it). */
_Static_assert(offsetof(struct rbtrace_state, client_pid) -
                       offsetof(struct rbtrace_state, event_flags) ==
                   sizeof(uint64_t),
               "the event flags fit in event_flags");

/* Whether a client is attached with --firehose on and nothing else of
 * event_flags set: the event_flags word then (a constant, folded). */
static inline int rbtrace_firehose_only(void)
{
    union {
        uint8_t bytes[sizeof(uint64_t)];
        uint64_t word;
    } want = { { 0 } };

    want.bytes[offsetof(struct rbtrace_state, attached) -
               offsetof(struct rbtrace_state, event_flags)] = 1;
    want.bytes[offsetof(struct rbtrace_state, firehose) -
               offsetof(struct rbtrace_state, event_flags)] = 1;
    return rbtrace.event_flags == want.word;
}
extern VALUE rbtrace_mRBTrace;

/* state.c: whether Ruby threads share native threads (M:N scheduling,
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

VALUE rbtrace_protect(VALUE (*func)(VALUE), VALUE arg, int *state, VALUE *error);
void rbtrace_mn_threads_init(void);

/* The channel's (channel.c), but the writer, emit and the commands below it
 * call them too: here, on the state they touch (docs/DESIGN.md, "Layers"). */
void rbtrace_channel_wake(void);         /* wakes the helper thread, from any thread */
void rbtrace_channel_reset_socket(void); /* forgets a half-read command */

/* Whether the current thread is evaluating trace expressions (the list
 * trace.c keeps in rbtrace.evaluators). Out of line. */
int rbtrace_evaluating(void);

/* Whether the current call is rbtrace's own: made by the thread carrying
 * out a command (channel.c). One load and one compare. */
#define RBTRACE_OWN_CALL() (rbtrace_thread_id() == rbtrace.servicing_thread)

/* Whether the current call is one that trace expressions make, on the
 * thread evaluating them (trace.c): rbtrace's work, not the app's. While
 * no thread evaluates, one test of a byte. */
static inline int rbtrace_expr_call_p(void)
{
    return rbtrace.in_expr && rbtrace_evaluating();
}

#endif
