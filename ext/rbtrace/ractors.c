/*
 * ractors.c - rbtrace traces the main Ractor only.
 *
 * The event ring has one producer at a time: the thread holding the GVL.
 * A Ractor other than the main one runs under a lock of its own, in
 * parallel with the main one, so an event it wrote would interleave with
 * the main Ractor's (the client read them as malformed events) or run past
 * the ring's end. The hooks that can fire there are the ones attached to a
 * method rather than to the main Ractor: a wrapper (wrapper.c, a C method
 * any Ractor may call) and a targeted TracePoint (tracer.c, on bytecode
 * every Ractor runs). Event hooks added with rb_add_event_hook (the global
 * hook of tracer.c, gcwatch.c's, raisewatch.c's) are the main Ractor's own
 * and never fire elsewhere; they check anyway where it costs nothing on a
 * hot path.
 *
 * A traced call from another Ractor is skipped and counted here (an atomic
 * add: Ractors run in parallel); the count is told to the client once, at
 * the detach (emit.c, rbtrace_emit_detached).
 *
 * Which Ractor runs: a Ractor-local pointer (public API, Ruby 3.0+) set in
 * the main Ractor only, which Ruby reads there without a lookup (the key's
 * cache for the main Ractor). Without Ractors (Ruby 2.7) every thread is
 * the main Ractor's.
 */
#include "rbtrace.h"

#ifdef RBTRACE_HAVE_RACTORS
rb_ractor_local_key_t rbtrace_main_ractor_key;

static void ractors_nothing(void *ptr)
{
    (void)ptr;
}

/* The key's value is a static marker: nothing to mark, nothing to free. */
static const struct rb_ractor_local_storage_type ractors_marker_type = {
    ractors_nothing, ractors_nothing
};
static char ractors_main_marker;
#endif

/* Calls of traced methods skipped in other Ractors since the attach. */
static uint64_t ractors_other_calls;

void rbtrace_ractors_count_other(void)
{
    __atomic_fetch_add(&ractors_other_calls, 1, __ATOMIC_RELAXED);
}

/* The count since the attach, set back to 0. */
uint64_t rbtrace_ractors_take_other(void)
{
    return __atomic_exchange_n(&ractors_other_calls, 0, __ATOMIC_RELAXED);
}

/* Called in the main Ractor (the extension's Init). */
void Init_rbtrace_ractors(VALUE mod)
{
    (void)mod;
#ifdef RBTRACE_HAVE_RACTORS
    rbtrace_main_ractor_key = rb_ractor_local_storage_ptr_newkey(&ractors_marker_type);
    rb_ractor_local_storage_ptr_set(rbtrace_main_ractor_key, &ractors_main_marker);
#endif
}
