/*
 * devmode.c - --devmode: -m selectors that follow their classes by name.
 *
 * A development server reloads code: the class Foo a selector resolved to
 * is replaced by a new class object also named Foo, and tracing the old
 * one shows nothing. With --devmode every selector that names a class is
 * remembered with that name; a RUBY_EVENT_END hook (the end of a class
 * body: the methods of a reloaded class are defined by then) compares the
 * name of each class whose body ends, and when a new class object carries
 * a remembered name, the selector is resolved again and traced on it. A
 * selector whose class is not defined yet (autoloaded later) waits for it
 * the same way, with a notice instead of an error.
 *
 * Classes built without a class body (Class.new, const_set) are not seen.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "devmode.h"
#include "emit.h"
#include "selector.h"
#include "trace.h"

#define DEVMODE_HOOK ((rb_event_hook_func_t)(void (*)(void))devmode_hook_i)

/* entries: Array of [class path String, selector String, class traced or nil] */
static struct {
    int active;
    VALUE entries;
} dev = { 0, Qnil };

/* The entry of selector sel, or Qnil. */
static VALUE devmode_entry(VALUE sel)
{
    long i;

    for (i = 0; i < RARRAY_LEN(dev.entries); i++) {
        VALUE e = RARRAY_AREF(dev.entries, i);
        if (RARRAY_AREF(e, 1) == sel) return e;
    }
    return Qnil;
}

/* At the end of a class body: selectors that name this class, but are not
 * traced on this very class object, are resolved again. */
static void devmode_hook_i(VALUE data, rb_trace_arg_t *targ)
{
    VALUE klass = rb_tracearg_self(targ), name, err = Qnil;
    long i;

    (void)data;
    if (!dev.active || !rbtrace.attached) return;
    if (!RB_TYPE_P(klass, T_CLASS) && !RB_TYPE_P(klass, T_MODULE)) return;
    name = rb_mod_name(klass);
    if (!RB_TYPE_P(name, T_STRING)) return;
    for (i = 0; i < RARRAY_LEN(dev.entries); i++) {
        VALUE e = RARRAY_AREF(dev.entries, i), sel = RARRAY_AREF(e, 1);
        if (RARRAY_AREF(e, 2) == klass || rb_str_equal(RARRAY_AREF(e, 0), name) != Qtrue) continue;
        /* Not complete yet (the method comes later): wait for another end. */
        if (rbtrace_trace_add_one(sel, &err) != 0) continue;
        rb_ary_store(e, 2, klass);
        rbtrace_emit_message(RBTRACE_EV_NOTICE, "%.*s (re)defined: tracing %.*s on it",
                             (int)RSTRING_LEN(name), RSTRING_PTR(name), (int)RSTRING_LEN(sel),
                             RSTRING_PTR(sel));
    }
}

void rbtrace_devmode_start(void)
{
    if (dev.active) return;
    dev.entries = rb_ary_new();
    rb_add_event_hook2(DEVMODE_HOOK, RUBY_EVENT_END, Qnil,
                       RUBY_EVENT_HOOK_FLAG_SAFE | RUBY_EVENT_HOOK_FLAG_RAW_ARG);
    dev.active = 1;
    rbtrace_emit_message(RBTRACE_EV_NOTICE,
                         "devmode: selectors follow their classes by name "
                         "(reloaded or defined later)");
}

/* Remembers a selector that names a class (0), to be traced through
 * rbtrace_devmode_traced or _failed; -1 when devmode is off or the selector
 * names no class (it is then traced the usual way). */
int rbtrace_devmode_watch(VALUE sel)
{
    VALUE path, klass;

    if (!dev.active) return -1;
    if (rbtrace_selector_class(sel, &path, &klass) != 0) return -1;
    rb_ary_push(dev.entries, rb_ary_new_from_args(3, path, sel, Qnil));
    return 0;
}

/* The selector is traced on the class its name now denotes. */
void rbtrace_devmode_traced(VALUE sel)
{
    VALUE e = devmode_entry(sel), path, klass;

    if (NIL_P(e)) return;
    if (rbtrace_selector_class(sel, &path, &klass) == 0) rb_ary_store(e, 2, klass);
}

/* The selector could not be traced now: a class or method not defined yet
 * waits for it (a notice); any other error is reported. */
void rbtrace_devmode_failed(VALUE sel, VALUE error)
{
    VALUE msg;
    int state = 0;

    if (!rbtrace_selector_not_defined_p(error)) {
        rbtrace_report_selector_error(sel, error);
        return;
    }
    msg = rbtrace_protect(rb_obj_as_string, error, &state, NULL);
    if (state || !RB_TYPE_P(msg, T_STRING)) msg = rb_str_new_cstr("not defined");
    rbtrace_emit_message(RBTRACE_EV_NOTICE, "%.*s: %.*s yet; traced once it is defined",
                         (int)RSTRING_LEN(sel), RSTRING_PTR(sel), (int)RSTRING_LEN(msg),
                         RSTRING_PTR(msg));
}

void rbtrace_devmode_stop(void)
{
    if (!dev.active) return;
    rb_remove_event_hook(DEVMODE_HOOK);
    dev.active = 0;
    dev.entries = Qnil;
}

int rbtrace_devmode_active(void)
{
    return dev.active;
}

void rbtrace_devmode_mark(void)
{
    rb_gc_mark(dev.entries);
}
