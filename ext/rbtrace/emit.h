/*
 * emit.h - encoding events into the ring (emit.c), and the hot path: a
 * CALL or RETURN encoded straight into the ring, inline in the event hook (trace.c) and the wrappers (wrapper.c),
 * so that an event costs no call of ours and no second stack frame.
 * Everything rarer is out of line in emit.c: a method not among the recent
 * ones, an event that cannot be encoded in place.
 *
 * No malloc, no Ruby allocation, no syscall, no lock but the GVL the
 * caller holds. It may be reached after a detach freed the ring and the
 * tables (trace expressions and wrapped methods can give up the GVL
 * mid-call): the attached flag and the freed ring's zero space stop it.
 */
#ifndef RBTRACE_EMIT_H
#define RBTRACE_EMIT_H

#include "state.h"
#include "clock.h"
#include "codec.h"
#include "ring.h"
#include "threadnames.h"

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

/* emit.c: encoding events into the ring */
int rbtrace_emit_open(void);
void rbtrace_emit_close(void);
void rbtrace_emit_mark(void);
/* rbtrace_emit_call: below, inline */
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
/* --alloc (allocwatch.c): objects counted (sampled) and not yet sent in an
 * ALLOC event, and the thread they are of. Every call event sends them
 * before itself (rbtrace_emit_alloc_pending), so that a call's objects are
 * between its CALL and its RETURN; the hot path only tests the count. */
extern uint64_t rbtrace_alloc_pending, rbtrace_alloc_pending_thread;
void rbtrace_emit_alloc_pending(void);
/* No Ruby call, no allocation: allocwatch.c's hook and the call events. */
void rbtrace_emit_alloc(uint64_t thread, uint64_t count);
void rbtrace_emit_alloc_site(uint64_t count, const char *klass, size_t klass_len, const char *path,
                             size_t path_len, uint64_t line, const char *label, size_t label_len);
/* --profile (profile.c), GVL held: 0 if sent, -1 if dropped (counted as lost) */
int rbtrace_emit_profile_frame(uint64_t frame_id, const char *name, size_t name_len,
                               const char *path, size_t path_len, uint64_t line);
int rbtrace_emit_profile_sample(uint64_t thread, uint64_t time_ns, uint32_t state, uint64_t weight,
                                const uint64_t *frames, uint32_t n);
int rbtrace_emit_profile_missed(uint64_t count);
/* THREAD_NAME (threadnames.c); 0 if sent, -1 if dropped (counted as lost) */
int rbtrace_emit_thread_name(uint64_t thread, const char *name, size_t len);
void rbtrace_emit_attached(uint32_t features);
/* SYNCED: the commands before it are carried out (helper thread; waits for
 * room, re-raising an interrupt that ended the wait). */
void rbtrace_emit_synced(int tracing);
int rbtrace_emit_detached(uint64_t other_gcs, int *state);
void rbtrace_emit_end_calls(void);

/* The pairs asked for lately, direct-mapped by a cheap hash: the few
 * methods a loop calls skip the table (and a function call). Copies of
 * the table's slots; all zero when empty. 32 bytes each: a slot never
 * spans two cache lines, and its index scales by a shift. */
#define RBTRACE_RECENT_METHODS 64
struct rbtrace_recent_slot {
    struct rbtrace_method_slot method;
} __attribute__((aligned(32)));
extern struct rbtrace_recent_slot rbtrace_recent_methods[RBTRACE_RECENT_METHODS];

/* emit.c: the id of (klass, mid) from the table, naming it first if it is
 * new; 0 if the name could not be sent. */
uint32_t rbtrace_emit_method_id_lookup(VALUE klass, ID mid);
/* emit.c: a CALL or RETURN through emit_push, which knows when to drop it. */
void rbtrace_emit_call_pushed(enum rbtrace_event_type type, uint64_t time, uint32_t id);
/* emit.c: a CALL or RETURN encoded at out (rbtrace_ring_reserve's), now by
 * rbtrace_clock_ns. */
void rbtrace_emit_call_at_now(char *out, enum rbtrace_event_type type, uint32_t id);

/* An ID's low bits are its scope, the same for most method names, and
 * an operator's ID is its character (`+` 43, `-` 45, `*` 42): both the
 * low bits and the rest count. For one class, IDs that differ in those
 * bits never share a slot, whatever the class's address (a multiplicative
 * hash made a loop of operators' slots collide at random, by the address). */
static inline struct rbtrace_method_slot *rbtrace_recent_method(VALUE klass, ID mid)
{
    return &rbtrace_recent_methods[((klass >> 3) ^ mid ^ (mid >> 4)) & (RBTRACE_RECENT_METHODS - 1)]
                .method;
}

/* The id of (klass, mid), naming it first if it is new; 0 if the name
 * could not be sent (the caller's event is then dropped too). klass is
 * never 0 here (an empty slot's): an unknown owner is Qnil. */
static inline __attribute__((always_inline)) uint32_t rbtrace_emit_method_id(VALUE klass, ID mid)
{
    const struct rbtrace_method_slot *r = rbtrace_recent_method(klass, mid);

    if (r->mid == mid && r->klass == klass) return r->id;
    return rbtrace_emit_method_id_lookup(klass, mid);
}

static inline enum rbtrace_event_type rbtrace_call_event_type(rb_event_flag_t event)
{
    return (event & (RUBY_EVENT_CALL | RUBY_EVENT_C_CALL)) ? RBTRACE_EV_CALL : RBTRACE_EV_RETURN;
}

/* Encodes a CALL or RETURN of the current thread at out, which
 * rbtrace_ring_reserve gave for RBTRACE_CALL_EVENT_MAX bytes, and
 * publishes it. time: since the session's origin. */
static inline __attribute__((always_inline)) void
rbtrace_emit_call_at(char *out, enum rbtrace_event_type type, uint32_t id, uint64_t time)
{
    uint64_t thread = rbtrace_thread_id();

    rbtrace_ring_commit(
        &rbtrace.ring,
        rbtrace_event_encode_call_chained(out, &rbtrace.chain, type, thread, time, id));
    rbtrace_call_chain_note(&rbtrace.chain, thread, time);
}

/* A CALL (event RUBY_EVENT_CALL or _C_CALL) or RETURN of the method with
 * id at now (rbtrace_clock_ns), of the current thread, for a caller that
 * found attached set and big_event, sealed and calls_ended clear. Encoded
 * in place, straight into the ring; pushed when it cannot be (a loss
 * report due, the ring full or at its end). */
static inline __attribute__((always_inline)) void rbtrace_emit_call_of(rb_event_flag_t event,
                                                                       uint32_t id, uint64_t now)
{
    char *out;

    now -= rbtrace.clock_origin_ns;
    /* --alloc's objects counted before this event go out first, from the
     * pushed way (out of line: the fast path only tests the count). */
    if (!rbtrace.lost && !rbtrace_alloc_pending &&
        (out = rbtrace_ring_reserve(&rbtrace.ring, RBTRACE_CALL_EVENT_MAX)) != NULL)
        rbtrace_emit_call_at(out, rbtrace_call_event_type(event), id, now);
    else rbtrace_emit_call_pushed(rbtrace_call_event_type(event), now, id);
}

/* --thread-names: the current thread's name goes first (threadnames.c)
 * where its call event starts a run of its own (not the chain's thread:
 * its first of the trace, or its first after another thread's). */
static inline void rbtrace_emit_thread_name_due(void)
{
    uint64_t thread = rbtrace_thread_id();

    if (thread != rbtrace.chain.thread_id) rbtrace_thread_name_note(thread);
}

/* Whether a call event would be refused: no session, a big event or the
 * seal on, or no room in the ring (an unallocated ring has none). */
static inline int rbtrace_emit_call_refused(void)
{
    const size_t room = RBTRACE_CALL_EVENT_MAX + RBTRACE_LOST_EVENT_MAX;

    return !rbtrace.attached || rbtrace.big_event || rbtrace.sealed ||
        rbtrace_ring_space(&rbtrace.ring, room) < room;
}

/* --thread-names: the name of the current thread, due before a call event
 * at now; nonzero when the event is no longer wanted. Thread#name may let
 * other threads run (Ruby checks interrupts as it returns): meanwhile the
 * session may have ended (its ring freed) or another begun (its method
 * ids and clock afresh), so what the caller tested before is tested again
 * after this, and a method's id taken again. */
static inline int rbtrace_emit_thread_name_before(uint64_t now)
{
    rbtrace_emit_thread_name_due();
    return rbtrace.calls_ended || now < rbtrace.clock_origin_ns;
}

/* rbtrace_emit_call's way for a call event that its thread's name
 * precedes (emit.c). */
void rbtrace_emit_call_named(rb_event_flag_t event, VALUE klass, ID mid, uint64_t now);

/* A CALL (event RUBY_EVENT_CALL or _C_CALL) or RETURN of (klass, mid) at
 * now (rbtrace_clock_ns), of the current thread. */
static inline __attribute__((always_inline)) void
rbtrace_emit_call(rb_event_flag_t event, VALUE klass, ID mid, uint64_t now)
{
    uint32_t id;

    if (rbtrace.calls_ended) return;
    /* A full ring (a client that stopped reading) costs no naming. */
    if (rbtrace_emit_call_refused() || (id = rbtrace_emit_method_id(klass, mid)) == 0) {
        rbtrace.lost++;
        return;
    }
    if (__builtin_expect(rbtrace.thread_names, 0) && rbtrace_thread_id() != rbtrace.chain.thread_id)
        rbtrace_emit_call_named(event, klass, mid, now);
    else rbtrace_emit_call_of(event, id, now);
}

/*
 * --firehose's way, for a hook that found rbtrace_firehose_only: a CALL or
 * RETURN of a method met lately, encoded in place now. Returns the events
 * it wrote: 1, or 0 (not a failure) where anything more is needed (a
 * method not met lately, a loss report due, the ring's limit passed): the
 * caller's general way then does it.
 * No call but a tail call (a clock without the TSC, or its anchor due):
 * the hook needs no stack frame for this. klass and mid are not both 0
 * (an empty slot's pair).
 */
static inline __attribute__((always_inline)) int rbtrace_emit_recent_call(rb_event_flag_t event,
                                                                          VALUE klass, ID mid)
{
    const struct rbtrace_method_slot *r = rbtrace_recent_method(klass, mid);
    uint64_t now;
    char *out;

    if (r->mid != mid || r->klass != klass || rbtrace.lost || rbtrace_alloc_pending ||
        !rbtrace_ring_fits_quick(&rbtrace.ring, RBTRACE_CALL_EVENT_MAX))
        return 0;
    out = rbtrace_ring_at_head(&rbtrace.ring);
    if (rbtrace_clock_ns_quick(&now))
        rbtrace_emit_call_at(out, rbtrace_call_event_type(event), r->id,
                             now - rbtrace.clock_origin_ns);
    else rbtrace_emit_call_at_now(out, rbtrace_call_event_type(event), r->id);
    return 1;
}

#endif
