/*
 * hook_floor.c - the least a global call/return hook can cost: hooks that
 * do nothing, or only what every tracer must (the method and class, a
 * clock), for bench/hook_floor.rb to compare with rbtrace's own hook.
 * Not part of rbtrace.
 */
#include <ruby.h>
#include <ruby/debug.h>
#include <time.h>

#define EVENTS (RUBY_EVENT_CALL | RUBY_EVENT_RETURN | RUBY_EVENT_C_CALL | RUBY_EVENT_C_RETURN)
#define RAW (RUBY_EVENT_HOOK_FLAG_RAW_ARG | RUBY_EVENT_HOOK_FLAG_SAFE)

static volatile uintptr_t sink;   /* keeps the hooks' work from being optimised out */

static void hook_empty(VALUE data, rb_trace_arg_t *targ)
{
    sink++;
}

static void hook_names(VALUE data, rb_trace_arg_t *targ)
{
    sink += rb_tracearg_method_id(targ) + rb_tracearg_defined_class(targ);
}

static uintptr_t read_clock_gettime(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uintptr_t)ts.tv_nsec;
}

/* The TSC where there is one (rbtrace's clock there), else clock_gettime. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <x86intrin.h>
static uintptr_t read_tsc(void)
{
    return (uintptr_t)__rdtsc();
}
#else
#define read_tsc read_clock_gettime
#endif

static void hook_names_clock(VALUE data, rb_trace_arg_t *targ)
{
    sink += read_clock_gettime() + rb_tracearg_method_id(targ) + rb_tracearg_defined_class(targ);
}

static void hook_names_tsc(VALUE data, rb_trace_arg_t *targ)
{
    sink += read_tsc() + rb_tracearg_method_id(targ) + rb_tracearg_defined_class(targ);
}

/* The method and class as rbtrace's own hook gets them, and the clock it
 * reads: a plain (not RAW_ARG) hook is handed a C method's id and owner;
 * a Ruby method's call or return comes without, and they are its frame's.
 * What is left of rbtrace's cost above this hook's is rbtrace's own work
 * (bench/per_call.rb measures both in one process). */
static void hook_plain_tsc(rb_event_flag_t ev, VALUE data, VALUE self, ID id, VALUE klass)
{
    if (id == 0 && !rb_frame_method_id_and_class(&id, &klass)) klass = Qnil;
    sink += read_tsc() + id + klass;
}

/* A RAW_ARG hook goes in as the generic hook type (through void (*)(void)). */
#define HOOK(f) ((rb_event_hook_func_t)(void (*)(void))(f))

static rb_event_hook_func_t hook_of(VALUE kind)
{
    const char *k = rb_id2name(SYM2ID(kind));

    if (strcmp(k, "empty") == 0) return HOOK(hook_empty);
    if (strcmp(k, "names") == 0) return HOOK(hook_names);
    if (strcmp(k, "names_clock") == 0) return HOOK(hook_names_clock);
    if (strcmp(k, "names_tsc") == 0) return HOOK(hook_names_tsc);
    if (strcmp(k, "plain_tsc") == 0) return hook_plain_tsc;
    rb_raise(rb_eArgError, "no such hook: %s", k);
}

/* HookFloor.on(:empty | :names | :names_clock | :names_tsc | :plain_tsc);
 * HookFloor.off(kind). plain_tsc's hook is a plain one, the others RAW_ARG. */
static VALUE floor_on(VALUE self, VALUE kind)
{
    rb_event_hook_func_t hook = hook_of(kind);

    rb_add_event_hook2(hook, EVENTS, Qnil,
                       hook == hook_plain_tsc ? RUBY_EVENT_HOOK_FLAG_SAFE : RAW);
    return Qnil;
}

static VALUE floor_off(VALUE self, VALUE kind)
{
    rb_remove_event_hook(hook_of(kind));
    return Qnil;
}

void Init_hook_floor(void)
{
    VALUE mod = rb_define_module("HookFloor");

    rb_define_singleton_method(mod, "on", floor_on, 1);
    rb_define_singleton_method(mod, "off", floor_off, 1);
}
