/*
 * tracer.c - method selectors and the VM event hook that watches them.
 *
 * Selectors are parsed and resolved in Ruby (RBTrace.parse_selector in
 * lib/rbtrace/selector.rb): class names by constant lookup, never by evaluating
 * text. Each becomes an (owner, method name) pair: the owner a VALUE,
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
 * tracer, with the expressions of both.
 */
#include <string.h>
#include <unistd.h>
#include "rbtrace.h"
#include "emit_call.h"

/* RAW_ARG hooks take (data, trace_arg); the API types them as the old
 * five-argument hook, so the cast goes through a generic function type. */
#define TRACER_RAW_HOOK ((rb_event_hook_func_t)(void (*)(void))tracer_raw_hook_i)

#define TRACER_EVENTS (RUBY_EVENT_CALL | RUBY_EVENT_RETURN | RUBY_EVENT_C_CALL | RUBY_EVENT_C_RETURN)

static ID id_parse_traced_selector, id_trace_exprs, id_enable_targeted, id_Selector, id_NotLoaded, id_at_path, id_at_note;

/* The tracer of (klass, mid) among those the global hook watches. */
static const struct rbtrace_tracer *tracer_match(VALUE klass, ID mid)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_tracers; i++) {
        const struct rbtrace_tracer *t = &rbtrace.tracers[i];
        if (t->tp) continue;
        if (rbtrace_selects(t->klass, t->mid, klass, mid)) return t;
    }
    return NULL;
}

/* The tracer whose TracePoint (of calls or of returns) tpval is. */
static const struct rbtrace_tracer *tracer_of_tracepoint(VALUE tpval)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_tracers; i++) {
        const struct rbtrace_tracer *t = &rbtrace.tracers[i];
        if (t->tp == tpval || t->tp_return == tpval) return t;
    }
    return NULL;
}

struct tracer_expr_arg {
    rb_trace_arg_t *targ;
    VALUE exprs;
};

static VALUE tracer_exprs_i(VALUE p)
{
    struct tracer_expr_arg *arg = (struct tracer_expr_arg *)p;
    rb_event_flag_t ev = rb_tracearg_event_flag(arg->targ);
    VALUE binding = (ev & RUBY_EVENT_CALL) ? rb_tracearg_binding(arg->targ) : Qnil;

    return rb_funcall(rbtrace_mRBTrace, id_trace_exprs, 3, rb_tracearg_self(arg->targ),
                      binding, arg->exprs);
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

/* Whether the current thread is evaluating trace expressions. Out of
 * line: only reached while some thread evaluates (rbtrace_expr_call_p). */
__attribute__((noinline)) int rbtrace_tracer_evaluating(void)
{
    uint64_t self = rbtrace_thread_id();
    const struct rbtrace_evaluator *e;

    for (e = rbtrace.evaluators; e; e = e->next)
        if (e->thread == self) return 1;
    return 0;
}

/* Evaluations end in any order (threads take turns): unlinked by address. */
static void tracer_evaluator_unlink(const struct rbtrace_evaluator *me)
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
void rbtrace_tracer_after_fork(void)
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
static __attribute__((noinline)) void tracer_call_with_exprs(rb_trace_arg_t *targ, VALUE klass, ID mid,
                                   VALUE exprs, uint64_t now)
{
    struct tracer_expr_arg arg = { targ, exprs };
    struct rbtrace_evaluator me = { rbtrace_thread_id(), rbtrace.evaluators };
    VALUE values;
    int state = 0;

    /* rb_protect returns whatever ends the evaluation (a kill too): the
     * node is always unlinked before its stack frame goes. */
    rbtrace.evaluators = &me;
    rbtrace.in_expr = 1;
    values = rb_protect(tracer_exprs_i, (VALUE)&arg, &state);
    tracer_evaluator_unlink(&me);
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

static inline __attribute__((always_inline)) void
tracer_event(rb_trace_arg_t *targ, rb_event_flag_t ev, const struct rbtrace_tracer *t,
             VALUE klass, ID mid);

/* What both global hooks do with an event once they know its method:
 * --slow's bookkeeping, then the selectors (or --firehose). targ is NULL
 * for the plain hook, which records a call without its selector's
 * expressions: a selector with some is only watched by it between being
 * added and tracer_install swapping the hooks. */
static inline __attribute__((always_inline)) void
tracer_hooked(rb_trace_arg_t *targ, rb_event_flag_t ev, VALUE klass, ID mid)
{
    const struct rbtrace_tracer *t = NULL;

    /* A wrapper's own method (wrapper.c, a C method) is rbtrace's: not
     * shown, nor named, so never among the recent methods either. */
    if ((ev & (RUBY_EVENT_C_CALL | RUBY_EVENT_C_RETURN)) && rbtrace_wrapper_module_p(klass)) return;
    if (rbtrace.slow) rbtrace_slow_event(ev, klass, mid);
    if (!rbtrace.firehose && (t = tracer_match(klass, mid)) == NULL) return;
    tracer_event(targ, ev, targ ? t : NULL, klass, mid);
}

/* The plain hook's events past --firehose's way: the method's owner as
 * rb_tracearg_defined_class gives it (a module's method is its module's,
 * not the class that includes it; Qnil if unknown), then tracer_hooked.
 * Out of line, so that the firehose's way keeps a small frame. */
static __attribute__((noinline)) void tracer_hook_named(rb_event_flag_t ev, VALUE klass, ID mid)
{
    if (!klass || !mid) klass = Qnil;
    else if (RB_TYPE_P(klass, T_ICLASS)) klass = RBASIC(klass)->klass;
    tracer_hooked(NULL, ev, klass, mid);
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
static inline __attribute__((always_inline)) void
tracer_hook_known(rb_event_flag_t ev, VALUE klass, ID mid)
{
    if (rbtrace_firehose_only() && rbtrace_emit_recent_call(ev, klass, mid)) return;
    tracer_hook_named(ev, klass, mid);
}

/* A Ruby method's call or return: the method is the current frame's. Out
 * of line, so that a C method's event needs no stack frame for it. No
 * stack protector: its locals are two words, no buffer. */
static __attribute__((noinline)) RBTRACE_NO_STACK_PROTECTOR void tracer_hook_frame(rb_event_flag_t ev)
{
    ID mid;
    VALUE klass;

    if (!rb_frame_method_id_and_class(&mid, &klass)) {
        tracer_hook_named(ev, Qnil, 0);
        return;
    }
    tracer_hook_known(ev, klass, mid);
}

/* (A hook added by rb_add_event_hook is the main Ractor's alone: other
 * Ractors never run it, ractors.c.) */
static void tracer_hook_i(rb_event_flag_t ev, VALUE data, VALUE self, ID id, VALUE klass)
{
    /* --firehose alone implies attached: under it a C method's event met
     * lately costs one test of the flags here (tracer_hook_known's). */
    if ((!rbtrace_firehose_only() && !rbtrace.attached) || RBTRACE_OWN_CALL()) return;
    if (id == 0) tracer_hook_frame(ev);
    else tracer_hook_known(ev, klass, id);
}

/* The same hook with the trace arg (RAW_ARG), for selectors with trace
 * expressions, which need the call's receiver and binding. */
static void tracer_raw_hook_i(VALUE data, rb_trace_arg_t *targ)
{
    if (!rbtrace.attached || RBTRACE_OWN_CALL()) return;
    tracer_hooked(targ, rb_tracearg_event_flag(targ), rb_tracearg_defined_class(targ),
                  rbtrace_method_id_of(rb_tracearg_method_id(targ)));
}

/* A call or return of a traced method: encoded, with its expressions
 * (those need targ). Inline, always (GCC would split it off): under
 * --firehose it runs for every call and return. */
static inline __attribute__((always_inline)) void
tracer_event(rb_trace_arg_t *targ, rb_event_flag_t ev, const struct rbtrace_tracer *t,
             VALUE klass, ID mid)
{
    /* The expressions' own calls: never, through the VM's hooks (a thread
     * inside a hook does not enter another), but kept out all the same. */
    if (rbtrace_expr_call_p()) return;
    if (t && t->exprs != Qnil && (ev & (RUBY_EVENT_CALL | RUBY_EVENT_C_CALL)))
        tracer_call_with_exprs(targ, klass, mid, t->exprs, rbtrace_clock_ns());
    else
        rbtrace_emit_call(ev, klass, mid, rbtrace_clock_ns());
}

/*
 * The TracePoints on one Ruby method (RBTrace.enable_targeted): only that
 * method's bytecode fires them; nothing else in the process pays. Two of
 * them, one for calls and one for returns, whose data is the event: the
 * method is the tracer's own (its owner and original name, whichever alias
 * was called), so a call needs no question to the VM (each rb_tracearg_*
 * is a call into it) unless it has trace expressions.
 */
static void tracer_targeted_i(VALUE tpval, void *data)
{
    const struct rbtrace_tracer *t;
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
    if ((t = tracer_of_tracepoint(tpval)) == NULL) return;
    tracer_event(t->exprs != Qnil && ev == RUBY_EVENT_CALL ? rb_tracearg_from_tracepoint(tpval) : NULL,
                 ev, t, t->klass, t->mid);
}

struct tracer_target_arg {
    VALUE tp;
    VALUE method;
};

static VALUE tracer_enable_targeted_i(VALUE p)
{
    const struct tracer_target_arg *a = (const struct tracer_target_arg *)p;
    return rb_funcall(rbtrace_mRBTrace, id_enable_targeted, 2, a->tp, a->method);
}

/* A TracePoint of events for method alone, its data the event when there
 * is one (else 0); 0 if the VM refuses. */
static VALUE tracer_targeted_tracepoint(VALUE method, rb_event_flag_t events, rb_event_flag_t data)
{
    struct tracer_target_arg a;
    int state = 0;

    a.tp = rb_tracepoint_new(Qnil, events, tracer_targeted_i, (void *)(uintptr_t)data);
    a.method = method;
    rbtrace_protect(tracer_enable_targeted_i, (VALUE)&a, &state, NULL);
    return state ? 0 : a.tp;
}

/* t's TracePoints on method, of calls and of returns; 0 (none) if the VM
 * refuses (the caller then uses the global hook). A block's method
 * (define_method) gets one of both events: Ruby fires no call event for
 * it to a second TracePoint targeted at it (spec/e2e/methods_spec.rb). */
static int tracer_targeted(struct rbtrace_tracer *t, VALUE method, int block_method)
{
    if (block_method) {
        t->tp = tracer_targeted_tracepoint(method, RUBY_EVENT_CALL | RUBY_EVENT_RETURN, 0);
        t->tp_return = 0;
        return t->tp != 0;
    }
    t->tp = tracer_targeted_tracepoint(method, RUBY_EVENT_CALL, RUBY_EVENT_CALL);
    t->tp_return = t->tp ? tracer_targeted_tracepoint(method, RUBY_EVENT_RETURN, RUBY_EVENT_RETURN) : 0;
    if (t->tp && !t->tp_return) {
        rb_tracepoint_disable(t->tp);
        t->tp = 0;
    }
    return t->tp != 0;
}

/* Stops t's TracePoints, if it has any. */
static void tracer_untarget(const struct rbtrace_tracer *t)
{
    if (t->tp) rb_tracepoint_disable(t->tp);
    if (t->tp_return) rb_tracepoint_disable(t->tp_return);
}

/* The tracer that already watches (klass, mid), from another selector
 * (an alias of the method, or another line naming it); NULL if none. A
 * second tracer would show each call twice. */
static struct rbtrace_tracer *tracer_of_method(VALUE klass, ID mid)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_tracers; i++)
        if (rbtrace.tracers[i].klass == klass && rbtrace.tracers[i].mid == mid) return &rbtrace.tracers[i];
    return NULL;
}

/* Adds exprs (a frozen Array, or nil) to t's: the call is shown once,
 * with the first selector's expressions, then the others' not already
 * among them. t's Array is frozen (the hook reads it at each call):
 * replaced, never changed. */
static void tracer_merge_exprs(struct rbtrace_tracer *t, VALUE exprs)
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
        if (!RTEST(rb_ary_includes(merged, RARRAY_AREF(exprs, i)))) rb_ary_push(merged, RARRAY_AREF(exprs, i));
    t->exprs = rb_ary_freeze(merged);
}

/* Reports the expressions the check left out (notes: Array of String, or
 * nil), each once, as the selector is added. */
static void tracer_report_notes(VALUE notes)
{
    long i;

    if (!RB_TYPE_P(notes, T_ARRAY)) return;
    for (i = 0; i < RARRAY_LEN(notes); i++) {
        VALUE note = RARRAY_AREF(notes, i);
        if (!RB_TYPE_P(note, T_STRING)) continue;
        rbtrace_emit_message(RBTRACE_EV_ERROR, "%.*s", (int)RSTRING_LEN(note), RSTRING_PTR(note));
    }
}

/* Whether a selector the global hook watches has trace expressions,
 * evaluated only where --firehose is off (tracer_hook_i). */
static int tracer_hook_needs_targ(void)
{
    uint32_t i;

    if (rbtrace.firehose) return 0;
    for (i = 0; i < rbtrace.n_tracers; i++)
        if (!rbtrace.tracers[i].tp && rbtrace.tracers[i].exprs != Qnil) return 1;
    return 0;
}

static void tracer_remove_hook(void)
{
    if (!rbtrace.hook_installed) return;
    rb_remove_event_hook(rbtrace.hook_raw ? TRACER_RAW_HOOK : tracer_hook_i);
    rbtrace.hook_installed = 0;
}

/* Installs the global hook, or swaps it for the kind the selectors now
 * need: the plain one, or the RAW_ARG one for trace expressions. */
static void tracer_install(void)
{
    int raw = tracer_hook_needs_targ(), first = !rbtrace.hook_installed;

    if (rbtrace.hook_installed && rbtrace.hook_raw == raw) return;
    tracer_remove_hook();
    if (raw)
        rb_add_event_hook2(TRACER_RAW_HOOK, TRACER_EVENTS, Qnil,
                           RUBY_EVENT_HOOK_FLAG_SAFE | RUBY_EVENT_HOOK_FLAG_RAW_ARG);
    else
        rb_add_event_hook2(tracer_hook_i, TRACER_EVENTS, Qnil, RUBY_EVENT_HOOK_FLAG_SAFE);
    rbtrace.hook_installed = 1;
    rbtrace.hook_raw = raw;
    if (first)
        rbtrace_emit_message(RBTRACE_EV_NOTICE,
                             "tracing with global VM hooks: this process may stay somewhat "
                             "slower after detach, until it restarts");
}

static VALUE tracer_parse_i(VALUE selector)
{
    return rb_funcall(rbtrace_mRBTrace, id_parse_traced_selector, 1, selector);
}

static VALUE tracer_wrap_i(VALUE parsed)
{
    rbtrace_wrapper_add(RARRAY_AREF(parsed, 0), RARRAY_AREF(parsed, 8), RARRAY_AREF(parsed, 1),
                        RARRAY_AREF(parsed, 3), RARRAY_AREF(parsed, 5));
    return Qnil;
}

void rbtrace_report_selector_error(VALUE selector, VALUE e)
{
    int state = 0;
    VALUE msg = rbtrace_protect(rb_obj_as_string, e, &state, NULL);

    if (state) msg = rb_str_new_cstr("invalid selector");
    rbtrace_emit_message(RBTRACE_EV_ERROR, "%.*s: %.*s (not traced)",
                         (int)RSTRING_LEN(selector), RSTRING_PTR(selector),
                         (int)RSTRING_LEN(msg), RSTRING_PTR(msg));
}

/* RBTrace::Selector's error class name (NotLoaded, NotDefined), for
 * telling a selector's errors apart. */
VALUE rbtrace_selector_error(ID name)
{
    return rb_const_get_at(rb_const_get_at(rbtrace_mRBTrace, id_Selector), name);
}

/*
 * A tracer file names classes of libraries the process may not use
 * (-c pg in an app without pg): one line per missing class, not one per
 * selector. missing maps a class path to [note, selectors that name it...]:
 * the note ("Sidekiq is sidekiq 6.4.1", or nil) names the library of the
 * namespace that is defined (NotLoaded#note, lib/rbtrace/selector.rb).
 */
static int tracer_report_missing_i(VALUE path, VALUE entry, VALUE arg)
{
    VALUE note = RARRAY_AREF(entry, 0), first = RARRAY_AREF(entry, 1);
    long n = RARRAY_LEN(entry) - 1;
    const char *open = RB_TYPE_P(note, T_STRING) ? " (" : "", *close = *open ? ")" : "";
    int note_len = RB_TYPE_P(note, T_STRING) ? (int)RSTRING_LEN(note) : 0;
    const char *note_ptr = note_len ? RSTRING_PTR(note) : "";

    (void)arg;
    if (n == 1)
        rbtrace_emit_message(RBTRACE_EV_ERROR, "%.*s: no such class or module %.*s%s%.*s%s (not traced)",
                             (int)RSTRING_LEN(first), RSTRING_PTR(first),
                             (int)RSTRING_LEN(path), RSTRING_PTR(path), open, note_len, note_ptr, close);
    else
        rbtrace_emit_message(RBTRACE_EV_ERROR, "%.*s is not loaded in process %d (no such class "
                             "or module%s%.*s): its %ld selectors are not traced",
                             (int)RSTRING_LEN(path), RSTRING_PTR(path), (int)getpid(),
                             note_len ? "; " : "", note_len, note_ptr, n);
    return ST_CONTINUE;
}

static void tracer_note_missing(VALUE missing, VALUE sel, VALUE err)
{
    VALUE path = rb_ivar_get(err, id_at_path), entry;

    if (!RB_TYPE_P(path, T_STRING)) {
        rbtrace_report_selector_error(sel, err);
        return;
    }
    entry = rb_hash_lookup(missing, path);
    if (NIL_P(entry)) {
        entry = rb_ary_new_from_args(1, rb_ivar_get(err, id_at_note));
        rb_hash_aset(missing, path, entry);
    }
    rb_ary_push(entry, sel);
}

/* Forgets the hooked tracers made from selector (--devmode re-adds it). */
static void tracer_remove(VALUE selector)
{
    uint32_t i, kept = 0;

    for (i = 0; i < rbtrace.n_tracers; i++) {
        if (rb_str_equal(rbtrace.tracers[i].selector, selector) == Qtrue) {
            tracer_untarget(&rbtrace.tracers[i]);
            continue;
        }
        rbtrace.tracers[kept++] = rbtrace.tracers[i];
    }
    rbtrace.n_tracers = kept;
}

/* Adds the tracer of one selector: a wrapper, or an entry for the hook,
 * in which case *hook is set: the caller installs the hook once every
 * selector of the command is in (the selectors after this one are parsed
 * in Ruby, whose calls the hook would otherwise show as the app's).
 * A bad selector is skipped: reported, or its error stored in *error when
 * error is not NULL. Returns 1 if the selector is traced. */
static int tracer_add_one(VALUE sel, VALUE *error, int *hook)
{
    VALUE parsed, err = Qnil, ruby, klass;
    struct rbtrace_tracer *t;
    ID mid;
    int state = 0;

    parsed = rbtrace_protect(tracer_parse_i, sel, &state, &err);
    if (!state && RARRAY_LEN(parsed) > 7) tracer_report_notes(RARRAY_AREF(parsed, 7));
    /* A C method another selector's expressions already have the hook
     * watch: a wrapper too would show each call twice, and the hook's
     * event, nested in the wrapper's, without the expressions. */
    if (!state && !NIL_P(RARRAY_AREF(parsed, 3)) && !NIL_P(RARRAY_AREF(parsed, 0)) &&
        tracer_of_method(RARRAY_AREF(parsed, 0), rbtrace_method_id_of(RARRAY_AREF(parsed, 1))))
        return 1;
    if (!state && !NIL_P(RARRAY_AREF(parsed, 3))) {
        /* parsed is [owner or nil, method Symbol or nil, expressions or nil,
         * visibility Symbol if the method (a C one) is wrapped instead of
         * hooked, the UnboundMethod if it is a Ruby one, the wrapper's
         * arity, whether it is a block's method, the messages of the
         * expressions left out or nil, the name the wrapper takes (an
         * alias's, for the calls through it)]. Wrapping can fail (a frozen
         * class): that selector alone. */
        /* The global hook shows its calls already (another selector named
         * it through an alias): a wrapper would show each a second time. */
        if (tracer_match(RARRAY_AREF(parsed, 0), rbtrace_method_id_of(RARRAY_AREF(parsed, 1))))
            return 1;
        rbtrace_protect(tracer_wrap_i, parsed, &state, &err);
        if (!state) return 1;
    }
    if (state) {
        if (error) *error = err;
        else rbtrace_report_selector_error(sel, err);
        return 0;
    }
    tracer_remove(sel);
    if (rbtrace.n_tracers >= RBTRACE_SELECTORS_MAX) {
        rbtrace_emit_message(RBTRACE_EV_ERROR, "too many selectors (at most %d): %.*s is not "
                             "traced", RBTRACE_SELECTORS_MAX, (int)RSTRING_LEN(sel),
                             RSTRING_PTR(sel));
        return 0;
    }
    ruby = RARRAY_LEN(parsed) > 4 ? RARRAY_AREF(parsed, 4) : Qnil;
    klass = NIL_P(RARRAY_AREF(parsed, 0)) ? 0 : RARRAY_AREF(parsed, 0);
    /* A name the user typed stays in the symbol table (rbtrace_method_id_of):
     * no method of that name may exist yet. */
    mid = rbtrace_method_id_of(RARRAY_AREF(parsed, 1));
    if ((t = tracer_of_method(klass, mid)) != NULL) {
        tracer_merge_exprs(t, RARRAY_AREF(parsed, 2));
        /* The hook swaps to the kind that evaluates expressions. */
        if (!t->tp) *hook = 1;
        return 1;
    }
    t = &rbtrace.tracers[rbtrace.n_tracers++];
    t->klass = klass;
    t->mid = mid;
    t->exprs = RARRAY_AREF(parsed, 2);
    t->selector = sel;
    t->tp = t->tp_return = 0;
    /* A Ruby method gets TracePoints of its own; anything else (or a Ruby
     * method whose TracePoint the VM refused), the global hook. */
    if (NIL_P(ruby) || !tracer_targeted(t, ruby, RARRAY_LEN(parsed) > 6 && RTEST(RARRAY_AREF(parsed, 6)))) {
        *hook = 1;
        /* The hook sees the calls of a wrapped method too. */
        rbtrace_wrapper_shadow(klass, mid);
    }
    return 1;
}

int rbtrace_tracer_add_one(VALUE sel, VALUE *error)
{
    int hook = 0, traced = tracer_add_one(sel, error, &hook);

    if (hook) tracer_install();
    return traced;
}

/* Whether a selector's text ends in a list of trace expressions. */
static int tracer_has_exprs(VALUE sel)
{
    const char *p = RSTRING_PTR(sel);
    long n = RSTRING_LEN(sel);

    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    return n > 0 && p[n - 1] == ')' && memchr(p, '(', (size_t)n) != NULL;
}

/* Adds one tracer per selector; a bad selector is reported and skipped
 * (with --devmode, one whose class or method is not defined yet waits).
 * The selectors with expressions go first: a C method that one of them
 * names is then watched by the hook, with them, and not also wrapped for
 * a selector without any (tracer_add_one). */
void rbtrace_tracer_add(VALUE selectors)
{
    VALUE not_loaded = rbtrace_selector_error(id_NotLoaded), missing = rb_hash_new();
    long i, k, n = RARRAY_LEN(selectors);
    int hook = 0;

    for (k = 0; k < 2 * n; k++) {
        VALUE sel, err = Qnil;

        i = k % n;
        if (tracer_has_exprs(RARRAY_AREF(selectors, i)) != (k < n)) continue;
        sel = rb_str_new_frozen(RARRAY_AREF(selectors, i));
        if (rbtrace_devmode_watch(sel)) {
            if (tracer_add_one(sel, &err, &hook)) rbtrace_devmode_traced(sel);
            else rbtrace_devmode_failed(sel, err);
        } else if (!tracer_add_one(sel, &err, &hook)) {
            if (RTEST(rb_obj_is_kind_of(err, not_loaded)))
                tracer_note_missing(missing, sel, err);
            else
                rbtrace_report_selector_error(sel, err);
        }
    }
    rb_hash_foreach(missing, tracer_report_missing_i, Qnil);
    RB_GC_GUARD(missing);
    if (hook) tracer_install();
}

void rbtrace_tracer_firehose(void)
{
    rbtrace.firehose = 1;
    tracer_install();
}

/* --slow, --slowcpu: watched through the same hook. */
void rbtrace_tracer_slow(uint64_t threshold_ns, int cpu, VALUE selectors)
{
    rbtrace.slow = 0;
    if (!rbtrace_slow_start(threshold_ns, cpu, selectors)) return;
    rbtrace.slow = 1;
    tracer_install();
}

/* --gc: internal events, no call hook (gcwatch.c). */
void rbtrace_tracer_gc(void)
{
    rbtrace_gc_start();
}

/* --raise: a raise hook (raisewatch.c). */
void rbtrace_tracer_raise(void)
{
    rbtrace_raise_start();
}

/* Removes every hook and the wrappers, and forgets every tracer. */
void rbtrace_tracer_clear(void)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_tracers; i++) tracer_untarget(&rbtrace.tracers[i]);
    rbtrace_wrapper_clear();
    tracer_remove_hook();
    rbtrace.firehose = 0;
    rbtrace.slow = 0;
    rbtrace.n_tracers = 0;
    rbtrace_slow_stop();
    rbtrace_gc_stop();
    rbtrace_raise_stop();
    rbtrace_gvl_stop();
    rbtrace_thread_names_stop();
    rbtrace_devmode_stop();
}

/* The hook compares these VALUEs by address: keep them alive and pinned
 * (rb_gc_mark, not rb_gc_mark_movable), or compaction would move them.
 * A method name's ID needs nothing (rbtrace_method_id_of). */
void rbtrace_tracer_mark(void)
{
    uint32_t i;

    for (i = 0; i < rbtrace.n_tracers; i++) {
        rb_gc_mark(rbtrace.tracers[i].klass);
        rb_gc_mark(rbtrace.tracers[i].exprs);
        rb_gc_mark(rbtrace.tracers[i].selector);
        rb_gc_mark(rbtrace.tracers[i].tp);
        rb_gc_mark(rbtrace.tracers[i].tp_return);
    }
    rbtrace_slow_mark();
    rbtrace_devmode_mark();
}

void Init_rbtrace_tracer(VALUE mod)
{
    id_parse_traced_selector = rb_intern("parse_traced_selector");
    id_trace_exprs = rb_intern("trace_exprs");
    id_enable_targeted = rb_intern("enable_targeted");
    id_Selector = rb_intern("Selector");
    id_NotLoaded = rb_intern("NotLoaded");
    id_at_path = rb_intern("@path");
    id_at_note = rb_intern("@note");
}
