/*
 * selector.c - a method selector's text into a struct rbtrace_selector
 * (selector.h), and the selectors' errors.
 *
 * What is easiest in Ruby is done there (lib/rbtrace/selector.rb): class
 * names resolved by constant lookup, never by evaluating text; the method's
 * owner and original name; whether it is defined in Ruby, or how a wrapper
 * would stand in for it; the trace expressions split and checked. Ruby hands
 * back a RBTrace::Selector::Parsed, whose members are read here by name and
 * checked for their types (an app could redefine the Ruby side): the rest of
 * the extension sees C fields only. A selector's ID is interned for good
 * (rbtrace_method_id_of): a name the user typed may name no method yet.
 *
 * Errors: what is wrong with a selector is said by Ruby (an ArgumentError
 * meant for the user; NotLoaded, NotDefined), and reported here, as an
 * ERROR event naming the selector and saying it is not traced.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "emit.h"
#include "selector.h"
#include <string.h>
#include <unistd.h>

static ID id_parse_selector, id_selector_class, id_Selector, id_Parsed, id_NamedClass, id_path,
    id_klass, id_NotLoaded, id_NotDefined, id_at_path, id_at_note;
static ID id_owner, id_method_name, id_exprs, id_notes, id_ruby_method, id_block_method,
    id_visibility, id_wrapped_name, id_arity;

struct selector_parse_arg {
    VALUE text;
    enum rbtrace_selector_check check;
    struct rbtrace_selector *sel;
};

/* A class of RBTrace::Selector (Parsed, NotLoaded...): looked up when
 * needed, as lib/rbtrace/selector.rb is loaded after the extension. */
static VALUE selector_class(ID name)
{
    return rb_const_get_at(rb_const_get_at(rbtrace_mRBTrace, id_Selector), name);
}

/* A member of a Parsed, nil or of type (T_NONE: of any type). Anything else
 * means the Ruby side is not ours: an error, not a guess. */
static VALUE selector_member(VALUE parsed, ID name, int type, const char *want)
{
    VALUE v = rb_struct_getmember(parsed, name);

    if (NIL_P(v) || type == T_NONE || RB_TYPE_P(v, type)) return v;
    rb_raise(rb_eTypeError,
             "RBTrace::Selector.parse gave %s a %" PRIsVALUE ", not %s (is "
             "lib/rbtrace/selector.rb rbtrace's own?)",
             rb_id2name(name), rb_obj_class(v), want);
    return Qnil;
}

/* A method name member: a Symbol, as an ID (0 for nil). */
static ID selector_member_id(VALUE parsed, ID name)
{
    return rbtrace_method_id_of(selector_member(parsed, name, T_SYMBOL, "a Symbol"));
}

/* parsed's members into sel. A wrapped method has an owner, a name and an
 * arity (wrapper.c checks its range). */
static void selector_from_parsed(struct rbtrace_selector *sel, VALUE parsed)
{
    VALUE owner;

    if (!RTEST(rb_obj_is_kind_of(parsed, selector_class(id_Parsed))))
        rb_raise(rb_eTypeError,
                 "RBTrace::Selector.parse gave a %" PRIsVALUE ", not a "
                 "RBTrace::Selector::Parsed (is lib/rbtrace/selector.rb rbtrace's own?)",
                 rb_obj_class(parsed));
    owner = selector_member(parsed, id_owner, T_NONE, NULL);
    if (!NIL_P(owner) && !RB_TYPE_P(owner, T_CLASS) && !RB_TYPE_P(owner, T_MODULE))
        rb_raise(rb_eTypeError,
                 "RBTrace::Selector.parse gave owner a %" PRIsVALUE ", not a class "
                 "or module (is lib/rbtrace/selector.rb rbtrace's own?)",
                 rb_obj_class(owner));
    sel->owner = NIL_P(owner) ? 0 : owner;
    sel->mid = selector_member_id(parsed, id_method_name);
    sel->exprs = selector_member(parsed, id_exprs, T_ARRAY, "an Array");
    sel->notes = selector_member(parsed, id_notes, T_ARRAY, "an Array");
    sel->ruby_method = selector_member(parsed, id_ruby_method, T_NONE, NULL);
    sel->block_method = RTEST(selector_member(parsed, id_block_method, T_NONE, NULL));
    sel->visibility = selector_member(parsed, id_visibility, T_SYMBOL, "a Symbol");
    sel->wrapped_mid = selector_member_id(parsed, id_wrapped_name);
    sel->arity = 0;
    if (NIL_P(sel->visibility)) return;
    if (!sel->owner || !sel->mid || !sel->wrapped_mid)
        rb_raise(rb_eTypeError,
                 "RBTrace::Selector.parse gave a wrapped method without its owner or "
                 "name (is lib/rbtrace/selector.rb rbtrace's own?)");
    sel->arity = NUM2INT(rb_struct_getmember(parsed, id_arity));
}

static VALUE selector_parse_i(VALUE p)
{
    const struct selector_parse_arg *a = (const struct selector_parse_arg *)p;
    VALUE parsed = rb_funcall(rbtrace_mRBTrace, id_parse_selector, 2, a->text,
                              a->check == RBTRACE_SELECTOR_CHECKED ? Qtrue : Qfalse);

    selector_from_parsed(a->sel, parsed);
    RB_GC_GUARD(parsed);
    return Qnil;
}

int rbtrace_selector_parse(VALUE text, enum rbtrace_selector_check check,
                           struct rbtrace_selector *sel, VALUE *error)
{
    struct selector_parse_arg a = { text, check, sel };
    int state = 0;

    /* Nothing of a failed parse is read; still, no field is left unset. */
    memset(sel, 0, sizeof(*sel));
    sel->exprs = sel->notes = sel->ruby_method = sel->visibility = Qnil;
    rbtrace_protect(selector_parse_i, (VALUE)&a, &state, error);
    return state ? -1 : 0;
}

static VALUE selector_class_i(VALUE text)
{
    return rb_funcall(rbtrace_mRBTrace, id_selector_class, 1, text);
}

int rbtrace_selector_class(VALUE text, VALUE *path, VALUE *klass)
{
    VALUE named, err = Qnil;
    int state = 0;

    named = rbtrace_protect(selector_class_i, text, &state, &err);
    if (state || !RTEST(rb_obj_is_kind_of(named, selector_class(id_NamedClass)))) return -1;
    *path = rb_struct_getmember(named, id_path);
    *klass = rb_struct_getmember(named, id_klass);
    return RB_TYPE_P(*path, T_STRING) ? 0 : -1;
}

int rbtrace_selector_has_exprs(VALUE text)
{
    const char *p = RSTRING_PTR(text);
    long n = RSTRING_LEN(text);

    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    return n > 0 && p[n - 1] == ')' && memchr(p, '(', (size_t)n) != NULL;
}

void rbtrace_selector_report_notes(const struct rbtrace_selector *sel)
{
    long i;

    if (!RB_TYPE_P(sel->notes, T_ARRAY)) return;
    for (i = 0; i < RARRAY_LEN(sel->notes); i++) {
        VALUE note = RARRAY_AREF(sel->notes, i);
        if (!RB_TYPE_P(note, T_STRING)) continue;
        rbtrace_emit_message(RBTRACE_EV_ERROR, "%.*s", (int)RSTRING_LEN(note), RSTRING_PTR(note));
    }
}

void rbtrace_report_selector_error(VALUE text, VALUE e)
{
    int state = 0;
    VALUE msg = rbtrace_protect(rb_obj_as_string, e, &state, NULL);

    if (state) msg = rb_str_new_cstr("invalid selector");
    rbtrace_emit_message(RBTRACE_EV_ERROR, "%.*s: %.*s (not traced)", (int)RSTRING_LEN(text),
                         RSTRING_PTR(text), (int)RSTRING_LEN(msg), RSTRING_PTR(msg));
}

int rbtrace_selector_not_defined_p(VALUE error)
{
    return RTEST(rb_obj_is_kind_of(error, selector_class(id_NotDefined)));
}

int rbtrace_selector_optional(VALUE *text)
{
    long n = RSTRING_LEN(*text);

    if (n < 2 || RSTRING_PTR(*text)[0] != '?') return 0;
    *text = rb_str_new_frozen(rb_str_subseq(*text, 1, n - 1));
    return 1;
}

void rbtrace_selector_report_absent(VALUE text, VALUE e)
{
    int state = 0;
    VALUE msg = rbtrace_protect(rb_obj_as_string, e, &state, NULL);

    if (state) msg = rb_str_new_cstr("not defined");
    rbtrace_emit_message(RBTRACE_EV_NOTICE,
                         "%.*s: %.*s: not traced (its line is for other versions of the "
                         "library: not an error)",
                         (int)RSTRING_LEN(text), RSTRING_PTR(text), (int)RSTRING_LEN(msg),
                         RSTRING_PTR(msg));
}

/* errors maps a missing class's path to [note, selectors that name it...]:
 * the note ("Sidekiq is sidekiq 6.4.1", or nil) names the library of the
 * namespace that is defined (NotLoaded#note, lib/rbtrace/selector.rb). */
VALUE rbtrace_selector_errors_new(void)
{
    return rb_hash_new();
}

void rbtrace_selector_errors_add(VALUE errors, VALUE text, VALUE error)
{
    VALUE path, entry;

    if (!RTEST(rb_obj_is_kind_of(error, selector_class(id_NotLoaded)))) {
        rbtrace_report_selector_error(text, error);
        return;
    }
    path = rb_ivar_get(error, id_at_path);
    if (!RB_TYPE_P(path, T_STRING)) {
        rbtrace_report_selector_error(text, error);
        return;
    }
    entry = rb_hash_lookup(errors, path);
    if (NIL_P(entry)) {
        entry = rb_ary_new_from_args(1, rb_ivar_get(error, id_at_note));
        rb_hash_aset(errors, path, entry);
    }
    rb_ary_push(entry, text);
}

/* One missing class: its one selector's error as any other, or one line
 * for all of its selectors. */
static int selector_report_missing_i(VALUE path, VALUE entry, VALUE arg)
{
    VALUE note = RARRAY_AREF(entry, 0), first = RARRAY_AREF(entry, 1);
    long n = RARRAY_LEN(entry) - 1;
    const char *open = RB_TYPE_P(note, T_STRING) ? " (" : "", *close = *open ? ")" : "";
    int note_len = RB_TYPE_P(note, T_STRING) ? (int)RSTRING_LEN(note) : 0;
    const char *note_ptr = note_len ? RSTRING_PTR(note) : "";

    (void)arg;
    if (n == 1)
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "%.*s: no such class or module %.*s%s%.*s%s (not traced)",
                             (int)RSTRING_LEN(first), RSTRING_PTR(first), (int)RSTRING_LEN(path),
                             RSTRING_PTR(path), open, note_len, note_ptr, close);
    else
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "%.*s is not loaded in process %d (no such class "
                             "or module%s%.*s): its %ld selectors are not traced",
                             (int)RSTRING_LEN(path), RSTRING_PTR(path), (int)getpid(),
                             note_len ? "; " : "", note_len, note_ptr, n);
    return ST_CONTINUE;
}

void rbtrace_selector_errors_report(VALUE errors)
{
    rb_hash_foreach(errors, selector_report_missing_i, Qnil);
}

void Init_rbtrace_selector(VALUE mod)
{
    (void)mod;
    id_parse_selector = rb_intern("parse_selector");
    id_selector_class = rb_intern("selector_class");
    id_NamedClass = rb_intern("NamedClass");
    id_path = rb_intern("path");
    id_klass = rb_intern("klass");
    id_Selector = rb_intern("Selector");
    id_Parsed = rb_intern("Parsed");
    id_NotLoaded = rb_intern("NotLoaded");
    id_NotDefined = rb_intern("NotDefined");
    id_at_path = rb_intern("@path");
    id_at_note = rb_intern("@note");
    id_owner = rb_intern("owner");
    id_method_name = rb_intern("method_name");
    id_exprs = rb_intern("exprs");
    id_notes = rb_intern("notes");
    id_ruby_method = rb_intern("ruby_method");
    id_block_method = rb_intern("block_method");
    id_visibility = rb_intern("visibility");
    id_wrapped_name = rb_intern("wrapped_name");
    id_arity = rb_intern("arity");
}
