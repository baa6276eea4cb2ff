/*
 * raisewatch.c - --raise: each exception raised in the process, with its
 * class, message and where it was raised.
 *
 * A RAISE event hook. Unlike the GC hooks it runs where Ruby code may run
 * (as a TracePoint(:raise) block would), so the message is read in Ruby:
 * RBTrace.describe_raise (lib/rbtrace/raise_report.rb) calls #message
 * under a rescue, and skips rbtrace's own exceptions. An exception raised
 * while describing one is not reported (the hook does not re-enter).
 */
#include "rbtrace.h"  /* first: ruby.h sets _GNU_SOURCE */

#define RAISE_HOOK ((rb_event_hook_func_t)(void (*)(void))raise_hook_i)

static int raise_active;
static int raise_busy;    /* describing an exception: do not re-enter */
static ID id_describe_raise;

struct raise_arg {
    VALUE exc;
    VALUE path;
    VALUE line;
};

static VALUE raise_describe_i(VALUE p)
{
    const struct raise_arg *a = (const struct raise_arg *)p;
    return rb_funcall(rbtrace_mRBTrace, id_describe_raise, 3, a->exc, a->path, a->line);
}

static void raise_hook_i(VALUE data, rb_trace_arg_t *targ)
{
    struct raise_arg arg;
    uint64_t now;
    VALUE info;
    int state = 0;

    (void)data;
    /* The main Ractor's hook; the check is the ring's safety (ractors.c). */
    if (!raise_active || raise_busy || !rbtrace.attached || !rbtrace_main_ractor_p()) return;
    now = rbtrace_clock_ns();
    arg.exc = rb_tracearg_raised_exception(targ);
    arg.path = rb_tracearg_path(targ);
    arg.line = rb_tracearg_lineno(targ);
    raise_busy = 1;
    info = rb_protect(raise_describe_i, (VALUE)&arg, &state);
    raise_busy = 0;
    /* describe_raise rescues everything; what escapes is an interrupt for
     * the app (Thread#raise, kill), deferred past it: it goes on. */
    if (state) rb_jump_tag(state);
    if (!RB_TYPE_P(info, T_ARRAY) || RARRAY_LEN(info) != 3) return;   /* one of ours */
    rbtrace_emit_raise(now, RARRAY_AREF(info, 0), RARRAY_AREF(info, 1), RARRAY_AREF(info, 2));
}

void rbtrace_raise_start(void)
{
    if (raise_active) return;
    rb_add_event_hook2(RAISE_HOOK, RUBY_EVENT_RAISE, Qnil,
                       RUBY_EVENT_HOOK_FLAG_SAFE | RUBY_EVENT_HOOK_FLAG_RAW_ARG);
    raise_active = 1;
}

void rbtrace_raise_stop(void)
{
    if (!raise_active) return;
    rb_remove_event_hook(RAISE_HOOK);
    raise_active = 0;
}

void Init_rbtrace_raisewatch(VALUE mod)
{
    (void)mod;
    id_describe_raise = rb_intern("describe_raise");
}
