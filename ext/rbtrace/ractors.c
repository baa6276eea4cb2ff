/*
 * ractors.c - rbtrace traces the main Ractor only.
 *
 * The event ring has one producer at a time: the thread holding the GVL.
 * A Ractor other than the main one runs under a lock of its own, in
 * parallel with the main one, so an event it wrote would interleave with
 * the main Ractor's (the client read them as malformed events) or run past
 * the ring's end. The hooks that can fire there are the ones attached to a
 * method rather than to the main Ractor: a wrapper (wrapper.c, a C method
 * any Ractor may call) and a targeted TracePoint (trace.c, on bytecode
 * every Ractor runs). Event hooks added with rb_add_event_hook (the global
 * hook of trace.c, gcwatch.c's, raisewatch.c's) are the main Ractor's own
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
 *
 * A finished Ractor switches the main Ractor's hooks off (Ruby's bug
 * https://bugs.ruby-lang.org/issues/19112, in 3.0 to 3.4; fixed in 4.0): when
 * the GC frees a Ractor's object, Ruby cleans that Ractor's (empty) hook
 * list and sets the VM's global event flags from it, to nothing. The main
 * Ractor's hooks stay in its list, but the events those flags gate fire no
 * more: the GC's internal events (--gc) and Ruby methods' calls and
 * returns (-f, --slow, --devmode's class ends). C methods' calls and
 * raises are checked against the list itself and go on. Adding a hook to
 * the main Ractor's list sets the flags from that list again:
 * rbtrace_ractors_restore_hooks does so with a hook that never runs, once
 * gcwatch.c finds that a collection was cut off (--gc only: on Ruby 3.1 a
 * GC hook crashes a starting Ractor's thread that collects before it has a
 * frame, 3.3 checks; so none is added to watch for -f and --slow). That revives
 * the app's own global TracePoints too, as any attach or detach of rbtrace
 * always did.
 */
#include "ractors.h" /* first: ruby.h sets _GNU_SOURCE */

#ifdef RBTRACE_HAVE_RACTORS
rb_ractor_local_key_t rbtrace_main_ractor_key;

static void ractors_nothing(void *ptr)
{
    (void)ptr;
}

/* The key's value is a static marker: nothing to mark, nothing to free. */
static const struct rb_ractor_local_storage_type ractors_marker_type = { ractors_nothing,
                                                                         ractors_nothing };
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

static void ractors_noop_hook(rb_event_flag_t ev, VALUE data, VALUE self, ID mid, VALUE klass)
{
    (void)ev;
    (void)data;
    (void)self;
    (void)mid;
    (void)klass;
}

/* Sets the VM's global event flags from the main Ractor's hooks again
 * (see above). With no event the hook never runs; both calls only walk the
 * list and set the flags: what was on stays on, nothing is recompiled.
 * In the main Ractor, with the GVL, outside any hook. */
void rbtrace_ractors_restore_hooks(void)
{
    rb_add_event_hook(ractors_noop_hook, 0, Qnil);
    rb_remove_event_hook(ractors_noop_hook);
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
