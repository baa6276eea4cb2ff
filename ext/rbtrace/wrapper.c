/*
 * wrapper.c - method selections traced by wrapping the method instead of
 * hooking the VM.
 *
 * A global call/return hook slows every call of the process, and the VM
 * stays slower after the hook is removed
 * (docs/DESIGN.md, "Leave the process as fast as it was"). For a selector that names one method of one class
 * (`Hash#key?`, `Process.pid`) we instead prepend to the method's owner a
 * module holding a C method of the same name and visibility: it stamps the
 * time, calls super, and records the return however the call ends
 * (rb_ensure), so blocks, keywords, results, exceptions and throw/break
 * pass through unchanged. Nothing else in the process pays anything.
 *
 * Only C methods are wrapped (a Ruby method gets a TracePoint on its own
 * bytecode, trace.c, which adds no frame). The wrapper is defined with the
 * original's arity, one C function per arity (0 to WRAPPER_ARITY_MAX, and
 * -1), all calling one body: `arity` and `parameters` are the original's
 * (a C method's parameters are unnamed: only its arity shows).
 *
 * A wrapper sees only the calls made through the name it takes: a selector
 * naming an alias (pg 1.4's PG::Connection#async_exec, of #exec) wraps the
 * alias, and shows its calls under the original name, as the VM names the
 * method.
 *
 * Detach removes the wrapper methods; the empty module stays prepended
 * (a module cannot be un-prepended) and costs nothing. One module per
 * owner is kept for the life of the process and reused.
 *
 * lib/rbtrace/selector.rb decides which selectors may be wrapped: never
 * a core class's operator (wrapping `Integer#+` would turn off the VM's
 * fast path for good), nor methods that look at their caller's frame.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "emit.h"
#include "ractors.h"
#include "wrapper.h"

struct wrapper_entry {
    VALUE module; /* the prepended module holding the wrapper */
    ID name;      /* the wrapper's name: the method's, or an alias's */
    ID mid;       /* the method's original name, which events show */
    VALUE owner;  /* the wrapped method's owner, for event names */
    int shadowed; /* the global hook shows its calls: the wrapper passes them on unseen */
};

static struct wrapper_entry wrappers[RBTRACE_SELECTORS_MAX];
static uint32_t n_wrappers;

/* owner => its prepended module (identity Hash; lives forever) */
static VALUE wrapper_modules;

/* The wrapper of that name in module. */
static const struct wrapper_entry *wrapper_find(VALUE module, ID name)
{
    uint32_t i;

    for (i = 0; i < n_wrappers; i++)
        if (wrappers[i].module == module && wrappers[i].name == name) return &wrappers[i];
    return NULL;
}

struct wrapper_call {
    int argc;
    const VALUE *argv;
    int kw_splat;
    const struct wrapper_entry *w;
};

static VALUE wrapper_super_i(VALUE p)
{
    struct wrapper_call *c = (struct wrapper_call *)p;
    return rb_call_super_kw(c->argc, c->argv, c->kw_splat);
}

static VALUE wrapper_return_i(VALUE p)
{
    struct wrapper_call *c = (struct wrapper_call *)p;

    if (rbtrace.attached)
        rbtrace_emit_call(RUBY_EVENT_C_RETURN, c->w->owner, c->w->mid, rbtrace_clock_ns());
    return Qnil;
}

/* Whether klass holds active wrappers: their calls are rbtrace's, which
 * the global hook (--firehose, --slow) does not show. */
int rbtrace_wrapper_module_p(VALUE klass)
{
    uint32_t i;

    for (i = 0; i < n_wrappers; i++)
        if (wrappers[i].module == klass) return 1;
    return 0;
}

/* The body of every wrapper method. Under --firehose it records nothing:
 * the global hook shows the wrapped method's every call already. A call
 * from a Ractor other than the main one is only counted (ractors.c). */
static VALUE wrapper_call_m(int argc, const VALUE *argv, VALUE self)
{
    struct wrapper_call c = { argc, argv, rb_keyword_given_p(), NULL };
    ID mid;
    VALUE module;

    if (rbtrace.attached) {
        if (!rbtrace_main_ractor_p()) rbtrace_ractors_count_other();
        else if (!rbtrace.firehose && !RBTRACE_OWN_CALL() && !rbtrace_expr_call_p() &&
                 rb_frame_method_id_and_class(&mid, &module))
            c.w = wrapper_find(module, mid);
        if (c.w && c.w->shadowed) c.w = NULL;
    }
    if (c.w == NULL) return rb_call_super_kw(argc, argv, c.kw_splat);
    rbtrace_emit_call(RUBY_EVENT_C_CALL, c.w->owner, c.w->mid, rbtrace_clock_ns());
    return rb_ensure(wrapper_super_i, (VALUE)&c, wrapper_return_i, (VALUE)&c);
}

/* The wrapper's C functions of fixed arity: each passes its arguments on
 * to the one body. WRAPPER_ARITY_MAX is lib/rbtrace/selector.rb's
 * Selector::WRAPPER_ARITY_MAX. */
#define WRAPPER_ARITY_MAX 15
#define WRAPPER_FIXED(n, params, ...) \
    static VALUE wrapper_call_##n(VALUE self params) \
    { \
        const VALUE argv[] = { __VA_ARGS__ }; \
        return wrapper_call_m(n, argv, self); \
    }
#define P(i) , VALUE a##i

static VALUE wrapper_call_0(VALUE self)
{
    return wrapper_call_m(0, NULL, self);
}
WRAPPER_FIXED(1, P(0), a0)
WRAPPER_FIXED(2, P(0) P(1), a0, a1)
WRAPPER_FIXED(3, P(0) P(1) P(2), a0, a1, a2)
WRAPPER_FIXED(4, P(0) P(1) P(2) P(3), a0, a1, a2, a3)
WRAPPER_FIXED(5, P(0) P(1) P(2) P(3) P(4), a0, a1, a2, a3, a4)
WRAPPER_FIXED(6, P(0) P(1) P(2) P(3) P(4) P(5), a0, a1, a2, a3, a4, a5)
WRAPPER_FIXED(7, P(0) P(1) P(2) P(3) P(4) P(5) P(6), a0, a1, a2, a3, a4, a5, a6)
WRAPPER_FIXED(8, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7), a0, a1, a2, a3, a4, a5, a6, a7)
WRAPPER_FIXED(9, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8), a0, a1, a2, a3, a4, a5, a6, a7, a8)
WRAPPER_FIXED(10, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8) P(9), a0, a1, a2, a3, a4, a5, a6, a7,
              a8, a9)
WRAPPER_FIXED(11, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8) P(9) P(10), a0, a1, a2, a3, a4, a5,
              a6, a7, a8, a9, a10)
WRAPPER_FIXED(12, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8) P(9) P(10) P(11), a0, a1, a2, a3, a4,
              a5, a6, a7, a8, a9, a10, a11)
WRAPPER_FIXED(13, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8) P(9) P(10) P(11) P(12), a0, a1, a2,
              a3, a4, a5, a6, a7, a8, a9, a10, a11, a12)
WRAPPER_FIXED(14, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8) P(9) P(10) P(11) P(12) P(13), a0, a1,
              a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13)
WRAPPER_FIXED(15, P(0) P(1) P(2) P(3) P(4) P(5) P(6) P(7) P(8) P(9) P(10) P(11) P(12) P(13) P(14),
              a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14)

#undef P
#undef WRAPPER_FIXED

/* Ruby calls a method's C function through a pointer of its arity's type;
 * the table holds them untyped, as rb_define_method takes them. */
#define WRAPPER_FN(f) ((VALUE(*)(ANYARGS))(f))
static VALUE (*const wrapper_fixed[WRAPPER_ARITY_MAX + 1])(ANYARGS) = {
    WRAPPER_FN(wrapper_call_0),  WRAPPER_FN(wrapper_call_1),  WRAPPER_FN(wrapper_call_2),
    WRAPPER_FN(wrapper_call_3),  WRAPPER_FN(wrapper_call_4),  WRAPPER_FN(wrapper_call_5),
    WRAPPER_FN(wrapper_call_6),  WRAPPER_FN(wrapper_call_7),  WRAPPER_FN(wrapper_call_8),
    WRAPPER_FN(wrapper_call_9),  WRAPPER_FN(wrapper_call_10), WRAPPER_FN(wrapper_call_11),
    WRAPPER_FN(wrapper_call_12), WRAPPER_FN(wrapper_call_13), WRAPPER_FN(wrapper_call_14),
    WRAPPER_FN(wrapper_call_15),
};

/* The variadic one (arity -1). */
static VALUE wrapper_call_v(int argc, VALUE *argv, VALUE self)
{
    return wrapper_call_m(argc, argv, self);
}

static VALUE wrapper_module_for(VALUE owner)
{
    VALUE module = rb_hash_lookup(wrapper_modules, owner);

    if (NIL_P(module)) {
        module = rb_module_new();
        rb_prepend_module(owner, module);
        rb_hash_aset(wrapper_modules, owner, module);
    }
    return module;
}

/*
 * Wraps owner's method named name (a Symbol: the method's own, or an
 * alias's, whose calls alone a wrapper of that name sees), whose calls are
 * shown as mid's (the original name, as the VM names the method), with
 * the given visibility (:public, :private or :protected) and arity (an
 * Integer, -1 to WRAPPER_ARITY_MAX: the original's). GVL held, from a
 * command.
 */
void rbtrace_wrapper_add(VALUE owner, VALUE name_sym, VALUE mid, VALUE visibility, VALUE arity_v)
{
    VALUE module;
    const char *name;
    struct wrapper_entry *w;
    ID id = rbtrace_method_id_of(name_sym);
    int arity = NUM2INT(arity_v);
    VALUE (*fn)(ANYARGS);

    if (arity < -1 || arity > WRAPPER_ARITY_MAX)
        rb_raise(rb_eArgError, "a wrapper takes -1 to %d arguments, not %d", WRAPPER_ARITY_MAX,
                 arity);
    fn = arity < 0 ? WRAPPER_FN(wrapper_call_v) : wrapper_fixed[arity];

    if (n_wrappers >= RBTRACE_SELECTORS_MAX) {
        rbtrace_emit_message(RBTRACE_EV_ERROR, "too many wrapped methods (at most %d)",
                             RBTRACE_SELECTORS_MAX);
        return;
    }
    module = wrapper_module_for(owner);
    if (wrapper_find(module, id)) return;
    name = rb_id2name(id);
    /* Braces: Ruby 2.7's rb_define_*method macros end in a ';' of their
     * own, which would leave the else without its if. */
    /* The functions in parentheses: the macros of the same names check a
     * constant arity against the function's type, and ours is chosen at
     * run time. */
    if (visibility == ID2SYM(rb_intern("private"))) {
        (rb_define_private_method)(module, name, fn, arity);
    } else if (visibility == ID2SYM(rb_intern("protected"))) {
        (rb_define_protected_method)(module, name, fn, arity);
    } else {
        (rb_define_method)(module, name, fn, arity);
    }
    w = &wrappers[n_wrappers++];
    w->module = module;
    w->name = id;
    w->mid = rbtrace_method_id_of(mid);
    w->owner = owner;
    w->shadowed = 0;
}

/*
 * Another selector named a wrapped method through an alias (pg 1.4's
 * PG::Connection#exec and #async_exec): the global hook watches that one,
 * and sees the method's calls through any of its names, the wrapped one's
 * too; the wrappers of the methods (klass, mid) selects then pass their
 * calls on unseen, or each would be shown twice, nested. (Not removed:
 * a call in progress holds its entry.)
 */
void rbtrace_wrapper_shadow(VALUE klass, ID mid)
{
    uint32_t i;

    for (i = 0; i < n_wrappers; i++)
        if (rbtrace_selects(klass, mid, wrappers[i].owner, wrappers[i].mid))
            wrappers[i].shadowed = 1;
}

/* Removes every wrapper method; the modules stay, empty. */
void rbtrace_wrapper_clear(void)
{
    while (n_wrappers > 0) {
        struct wrapper_entry *w = &wrappers[--n_wrappers];
        rb_remove_method_id(w->module, w->name);
    }
}

int rbtrace_wrapper_any(void)
{
    return n_wrappers > 0;
}

/* wrapper_find compares addresses: keep the modules and owners of active
 * wrappers pinned (rb_gc_mark, not rb_gc_mark_movable). A method name's
 * ID needs nothing (rbtrace_method_id_of). */
void rbtrace_wrapper_mark(void)
{
    uint32_t i;

    for (i = 0; i < n_wrappers; i++) {
        rb_gc_mark(wrappers[i].module);
        rb_gc_mark(wrappers[i].owner);
    }
}

void Init_rbtrace_wrapper(VALUE mod)
{
    wrapper_modules = rb_hash_new();
    rb_funcall(wrapper_modules, rb_intern("compare_by_identity"), 0);
    rb_global_variable(&wrapper_modules);
}
