/*
 * raisewatch.c - --raise: each exception raised in the process, with its
 * class, message and where it was raised.
 *
 * A RAISE event hook. It runs none of the app's code: an exception's
 * #message, #to_s, #class may be the app's own, and a NameError's message
 * calls its receiver's #inspect (an ActiveRecord relation's queries the
 * database). What is shown is read through the C API instead:
 *   - the class: rb_obj_class (the real class, not #class) and its path;
 *   - the message: the String the exception holds (its "mesg", as set at
 *     construction), or, for a NameError/NoMethodError made by the VM, its
 *     own format filled in with the method's name and the receiver's class
 *     (never its #inspect); anything else: no message, the class alone.
 * Only the location is Ruby, rbtrace's own (RBTrace.raise_location in
 * lib/rbtrace/raise_report.rb): it skips rbtrace's own exceptions. An
 * exception raised while it runs is not reported (the hook does not
 * re-enter). That is per thread: Ruby may switch threads while the
 * location is found, and another thread's raises meanwhile are the app's
 * (one flag for the process lost them, and showed the next re-raise of
 * such an exception as its first raise).
 *
 * Re-raises: an exception rescued and raised again (`rescue => e; raise`
 * in each of a Rails app's middlewares) fires the hook each time. Each
 * event says whether it is the same exception object as the one last
 * raised on its thread, and how many times it was raised again so far:
 * the client folds those into the first raise's line (--raise-all shows
 * them). One slot for each of the last RAISE_LAST_SLOTS threads that
 * raised (a Puma worker's threads raise in turn: slots picked by a hash of
 * the thread's id collided for one worker in three, and showed its
 * re-raises as raises), holding the exception's object id, never
 * the exception: an exception the app dropped is not kept alive, and a
 * new one at a freed one's address is not taken for it.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "emit.h"
#include "ractors.h"
#include "raisewatch.h"
#include <ruby/encoding.h>
#include <string.h>

#define RAISE_HOOK ((rb_event_hook_func_t)(void (*)(void))raise_hook_i)

/* Longer messages are cut, with "..." (a message may hold a whole file). */
#define RAISE_MESSAGE_MAX 1024

/* Slots of the last raise on each thread, for this many threads. */
#define RAISE_LAST_SLOTS 64

/* Threads that may be finding a location at once (each is inside the
 * hook, in Ruby code); past this many, a thread's raise is not reported. */
#define RAISE_BUSY_MAX 64

static int raise_active;
/* The threads (rbtrace_thread_id) finding a location: their hook does not
 * re-enter. 0: a free entry. */
static uint64_t raise_busy[RAISE_BUSY_MAX];
static ID id_raise_location, id_mesg;
static VALUE raise_main; /* the top-level self, "main" in messages */

/* The last exception reported on a thread, and how many times it has been
 * raised again since. */
struct raise_last {
    uint64_t thread;
    VALUE object_id; /* a Fixnum (an object id), or 0 for none */
    uint64_t reraises;
    uint64_t used; /* raise_clock at its thread's last raise; 0: free */
};

static struct raise_last raise_last[RAISE_LAST_SLOTS];
static uint64_t raise_clock;

struct raise_arg {
    VALUE path;
    VALUE line;
};

/* ---- the message, without the app's code ---- */

/*
 * The fields of a NameError::message (error.c's name_error_message_t: the
 * format, the receiver, the name, in that order from Ruby 2.x to 3.4).
 * Read only from an object of that exact data type (checked by its name).
 */
struct raise_name_err_mesg {
    VALUE format;
    VALUE recv;
    VALUE name;
};

static const struct raise_name_err_mesg *raise_name_err_fields(VALUE mesg)
{
    const rb_data_type_t *type;

    if (RB_SPECIAL_CONST_P(mesg) || !RB_TYPE_P(mesg, T_DATA) || !RTYPEDDATA_P(mesg)) return NULL;
    type = RTYPEDDATA_TYPE(mesg);
    if (type == NULL || type->wrap_struct_name == NULL ||
        strcmp(type->wrap_struct_name, "name_err_mesg") != 0)
        return NULL;
    /* rb_check_typeddata: the data pointer, embedded (3.3+) or not */
    return (const struct raise_name_err_mesg *)rb_check_typeddata(mesg, type);
}

/* A class's or module's name as Ruby keeps it (no #name, #inspect):
 * "Foo::Bar", or "#<Class:0x...>" for an anonymous one. */
static VALUE raise_class_path(VALUE klass)
{
    return rb_class_path(klass);
}

/*
 * The arguments a NameError's format is filled in with, as error.c's
 * name_err_mesg_to_str sets them but with no call into the receiver:
 *   [0] the name, [1] the receiver, [2] and [3] what follows it.
 * Ruby 3.3+ formats ("undefined method '%1$s' for %3$s%4$s") want [2] [3]
 * as "an instance of " "Foo"; older ones ("undefined method `%s' for
 * %s%s%s") want [1] [2] [3] as "nil" ":" "NilClass", with [1] the
 * receiver's #inspect, which is "an instance of Foo" here.
 */
static void raise_name_err_args(VALUE recv, VALUE name, int modern, VALUE args[4])
{
    VALUE klass;

    args[0] = RB_SYMBOL_P(name)     ? rb_sym2str(name)
        : RB_TYPE_P(name, T_STRING) ? name
                                    : rb_str_new_cstr("?");
    args[2] = args[3] = rb_str_new_cstr("");
    if (NIL_P(recv) || recv == Qtrue || recv == Qfalse || recv == raise_main) {
        const char *what = NIL_P(recv) ? "nil"
            : recv == Qtrue            ? "true"
            : recv == Qfalse           ? "false"
                                       : "main";
        args[1] = rb_str_new_cstr(what);
        if (modern) {
            args[3] = args[1];
        } else {
            args[2] = rb_str_new_cstr(":");
            args[3] = raise_class_path(rb_obj_class(recv));
        }
        return;
    }
    if (RB_TYPE_P(recv, T_CLASS) || RB_TYPE_P(recv, T_MODULE)) {
        args[1] = raise_class_path(recv);
        if (modern) {
            args[2] = rb_str_new_cstr(RB_TYPE_P(recv, T_CLASS) ? "class " : "module ");
            args[3] = args[1];
        } else if (RSTRING_LEN(args[1]) > 0 && RSTRING_PTR(args[1])[0] != '#') {
            args[2] = rb_str_new_cstr(":");
            args[3] = raise_class_path(rb_obj_class(recv));
        }
        return;
    }
    klass = rb_obj_class(recv);
    if (!RB_SPECIAL_CONST_P(recv) && RBASIC_CLASS(recv) != klass) {
        /* an object with a singleton class: "#<Foo:0x...>", as 3.3 says */
        args[1] = rb_any_to_s(recv);
        if (modern) args[3] = args[1];
        return;
    }
    args[1] = rb_str_new_cstr("an instance of ");
    rb_str_cat(args[1], RSTRING_PTR(raise_class_path(klass)), RSTRING_LEN(raise_class_path(klass)));
    if (modern) {
        args[2] = rb_str_new_cstr("an instance of ");
        args[3] = raise_class_path(klass);
    }
}

/*
 * format with %s, %N$s (N 1 to 4) and %% filled in from args; Qnil for any
 * other directive (then the class alone is shown). Not rb_str_format: it
 * would convert an argument with its own methods, and any directive a
 * format could hold would have to be vetted anyway.
 */
static VALUE raise_format(VALUE format, const VALUE args[4])
{
    const char *p = RSTRING_PTR(format), *end = p + RSTRING_LEN(format);
    /* bytes as they are (no encoding check that could raise), as UTF-8:
     * what names are written in; raise_clean scrubs what is not */
    VALUE out = rb_utf8_str_new(NULL, 0);
    int next = 0;

    while (p < end) {
        const char *pct = memchr(p, '%', (size_t)(end - p));
        int n;

        if (pct == NULL) pct = end;
        rb_str_cat(out, p, pct - p);
        if (pct == end) break;
        if (pct + 1 < end && pct[1] == '%') {
            rb_str_cat(out, "%", 1);
            p = pct + 2;
            continue;
        }
        if (pct + 1 < end && pct[1] == 's') {
            n = next++;
            p = pct + 2;
        } else if (pct + 3 < end && pct[1] >= '1' && pct[1] <= '4' && pct[2] == '$' &&
                   pct[3] == 's') {
            n = pct[1] - '1';
            p = pct + 4;
        } else {
            return Qnil;
        }
        if (n > 3) return Qnil;
        rb_str_cat(out, RSTRING_PTR(args[n]), RSTRING_LEN(args[n]));
    }
    RB_GC_GUARD(format); /* on the stack, so not moved while p points into it */
    return out;
}

static VALUE raise_name_err_message(const struct raise_name_err_mesg *m)
{
    VALUE args[4];
    int modern;

    if (!RB_TYPE_P(m->format, T_STRING) || m->recv == Qundef) return Qnil;
    /* 3.3+ formats name what follows the receiver by position 3 and 4 */
    modern = memmem(RSTRING_PTR(m->format), (size_t)RSTRING_LEN(m->format), "%3$s", 4) != NULL ||
        memmem(RSTRING_PTR(m->format), (size_t)RSTRING_LEN(m->format), "%4$s", 4) != NULL;
    raise_name_err_args(m->recv, m->name, modern, args);
    return raise_format(m->format, args);
}

/* A plain copy, valid in its encoding, cut at RAISE_MESSAGE_MAX bytes. */
static VALUE raise_clean(VALUE text)
{
    long len = RSTRING_LEN(text);
    int cut = len > RAISE_MESSAGE_MAX;
    VALUE copy, scrubbed;

    if (cut) len = RAISE_MESSAGE_MAX - 3;
    copy = rb_enc_str_new(RSTRING_PTR(text), len, rb_enc_get(text));
    scrubbed = rb_str_scrub(copy, cut ? rb_str_new_cstr("") : Qnil);
    if (!NIL_P(scrubbed)) copy = scrubbed;
    if (cut) rb_str_cat_cstr(copy, "...");
    return copy;
}

/* The exception's message where it can be had without the app's code;
 * "" where it cannot. */
static VALUE raise_message(VALUE exc)
{
    VALUE mesg = rb_attr_get(exc, id_mesg), text = Qnil;
    const struct raise_name_err_mesg *fields;

    if (RB_TYPE_P(mesg, T_STRING)) text = mesg;
    else if (RB_SYMBOL_P(mesg)) text = rb_sym2str(mesg);
    else if ((fields = raise_name_err_fields(mesg)) != NULL) text = raise_name_err_message(fields);
    return NIL_P(text) ? rb_str_new_cstr("") : raise_clean(text);
}

/* ---- re-raises ---- */

/* The slot of thread: its own, or else a free one or the least recently
 * used, emptied for it. A scan of 64: exceptions are rare next to calls,
 * and each costs microseconds already. */
static struct raise_last *raise_slot(uint64_t thread)
{
    struct raise_last *victim = &raise_last[0];
    size_t i;

    for (i = 0; i < RAISE_LAST_SLOTS; i++) {
        if (raise_last[i].used != 0 && raise_last[i].thread == thread) return &raise_last[i];
        if (raise_last[i].used < victim->used) victim = &raise_last[i];
    }
    victim->thread = thread;
    victim->object_id = 0;
    victim->reraises = 0;
    return victim;
}

/* 0 if exc is not the exception last raised on this thread, else how many
 * times it has now been raised again; records it as the last. */
static uint64_t raise_count_reraise(VALUE exc)
{
    uint64_t thread = rbtrace_thread_id();
    struct raise_last *slot = raise_slot(thread);
    VALUE id = rb_obj_id(exc);

    slot->used = ++raise_clock;
    if (!RB_FIXNUM_P(id)) id = 0; /* never on 64 bits; then no folding */
    if (id != 0 && slot->object_id == id) return ++slot->reraises;
    slot->thread = thread;
    slot->object_id = id;
    slot->reraises = 0;
    return 0;
}

/* ---- the hook ---- */

/* Whether thread is finding a location (its hook runs already). */
static int raise_busy_p(uint64_t thread)
{
    size_t i;

    for (i = 0; i < RAISE_BUSY_MAX; i++)
        if (raise_busy[i] == thread) return 1;
    return 0;
}

/* Marks thread busy: its entry, or NULL if every entry is taken. */
static uint64_t *raise_busy_enter(uint64_t thread)
{
    size_t i;

    for (i = 0; i < RAISE_BUSY_MAX; i++) {
        if (raise_busy[i] == 0) {
            raise_busy[i] = thread;
            return &raise_busy[i];
        }
    }
    return NULL;
}

static VALUE raise_location_i(VALUE p)
{
    const struct raise_arg *a = (const struct raise_arg *)p;
    return rb_funcall(rbtrace_mRBTrace, id_raise_location, 2, a->path, a->line);
}

static void raise_hook_i(VALUE data, rb_trace_arg_t *targ)
{
    struct raise_arg arg;
    uint64_t now, thread, *busy;
    VALUE exc, location;
    int state = 0;

    (void)data;
    /* The main Ractor's hook; the check is the ring's safety (ractors.c). */
    if (!raise_active || !rbtrace.attached || !rbtrace_main_ractor_p()) return;
    thread = rbtrace_thread_id();
    if (raise_busy_p(thread)) return;
    now = rbtrace_clock_ns();
    exc = rb_tracearg_raised_exception(targ);
    arg.path = rb_tracearg_path(targ);
    arg.line = rb_tracearg_lineno(targ);
    if ((busy = raise_busy_enter(thread)) == NULL) return;
    location = rb_protect(raise_location_i, (VALUE)&arg, &state);
    *busy = 0;
    /* raise_location rescues everything; what escapes is an interrupt for
     * the app (Thread#raise, kill), deferred past it: it goes on. */
    if (state) rb_jump_tag(state);
    if (!RB_TYPE_P(location, T_STRING)) return; /* one of ours */
    rbtrace_emit_raise(now, raise_class_path(rb_obj_class(exc)), raise_message(exc), location,
                       raise_count_reraise(exc));
}

void rbtrace_raise_start(void)
{
    if (raise_active) return;
    memset(raise_last, 0, sizeof(raise_last));
    memset(raise_busy, 0, sizeof(raise_busy));
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

int rbtrace_raise_active(void)
{
    return raise_active;
}

/*
 * call-seq: RBTrace.class_path_of(obj) -> String
 *
 * obj's real class's name, read as this file reads an exception's: not
 * through obj.class or its #name, which the app may define. For a trace
 * expression that raised (lib/rbtrace/expressions.rb).
 */
static VALUE raise_class_path_of_m(VALUE self, VALUE obj)
{
    return raise_class_path(rb_obj_class(obj));
}

void Init_rbtrace_raisewatch(VALUE mod)
{
    rb_define_singleton_method(mod, "class_path_of", raise_class_path_of_m, 1);
    id_raise_location = rb_intern("raise_location");
    id_mesg = rb_intern("mesg"); /* error.c's id_mesg: no "@", hidden from Ruby */
    /* the top-level self, evaluated at the top level */
    raise_main = rb_eval_string("self");
    rb_gc_register_address(&raise_main);
}
