/*
 * trace.c - what is traced: method selectors (each put in place as a
 * selection), --firehose, the modes started, and the VM event hook.
 *
 * Selectors are parsed by selector.c (resolved in Ruby: class names by
 * constant lookup, never by evaluating text), into a struct rbtrace_selector.
 * Each becomes an (owner, method name) pair: the owner a VALUE,
 * pinned against compaction, the name an ID (as the VM names a call's
 * method), that the hook compares against every call: an unmatched call
 * costs a few comparisons and no allocation.
 *
 * A selector naming one Ruby method of one class is traced by a TracePoint
 * on that method's bytecode alone (enable(target:)): no frame of ours in
 * its calls, so its arity, parameters, owner, source_location, caller and
 * the stack depth it reaches are its own. One naming a C method is traced
 * by a wrapper (wrapper.c) of the original's arity. Neither costs anything
 * elsewhere. Every other selector and --firehose use one global
 * call/return hook. Such a hook leaves the VM
 * somewhat slower after it is removed (see
 * docs/DESIGN.md, "Leave the process as fast as it was"); the client is
 * told when it is installed.
 *
 * A bad selector is reported (an ERROR event) and skipped. Selectors whose
 * class is not loaded are reported once per class (tracer files name the
 * classes of libraries a process may not use). A trace expression that
 * cannot work on its method (a parameter the library renamed) is reported
 * and left out as the selector is parsed (lib/rbtrace/expression_check.rb):
 * nothing of it reaches the hook. Two selectors of one method make one
 * selection, with the expressions of both.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "devmode.h"
#include "emit.h"
#include "gcwatch.h"
#include "gvlwatch.h"
#include "profile.h"
#include "allocwatch.h"
#include "ractors.h"
#include "raisewatch.h"
#include "selector.h"
#include "slow.h"
#include "threadnames.h"
#include "trace.h"
#include "wrapper.h"
#include <string.h>
#include <unistd.h>

/* RAW_ARG hooks take (data, trace_arg); the API types them as the old
 * five-argument hook, so the cast goes through a generic function type. */
#define TRACE_RAW_HOOK ((rb_event_hook_func_t)(void (*)(void))trace_raw_hook_i)

#define TRACE_EVENTS (RUBY_EVENT_CALL | RUBY_EVENT_RETURN | RUBY_EVENT_C_CALL | RUBY_EVENT_C_RETURN)

static ID id_trace_exprs, id_enable_targeted;

/* The selection of (klass, mid) among those the global hook watches. */
static const struct rbtrace_selection *trace_match(VALUE klass, ID mid)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_selections; i++) {
        const struct rbtrace_selection *t = &rbtrace.selections[i];
        if (t->tp) continue;
        if (rbtrace_selects(t->klass, t->mid, klass, mid)) return t;
    }
    return NULL;
}

/* The selection whose TracePoint (of calls or of returns) tpval is. */
static const struct rbtrace_selection *trace_of_tracepoint(VALUE tpval)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_selections; i++) {
        const struct rbtrace_selection *t = &rbtrace.selections[i];
        if (t->tp == tpval || t->tp_return == tpval) return t;
    }
    return NULL;
}

struct trace_expr_arg {
    rb_trace_arg_t *targ;
    VALUE exprs;
};

static VALUE trace_exprs_i(VALUE p)
{
    struct trace_expr_arg *arg = (struct trace_expr_arg *)p;
    rb_event_flag_t ev = rb_tracearg_event_flag(arg->targ);
    VALUE binding = (ev & RUBY_EVENT_CALL) ? rb_tracearg_binding(arg->targ) : Qnil;

    return rb_funcall(rbtrace_mRBTrace, id_trace_exprs, 3, rb_tracearg_self(arg->targ), binding,
                      arg->exprs);
}

/*
 * Threads evaluating trace expressions. The expressions are Ruby code, in
 * which the VM may switch threads (a sleep, IO, a Mutex, the timer), and
 * other threads may then evaluate theirs: a list, each node on its
 * evaluation's stack. What must be left out meanwhile is the evaluating
 * thread's own calls (the expressions' work is rbtrace's, not the app's):
 * the VM's hooks never fire on a thread already inside one, but a wrapper
 * (wrapper.c) would record them. Every other thread's events are recorded
 * as ever: the encoder holds nothing across an evaluation (the values are
 * computed first, then the event is encoded, all with the GVL held).
 */

/* Evaluations end in any order (threads take turns): unlinked by address. */
static void trace_evaluator_unlink(const struct rbtrace_evaluator *me)
{
    struct rbtrace_evaluator **p;

    for (p = &rbtrace.evaluators; *p; p = &(*p)->next) {
        if (*p == me) {
            *p = me->next;
            break;
        }
    }
    rbtrace.in_expr = rbtrace.evaluators != NULL;
}

/* In a forked child only the forking thread lives on: another's evaluation
 * never ends there, and its node would leave in_expr set for good. */
void rbtrace_trace_after_fork(void)
{
    uint64_t self = rbtrace_thread_id();
    struct rbtrace_evaluator **p = &rbtrace.evaluators;

    while (*p) {
        if ((*p)->thread == self) p = &(*p)->next;
        else *p = (*p)->next;
    }
    rbtrace.in_expr = rbtrace.evaluators != NULL;
}

/* A call with trace expressions: evaluate them (slow path; allocates).
 * Out of line, for the same reason as rbtrace_slow_event. */
static __attribute__((noinline)) void trace_call_with_exprs(rb_trace_arg_t *targ, VALUE klass,
                                                            ID mid, VALUE exprs, uint64_t now)
{
    struct trace_expr_arg arg = { targ, exprs };
    struct rbtrace_evaluator me = { rbtrace_thread_id(), rbtrace.evaluators };
    VALUE values;
    int state = 0;

    /* rb_protect returns whatever ends the evaluation (a kill too): the
     * node is always unlinked before its stack frame goes. */
    rbtrace.evaluators = &me;
    rbtrace.in_expr = 1;
    values = rb_protect(trace_exprs_i, (VALUE)&arg, &state);
    trace_evaluator_unlink(&me);
    /* Expressions that raise are rescued in Ruby; what escapes is the app's
     * own interrupt (Thread#raise, Timeout, kill), deferred past the
     * evaluation by trace_exprs: it goes on to the app as it would have. */
    if (state) rb_jump_tag(state);
    if (!RB_TYPE_P(values, T_ARRAY) || RARRAY_LEN(values) != RARRAY_LEN(exprs)) {
        rbtrace_emit_call(RUBY_EVENT_CALL, klass, mid, now);
        return;
    }
    rbtrace_emit_call_args(klass, mid, now, exprs, values);
}

static inline __attribute__((always_inline)) void trace_event(rb_trace_arg_t *targ,
                                                              rb_event_flag_t ev,
                                                              const struct rbtrace_selection *t,
                                                              VALUE klass, ID mid);

/* What both global hooks do with an event once they know its method:
 * --slow's bookkeeping, then the selectors (or --firehose). targ is NULL
 * for the plain hook, which records a call without its selector's
 * expressions: a selector with some is only watched by it between being
 * added and trace_install swapping the hooks. */
static inline __attribute__((always_inline)) void
trace_hooked(rb_trace_arg_t *targ, rb_event_flag_t ev, VALUE klass, ID mid)
{
    const struct rbtrace_selection *t = NULL;

    /* A wrapper's own method (wrapper.c, a C method) is rbtrace's: not
     * shown, nor named, so never among the recent methods either. */
    if ((ev & (RUBY_EVENT_C_CALL | RUBY_EVENT_C_RETURN)) && rbtrace_wrapper_module_p(klass)) return;
    if (rbtrace.slow) rbtrace_slow_event(ev, klass, mid);
    if (!rbtrace.firehose && (t = trace_match(klass, mid)) == NULL) return;
    trace_event(targ, ev, targ ? t : NULL, klass, mid);
}

/* The plain hook's events past --firehose's way: the method's owner as
 * rb_tracearg_defined_class gives it (a module's method is its module's,
 * not the class that includes it; Qnil if unknown), then trace_hooked.
 * Out of line, so that the firehose's way keeps a small frame. */
static __attribute__((noinline)) void trace_hook_named(rb_event_flag_t ev, VALUE klass, ID mid)
{
    if (!klass || !mid) klass = Qnil;
    else if (RB_TYPE_P(klass, T_ICLASS)) klass = RBASIC(klass)->klass;
    trace_hooked(NULL, ev, klass, mid);
}

/*
 * The event hook: runs inside every call of the process. A plain hook,
 * not RAW_ARG: the VM hands it the event, and for a C method (and a
 * method made by define_method) its id and owner, which a RAW_ARG hook
 * must ask for through three calls into the VM (rb_tracearg_event_flag,
 * _method_id, _defined_class: ~35 instructions an event). For a Ruby
 * method's call and return it passes no id; the method is then the
 * current frame's, as rb_tracearg_method_id would find it.
 *
 * Under --firehose alone, a method met lately (the recent pairs) is
 * encoded at once: one compare of the event flags, the pair's lookup,
 * the ring's one compare. The pairs hold the owner as the general way
 * names it: a module's method called through a class that includes it
 * (the VM hands over the ICLASS) always takes the general way.
 */
static inline __attribute__((always_inline)) void trace_hook_known(rb_event_flag_t ev, VALUE klass,
                                                                   ID mid)
{
    if (rbtrace_firehose_only() && rbtrace_emit_recent_call(ev, klass, mid)) return;
    trace_hook_named(ev, klass, mid);
}

/* A Ruby method's call or return: the method is the current frame's. Out
 * of line, so that a C method's event needs no stack frame for it. No
 * stack protector: its locals are two words, no buffer. */
static __attribute__((noinline)) RBTRACE_NO_STACK_PROTECTOR void
trace_hook_frame(rb_event_flag_t ev)
{
    ID mid;
    VALUE klass;

    if (!rb_frame_method_id_and_class(&mid, &klass)) {
        trace_hook_named(ev, Qnil, 0);
        return;
    }
    trace_hook_known(ev, klass, mid);
}

/* (A hook added by rb_add_event_hook is the main Ractor's alone: other
 * Ractors never run it, ractors.c.) */
static void trace_hook_i(rb_event_flag_t ev, VALUE data, VALUE self, ID id, VALUE klass)
{
    /* --firehose alone implies attached: under it a C method's event met
     * lately costs one test of the flags here (trace_hook_known's). */
    if ((!rbtrace_firehose_only() && !rbtrace.attached) || RBTRACE_OWN_CALL()) return;
    if (id == 0) trace_hook_frame(ev);
    else trace_hook_known(ev, klass, id);
}

/* The same hook with the trace arg (RAW_ARG), for selectors with trace
 * expressions, which need the call's receiver and binding. */
static void trace_raw_hook_i(VALUE data, rb_trace_arg_t *targ)
{
    if (!rbtrace.attached || RBTRACE_OWN_CALL()) return;
    trace_hooked(targ, rb_tracearg_event_flag(targ), rb_tracearg_defined_class(targ),
                 rbtrace_method_id_of(rb_tracearg_method_id(targ)));
}

/* A call or return of a traced method: encoded, with its expressions
 * (those need targ). Inline, always (GCC would split it off): under
 * --firehose it runs for every call and return. */
static inline __attribute__((always_inline)) void trace_event(rb_trace_arg_t *targ,
                                                              rb_event_flag_t ev,
                                                              const struct rbtrace_selection *t,
                                                              VALUE klass, ID mid)
{
    /* The expressions' own calls: never, through the VM's hooks (a thread
     * inside a hook does not enter another), but kept out all the same. */
    if (rbtrace_expr_call_p()) return;
    if (t && t->exprs != Qnil && (ev & (RUBY_EVENT_CALL | RUBY_EVENT_C_CALL)))
        trace_call_with_exprs(targ, klass, mid, t->exprs, rbtrace_clock_ns());
    else rbtrace_emit_call(ev, klass, mid, rbtrace_clock_ns());
}

/*
 * The TracePoints on one Ruby method (RBTrace.enable_targeted): only that
 * method's bytecode fires them; nothing else in the process pays. Two of
 * them, one for calls and one for returns, whose data is the event: the
 * method is the selection's own (its owner and original name, whichever alias
 * was called), so a call needs no question to the VM (each rb_tracearg_*
 * is a call into it) unless it has trace expressions.
 */
static void trace_targeted_i(VALUE tpval, void *data)
{
    const struct rbtrace_selection *t;
    rb_event_flag_t ev = (rb_event_flag_t)(uintptr_t)data;

    /* A block's method has one TracePoint of both events (data 0). */
    if (!ev) ev = rb_tracearg_event_flag(rb_tracearg_from_tracepoint(tpval));

    if (!rbtrace.attached) return;
    /* Every Ractor runs the method's bytecode: another's call is counted
     * (ractors.c), before anything of rbtrace's is read. */
    if (!rbtrace_main_ractor_p()) {
        if (ev == RUBY_EVENT_CALL) rbtrace_ractors_count_other();
        return;
    }
    /* Under -f the global hook shows every call already. */
    if (rbtrace.firehose || RBTRACE_OWN_CALL()) return;
    if ((t = trace_of_tracepoint(tpval)) == NULL) return;
    trace_event(t->exprs != Qnil && ev == RUBY_EVENT_CALL ? rb_tracearg_from_tracepoint(tpval)
                                                          : NULL,
                ev, t, t->klass, t->mid);
}

struct trace_target_arg {
    VALUE tp;
    VALUE method;
};

static VALUE trace_enable_targeted_i(VALUE p)
{
    const struct trace_target_arg *a = (const struct trace_target_arg *)p;
    return rb_funcall(rbtrace_mRBTrace, id_enable_targeted, 2, a->tp, a->method);
}

/* A TracePoint of events for method alone, its data the event when there
 * is one (else 0); 0 if the VM refuses. */
static VALUE trace_targeted_tracepoint(VALUE method, rb_event_flag_t events, rb_event_flag_t data)
{
    struct trace_target_arg a;
    int state = 0;

    a.tp = rb_tracepoint_new(Qnil, events, trace_targeted_i, (void *)(uintptr_t)data);
    a.method = method;
    rbtrace_protect(trace_enable_targeted_i, (VALUE)&a, &state, NULL);
    return state ? 0 : a.tp;
}

/*
 * Gives t TracePoints on method, of calls and of returns: 0, or -1 (none)
 * if the VM refuses (the caller then uses the global hook). A block's method
 * (define_method) gets one of both events: Ruby fires no call event for
 * it to a second TracePoint targeted at it (spec/e2e/methods_spec.rb).
 *
 * Returns first: enabling runs Ruby code (RBTrace.enable_targeted), where
 * an app thread may take the GVL and call the method. Between the two, a
 * return without its call is what a call under way at the attach gives,
 * and the client closes nothing for it; a call without its return (calls
 * first, as it was) left every later line of that thread nested under it.
 */
static int trace_target(struct rbtrace_selection *t, VALUE method, int block_method)
{
    if (block_method) {
        t->tp = trace_targeted_tracepoint(method, RUBY_EVENT_CALL | RUBY_EVENT_RETURN, 0);
        t->tp_return = 0;
        return t->tp ? 0 : -1;
    }
    t->tp_return = trace_targeted_tracepoint(method, RUBY_EVENT_RETURN, RUBY_EVENT_RETURN);
    t->tp = t->tp_return ? trace_targeted_tracepoint(method, RUBY_EVENT_CALL, RUBY_EVENT_CALL) : 0;
    if (t->tp_return && !t->tp) {
        rb_tracepoint_disable(t->tp_return);
        t->tp_return = 0;
    }
    return t->tp ? 0 : -1;
}

/* Stops t's TracePoints, if it has any: calls first (as trace_target,
 * so that no call is left without its return). */
static void trace_untarget(const struct rbtrace_selection *t)
{
    if (t->tp) rb_tracepoint_disable(t->tp);
    if (t->tp_return) rb_tracepoint_disable(t->tp_return);
}

/* The selection that already watches (klass, mid), from another selector
 * (an alias of the method, or another line naming it); NULL if none. A
 * second selection would show each call twice. */
static struct rbtrace_selection *trace_of_method(VALUE klass, ID mid)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_selections; i++)
        if (rbtrace.selections[i].klass == klass && rbtrace.selections[i].mid == mid)
            return &rbtrace.selections[i];
    return NULL;
}

/* Adds exprs (a frozen Array, or nil) to t's: the call is shown once,
 * with the first selector's expressions, then the others' not already
 * among them. t's Array is frozen (the hook reads it at each call):
 * replaced, never changed. */
static void trace_merge_exprs(struct rbtrace_selection *t, VALUE exprs)
{
    VALUE merged;
    long i;

    if (NIL_P(exprs)) return;
    if (NIL_P(t->exprs)) {
        t->exprs = exprs;
        return;
    }
    merged = rb_ary_dup(t->exprs);
    for (i = 0; i < RARRAY_LEN(exprs); i++)
        if (!RTEST(rb_ary_includes(merged, RARRAY_AREF(exprs, i))))
            rb_ary_push(merged, RARRAY_AREF(exprs, i));
    t->exprs = rb_ary_freeze(merged);
}

/* Whether a selector the global hook watches has trace expressions,
 * evaluated only where --firehose is off (trace_hook_i). */
static int trace_hook_needs_targ(void)
{
    uint32_t i;

    if (rbtrace.firehose) return 0;
    for (i = 0; i < rbtrace.n_selections; i++)
        if (!rbtrace.selections[i].tp && rbtrace.selections[i].exprs != Qnil) return 1;
    return 0;
}

static void trace_remove_hook(void)
{
    if (!rbtrace.hook_installed) return;
    rb_remove_event_hook(rbtrace.hook_raw ? TRACE_RAW_HOOK : trace_hook_i);
    rbtrace.hook_installed = 0;
}

/* Installs the global hook, or swaps it for the kind the selectors now
 * need: the plain one, or the RAW_ARG one for trace expressions. */
static void trace_install(void)
{
    int raw = trace_hook_needs_targ(), first = !rbtrace.hook_installed;

    if (rbtrace.hook_installed && rbtrace.hook_raw == raw) return;
    trace_remove_hook();
    if (raw)
        rb_add_event_hook2(TRACE_RAW_HOOK, TRACE_EVENTS, Qnil,
                           RUBY_EVENT_HOOK_FLAG_SAFE | RUBY_EVENT_HOOK_FLAG_RAW_ARG);
    else rb_add_event_hook2(trace_hook_i, TRACE_EVENTS, Qnil, RUBY_EVENT_HOOK_FLAG_SAFE);
    rbtrace.hook_installed = 1;
    rbtrace.hook_raw = raw;
    if (first)
        rbtrace_emit_message(RBTRACE_EV_NOTICE,
                             "tracing with global VM hooks: this process may stay somewhat "
                             "slower after detach, until it restarts");
}

/* sel's method wrapped (wrapper.c); may raise (a frozen class). */
static VALUE trace_wrap_i(VALUE p)
{
    const struct rbtrace_selector *sel = (const struct rbtrace_selector *)p;

    rbtrace_wrapper_add(sel->owner, ID2SYM(sel->wrapped_mid), ID2SYM(sel->mid), sel->visibility,
                        INT2NUM(sel->arity));
    return Qnil;
}

/* A selector that is not traced: its error stored in *error when error is
 * not NULL, else reported. Returns 0 (not traced). */
static int trace_failed(VALUE text, VALUE err, VALUE *error)
{
    if (error) *error = err;
    else rbtrace_report_selector_error(text, err);
    return -1;
}

/* Forgets the hooked selections made from selector (--devmode re-adds it). */
static void trace_remove(VALUE selector)
{
    uint32_t i, kept = 0;

    for (i = 0; i < rbtrace.n_selections; i++) {
        if (rb_str_equal(rbtrace.selections[i].selector, selector) == Qtrue) {
            trace_untarget(&rbtrace.selections[i]);
            continue;
        }
        rbtrace.selections[kept++] = rbtrace.selections[i];
    }
    rbtrace.n_selections = kept;
}

/* Adds the selection of one selector: a wrapper, or an entry for the hook,
 * in which case *hook is set: the caller installs the hook once every
 * selector of the command is in (the selectors after this one are parsed
 * in Ruby, whose calls the hook would otherwise show as the app's).
 * A bad selector is skipped: reported, or its error stored in *error when
 * error is not NULL. Returns 0 if the selector is traced, else -1. */
static int trace_add_one(VALUE text, VALUE *error, int *hook)
{
    struct rbtrace_selector sel;
    struct rbtrace_selection *t;
    VALUE err = Qnil;
    int state = 0;

    if (rbtrace_selector_parse(text, RBTRACE_SELECTOR_CHECKED, &sel, &err) != 0)
        return trace_failed(text, err, error);
    rbtrace_selector_report_notes(&sel);
    if (rbtrace_selector_wrapped(&sel)) {
        /* A C method another selector's expressions already have the hook
         * watch: a wrapper too would show each call twice, and the hook's
         * event, nested in the wrapper's, without the expressions. */
        if (trace_of_method(sel.owner, sel.mid)) return 0;
        /* The global hook shows its calls already (another selector named
         * it through an alias): a wrapper would show each a second time. */
        if (trace_match(sel.owner, sel.mid)) return 0;
        /* Wrapping can fail (a frozen class): that selector alone. */
        rbtrace_protect(trace_wrap_i, (VALUE)&sel, &state, &err);
        return state ? trace_failed(text, err, error) : 0;
    }
    trace_remove(text);
    if (rbtrace.n_selections >= RBTRACE_SELECTORS_MAX) {
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "too many selectors (at most %d): %.*s is not "
                             "traced",
                             RBTRACE_SELECTORS_MAX, (int)RSTRING_LEN(text), RSTRING_PTR(text));
        return -1;
    }
    if ((t = trace_of_method(sel.owner, sel.mid)) != NULL) {
        trace_merge_exprs(t, sel.exprs);
        /* The hook swaps to the kind that evaluates expressions. */
        if (!t->tp) *hook = 1;
        return 0;
    }
    t = &rbtrace.selections[rbtrace.n_selections++];
    t->klass = sel.owner;
    t->mid = sel.mid;
    t->exprs = sel.exprs;
    t->selector = text;
    t->tp = t->tp_return = 0;
    /* A Ruby method gets TracePoints of its own; anything else (or a Ruby
     * method whose TracePoint the VM refused), the global hook. */
    if (NIL_P(sel.ruby_method) || trace_target(t, sel.ruby_method, sel.block_method) != 0) {
        *hook = 1;
        /* The hook sees the calls of a wrapped method too. */
        rbtrace_wrapper_shadow(sel.owner, sel.mid);
    }
    return 0;
}

int rbtrace_trace_add_one(VALUE sel, VALUE *error)
{
    int hook = 0, rc = trace_add_one(sel, error, &hook);

    if (hook) trace_install();
    return rc;
}

/* Adds one selection per selector; a bad selector is reported and skipped
 * (with --devmode, one whose class or method is not defined yet waits).
 * The selectors with expressions go first: a C method that one of them
 * names is then watched by the hook, with them, and not also wrapped for
 * a selector without any (trace_add_one). */
void rbtrace_trace_add(VALUE selectors)
{
    VALUE errors = rbtrace_selector_errors_new();
    long i, k, n = RARRAY_LEN(selectors);
    int hook = 0;

    for (k = 0; k < 2 * n; k++) {
        VALUE sel, err = Qnil;
        int optional;

        i = k % n;
        if (rbtrace_selector_has_exprs(RARRAY_AREF(selectors, i)) != (k < n)) continue;
        sel = rb_str_new_frozen(RARRAY_AREF(selectors, i));
        optional = rbtrace_selector_optional(&sel);
        if (rbtrace_devmode_watch(sel) == 0) {
            if (trace_add_one(sel, &err, &hook) == 0) rbtrace_devmode_traced(sel);
            else rbtrace_devmode_failed(sel, err);
        } else if (trace_add_one(sel, &err, &hook) != 0) {
            if (optional && rbtrace_selector_not_defined_p(err))
                rbtrace_selector_report_absent(sel, err);
            else rbtrace_selector_errors_add(errors, sel, err);
        }
    }
    rbtrace_selector_errors_report(errors);
    RB_GC_GUARD(errors);
    if (hook) trace_install();
}

void rbtrace_trace_firehose(void)
{
    rbtrace.firehose = 1;
    trace_install();
}

/* --slow, --slowcpu: watched through the same hook. */
void rbtrace_trace_slow(uint64_t threshold_ns, int cpu, VALUE selectors)
{
    rbtrace.slow = 0;
    if (rbtrace_slow_start(threshold_ns, cpu, selectors) != 0) return;
    rbtrace.slow = 1;
    trace_install();
}

/* --gc: internal events, no call hook (gcwatch.c). */
void rbtrace_trace_gc(void)
{
    rbtrace_gc_start();
}

/* --raise: a raise hook (raisewatch.c). */
void rbtrace_trace_raise(void)
{
    rbtrace_raise_start();
}

/*
 * Whether the session traces anything: a selection, a wrapper, a watch
 * (--firehose, --slow, --gc, --raise, --gvl, --alloc), or --devmode, which
 * waits for its classes to be defined. SYNCED says it (protocol.h): a
 * trace whose every selector failed has nothing to wait for.
 * --thread-names alone only names the threads of the others.
 */
int rbtrace_trace_any(void)
{
    return rbtrace.n_selections > 0 || rbtrace_wrapper_any() || rbtrace.firehose || rbtrace.slow ||
        rbtrace_gc_active() || rbtrace_raise_active() || rbtrace_gvl_active() ||
        rbtrace_alloc_active() || rbtrace_devmode_active() || rbtrace_profile_active();
}

/* Removes every hook and the wrappers, and forgets every selection. */
void rbtrace_trace_clear(void)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_selections; i++) trace_untarget(&rbtrace.selections[i]);
    rbtrace_wrapper_clear();
    trace_remove_hook();
    rbtrace.firehose = 0;
    rbtrace.slow = 0;
    rbtrace.n_selections = 0;
    rbtrace_slow_stop();
    rbtrace_gc_stop();
    rbtrace_raise_stop();
    rbtrace_gvl_stop();
    rbtrace_profile_stop();
    rbtrace_alloc_stop();
    rbtrace_thread_names_stop();
    rbtrace_devmode_stop();
}

/* The hook compares these VALUEs by address: keep them alive and pinned
 * (rb_gc_mark, not rb_gc_mark_movable), or compaction would move them.
 * A method name's ID needs nothing (rbtrace_method_id_of). */
void rbtrace_trace_mark(void)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_selections; i++) {
        rb_gc_mark(rbtrace.selections[i].klass);
        rb_gc_mark(rbtrace.selections[i].exprs);
        rb_gc_mark(rbtrace.selections[i].selector);
        rb_gc_mark(rbtrace.selections[i].tp);
        rb_gc_mark(rbtrace.selections[i].tp_return);
    }
    rbtrace_slow_mark();
    rbtrace_devmode_mark();
    rbtrace_profile_mark();
}

void Init_rbtrace_trace(VALUE mod)
{
    id_trace_exprs = rb_intern("trace_exprs");
    id_enable_targeted = rb_intern("enable_targeted");
}
