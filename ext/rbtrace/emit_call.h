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

/* The pairs asked for lately, direct-mapped by a cheap hash: the few
 * methods a loop calls skip the table (and a function call). Copies of
 * the table's slots; all zero when empty. */
#define RBTRACE_RECENT_METHODS 64
extern struct rbtrace_method_slot rbtrace_recent_methods[RBTRACE_RECENT_METHODS];

/* emit.c: the id of (klass, mid) from the table, naming it first if it is
 * new; 0 if the name could not be sent. */
uint32_t rbtrace_emit_method_id_lookup(VALUE klass, VALUE mid);
/* emit.c: a CALL or RETURN through emit_push, which knows when to drop it. */
void rbtrace_emit_call_pushed(enum rbtrace_event_type type, uint64_t time, uint32_t id);

static inline struct rbtrace_method_slot *rbtrace_recent_method(VALUE klass, VALUE mid)
{
    return &rbtrace_recent_methods[((klass >> 3) ^ (mid >> 8)) & (RBTRACE_RECENT_METHODS - 1)];
}

/* The id of (klass, mid), naming it first if it is new; 0 if the name
 * could not be sent (the caller's event is then dropped too). An empty
 * slot's mid is 0, which no method name (a Symbol) is. */
static inline __attribute__((always_inline)) uint32_t
rbtrace_emit_method_id(VALUE klass, VALUE mid)
{
    const struct rbtrace_method_slot *r = rbtrace_recent_method(klass, mid);

    if (r->mid == mid && r->klass == klass) return r->id;
    return rbtrace_emit_method_id_lookup(klass, mid);
}

/* A CALL (event RUBY_EVENT_CALL or _C_CALL) or RETURN of (klass, mid) at
 * now (rbtrace_clock_ns), of the current thread. */
static inline __attribute__((always_inline)) void
rbtrace_emit_call(rb_event_flag_t event, VALUE klass, VALUE mid, uint64_t now)
{
    enum rbtrace_event_type type =
        (event & (RUBY_EVENT_CALL | RUBY_EVENT_C_CALL)) ? RBTRACE_EV_CALL : RBTRACE_EV_RETURN;
    const size_t room = RBTRACE_CALL_EVENT_MAX + RBTRACE_LOST_EVENT_MAX;
    char *out;
    uint32_t id;

    if (rbtrace.calls_ended) return;
    /* A full ring (a client that stopped reading) costs no encoding. An
     * unallocated ring has no space. */
    if (!rbtrace.attached || rbtrace_ring_space(&rbtrace.ring, room) < room ||
        (id = rbtrace_emit_method_id(klass, mid)) == 0) {
        rbtrace.lost++;
        return;
    }
    /* Most events are encoded in place, straight into the ring; the rest
     * (a loss report due, a big event or DETACHED under way, the ring's
     * end) are pushed. */
    now -= rbtrace.clock_origin_ns;
    if (!rbtrace.lost && !rbtrace.big_event && !rbtrace.sealed &&
        (out = rbtrace_ring_head_room(&rbtrace.ring, RBTRACE_CALL_EVENT_MAX)) != NULL) {
        uint64_t thread = rbtrace_thread_id();

        rbtrace_ring_commit(&rbtrace.ring, rbtrace_event_encode_call_chained(
            out, &rbtrace.chain, type, thread, now, id));
        rbtrace_call_chain_note(&rbtrace.chain, thread, now);
        return;
    }
    rbtrace_emit_call_pushed(type, now, id);
}

#endif
