/*
 * emit_call.h - the hot path: a CALL or RETURN encoded straight into the
 * ring, inline in the event hook (tracer.c) and the wrappers (wrapper.c),
 * so that an event costs no call of ours and no second stack frame.
 * Everything rarer is out of line in emit.c: a method not among the recent
 * ones, an event that cannot be encoded in place.
 *
 * No malloc, no Ruby allocation, no syscall, no lock but the GVL the
 * caller holds. It may be reached after a detach freed the ring and the
 * tables (trace expressions and wrapped methods can give up the GVL
 * mid-call): the attached flag and the freed ring's zero space stop it.
 */
#ifndef RBTRACE_EMIT_CALL_H
#define RBTRACE_EMIT_CALL_H

#include "rbtrace.h"

/* Whether the current call is rbtrace's own: made by the thread carrying
 * out a command (channel.c). One load and one compare. */
#define RBTRACE_OWN_CALL() (rbtrace_thread_id() == rbtrace.servicing_thread)

/* Whether the current call is one that trace expressions make, on the
 * thread evaluating them (tracer.c): rbtrace's work, not the app's. While
 * no thread evaluates, one test of a byte. */
static inline int rbtrace_expr_call_p(void)
{
    return rbtrace.in_expr && rbtrace_tracer_evaluating();
}

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
    return &rbtrace_recent_methods[((klass >> 3) ^ mid ^ (mid >> 4)) & (RBTRACE_RECENT_METHODS - 1)].method;
}

/* The id of (klass, mid), naming it first if it is new; 0 if the name
 * could not be sent (the caller's event is then dropped too). klass is
 * never 0 here (an empty slot's): an unknown owner is Qnil. */
static inline __attribute__((always_inline)) uint32_t
rbtrace_emit_method_id(VALUE klass, ID mid)
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

    rbtrace_ring_commit(&rbtrace.ring, rbtrace_event_encode_call_chained(
        out, &rbtrace.chain, type, thread, time, id));
    rbtrace_call_chain_note(&rbtrace.chain, thread, time);
}

/* A CALL (event RUBY_EVENT_CALL or _C_CALL) or RETURN of the method with
 * id at now (rbtrace_clock_ns), of the current thread, for a caller that
 * found attached set and big_event, sealed and calls_ended clear. Encoded
 * in place, straight into the ring; pushed when it cannot be (a loss
 * report due, the ring full or at its end). */
static inline __attribute__((always_inline)) void
rbtrace_emit_call_of(rb_event_flag_t event, uint32_t id, uint64_t now)
{
    char *out;

    now -= rbtrace.clock_origin_ns;
    if (!rbtrace.lost && (out = rbtrace_ring_reserve(&rbtrace.ring, RBTRACE_CALL_EVENT_MAX)) != NULL)
        rbtrace_emit_call_at(out, rbtrace_call_event_type(event), id, now);
    else
        rbtrace_emit_call_pushed(rbtrace_call_event_type(event), now, id);
}

/* --thread-names: the current thread's name goes first (threadnames.c)
 * where its call event starts a run of its own (not the chain's thread:
 * its first of the trace, or its first after another thread's). */
static inline void rbtrace_emit_thread_name_due(void)
{
    uint64_t thread = rbtrace_thread_id();

    if (thread != rbtrace.chain.thread_id) rbtrace_thread_name_note(thread);
}

/* A CALL (event RUBY_EVENT_CALL or _C_CALL) or RETURN of (klass, mid) at
 * now (rbtrace_clock_ns), of the current thread. */
static inline __attribute__((always_inline)) void
rbtrace_emit_call(rb_event_flag_t event, VALUE klass, ID mid, uint64_t now)
{
    const size_t room = RBTRACE_CALL_EVENT_MAX + RBTRACE_LOST_EVENT_MAX;
    uint32_t id;

    if (rbtrace.calls_ended) return;
    /* A full ring (a client that stopped reading) costs no naming. An
     * unallocated ring has no space. */
    if (!rbtrace.attached || rbtrace.big_event || rbtrace.sealed ||
        rbtrace_ring_space(&rbtrace.ring, room) < room ||
        (id = rbtrace_emit_method_id(klass, mid)) == 0) {
        rbtrace.lost++;
        return;
    }
    if (__builtin_expect(rbtrace.thread_names, 0)) rbtrace_emit_thread_name_due();
    rbtrace_emit_call_of(event, id, now);
}

/*
 * --firehose's way, for a hook that found rbtrace_firehose_only: a CALL or
 * RETURN of a method met lately, encoded in place now. 0 (nothing done)
 * where anything more is needed (a method not met lately, a loss report
 * due, the ring's limit passed): the caller's general way then does it.
 * No call but a tail call (a clock without the TSC, or its anchor due):
 * the hook needs no stack frame for this. klass and mid are not both 0
 * (an empty slot's pair).
 */
static inline __attribute__((always_inline)) int
rbtrace_emit_recent_call(rb_event_flag_t event, VALUE klass, ID mid)
{
    const struct rbtrace_method_slot *r = rbtrace_recent_method(klass, mid);
    uint64_t now;
    char *out;

    if (r->mid != mid || r->klass != klass || rbtrace.lost ||
        !rbtrace_ring_fits_quick(&rbtrace.ring, RBTRACE_CALL_EVENT_MAX))
        return 0;
    out = rbtrace_ring_at_head(&rbtrace.ring);
    if (rbtrace_clock_ns_quick(&now))
        rbtrace_emit_call_at(out, rbtrace_call_event_type(event), r->id, now - rbtrace.clock_origin_ns);
    else
        rbtrace_emit_call_at_now(out, rbtrace_call_event_type(event), r->id);
    return 1;
}

#endif
