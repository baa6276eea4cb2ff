/*
 * rbtrace.c - the extension's entry point: the global state, the clock,
 * and what a forked child must reset.
 *
 * Loading the extension installs the SIGURG handler and nothing else; the
 * Ruby glue (lib/rbtrace.rb) then parks one helper thread (channel.c).
 * Queue, socket, writer thread, buffers and hooks exist only from the
 * first signal or attach on.
 *
 * Each file's one job: docs/DESIGN.md, "Files".
 */
#include "rbtrace.h"  /* first: ruby.h sets _GNU_SOURCE */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct rbtrace_state rbtrace;
VALUE rbtrace_mRBTrace;
int rbtrace_mn_threads;
uint64_t rbtrace_mn_thread;

/* The objects the C state refers to (tracers' classes and expressions,
 * wrappers' modules, the classes the session has named) are marked, and
 * pinned, through this one object. */
static void rbtrace_roots_mark(void *unused)
{
    rbtrace_tracer_mark();
    rbtrace_wrapper_mark();
    rbtrace_emit_mark();
}

static const rb_data_type_t rbtrace_roots_type = {
    .wrap_struct_name = "rbtrace_roots",
    .function = { .dmark = rbtrace_roots_mark },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE rbtrace_roots;

uint64_t rbtrace_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef RBTRACE_HAVE_MN_THREAD_HOOK
/* A Ruby thread took the GVL (RUBY_INTERNAL_THREAD_EVENT_RESUMED, on its
 * native thread, GVL held): it is the one whose events follow. Its
 * rb_thread_t, which stays in place for the thread's life (the Thread
 * object may be moved by GC.compact). */
static void rbtrace_thread_resumed(rb_event_flag_t event, const rb_internal_thread_event_data_t *data,
                                   void *unused)
{
    rbtrace_mn_thread = (uint64_t)(uintptr_t)RTYPEDDATA_GET_DATA(data->thread);
}
#endif

/*
 * Under M:N scheduling (RUBY_MN_THREADS=1, as Ruby 3.3+ reads it at boot)
 * events name the Ruby thread that holds the GVL (rbtrace_thread_id): a
 * VM thread hook notes it as it changes, from here on. Without M:N (or a
 * Ruby that has neither it nor the hook) nothing is installed.
 */
static void rbtrace_mn_threads_init(void)
{
#ifdef RBTRACE_HAVE_MN_THREAD_HOOK
    const char *mn = getenv("RUBY_MN_THREADS");

    if (mn == NULL || atoi(mn) <= 0) return;
    rbtrace_mn_thread = (uint64_t)(uintptr_t)RTYPEDDATA_GET_DATA(rb_thread_current());
    if (rb_internal_thread_add_event_hook(rbtrace_thread_resumed, RUBY_INTERNAL_THREAD_EVENT_RESUMED,
                                          NULL) == NULL) {
        fprintf(stderr, "rbtrace: cannot watch which Ruby thread runs (RUBY_MN_THREADS=1): traces "
                "will mix up the Ruby threads that share a native thread\n");
        return;
    }
    rbtrace_mn_threads = 1;
#endif
}

/*
 * rb_protect that lets a thread die: it returns a raised exception (state
 * set, errinfo cleared, for the caller to report), but re-throws a
 * Thread#kill or process exit. Swallowing those would leave a thread the
 * VM is waiting for at exit alive, and the process hung.
 */
VALUE rbtrace_protect(VALUE (*func)(VALUE), VALUE arg, int *state, VALUE *error)
{
    VALUE result = rb_protect(func, arg, state), err;

    if (*state == 0) return result;
    err = rb_errinfo();
    if (!rb_obj_is_kind_of(err, rb_eException)) rb_jump_tag(*state);
    rb_set_errinfo(Qnil);
    if (error) *error = err;
    return Qnil;
}

struct rbtrace_nogvl_call {
    void *(*func)(void *);
    void *arg;
    rb_unblock_function_t *ubf;
    void *ubf_arg;
};

/* func, then a word that this thread now waits for the GVL (handoff.c). */
static void *rbtrace_nogvl_body(void *p)
{
    struct rbtrace_nogvl_call *c = p;

    c->func(c->arg);
    rbtrace_handoff_request();
    return NULL;
}

static VALUE rbtrace_nogvl_i(VALUE p)
{
    struct rbtrace_nogvl_call *c = (struct rbtrace_nogvl_call *)p;

    rb_thread_call_without_gvl(rbtrace_nogvl_body, c, c->ubf, c->ubf_arg);
    rbtrace_handoff_done();
    return Qnil;
}

/*
 * Runs func without the GVL. An interrupt for this thread (Thread#kill at
 * exit, Thread#raise) may be raised before or after func; it is caught and
 * its state returned, so that the caller finishes what it was doing (a
 * detach, an event) and then re-raises it with rb_jump_tag. func may not
 * have run at all: callers check.
 */
int rbtrace_nogvl(void *(*func)(void *), void *arg, rb_unblock_function_t *ubf, void *ubf_arg)
{
    struct rbtrace_nogvl_call c = { func, arg, ubf, ubf_arg };
    int state = 0;

    rb_protect(rbtrace_nogvl_i, (VALUE)&c, &state);
    rbtrace_handoff_done();   /* also when an interrupt was raised */
    return state;
}

/*
 * call-seq: RBTrace.after_fork_child -> nil
 *
 * Called in a forked child (lib/rbtrace.rb hooks Process._fork): the child
 * starts detached, with a queue of its own once it is signalled.
 */
static VALUE rbtrace_after_fork_child_m(VALUE self)
{
    rbtrace_session_after_fork();
    rbtrace_tracer_after_fork();
    rbtrace_channel_after_fork();
    rbtrace_handoff_after_fork();
    return Qnil;
}

/*
 * call-seq: RBTrace.attached? -> true or false
 */
static VALUE rbtrace_attached_p_m(VALUE self)
{
    return rbtrace.attached ? Qtrue : Qfalse;
}

static VALUE rbtrace_resumed_p_m(VALUE self)
{
    return rbtrace.resumed ? Qtrue : Qfalse;
}

/* In the library's data, for the client to find (protocol.h). */
__attribute__((used)) static const char rbtrace_library_mark[] = RBTRACE_LIBRARY_MARK;

RUBY_FUNC_EXPORTED void Init_rbtrace(void)
{
    rbtrace.sock = -1;
    rbtrace.queue_id = -1;
    rbtrace_mRBTrace = rb_define_module("RBTrace");
    rbtrace_roots = TypedData_Wrap_Struct(0, &rbtrace_roots_type, &rbtrace);
    rb_global_variable(&rbtrace_roots);
    rb_define_const(rbtrace_mRBTrace, "PROTOCOL_VERSION", INT2FIX(RBTRACE_PROTOCOL_VERSION));
    rb_define_const(rbtrace_mRBTrace, "VALUE_MAX", INT2FIX(RBTRACE_VALUE_MAX));
    /* The eval statuses, named once in protocol.h, for lib/rbtrace/evaluator.rb */
    rb_define_const(rbtrace_mRBTrace, "EVAL_OK", INT2FIX(RBTRACE_EVAL_OK));
    rb_define_const(rbtrace_mRBTrace, "EVAL_RAISED", INT2FIX(RBTRACE_EVAL_RAISED));
    rb_define_const(rbtrace_mRBTrace, "EVAL_SYNTAX", INT2FIX(RBTRACE_EVAL_SYNTAX));
    rb_define_const(rbtrace_mRBTrace, "EVAL_TIMEOUT", INT2FIX(RBTRACE_EVAL_TIMEOUT));
    rb_define_singleton_method(rbtrace_mRBTrace, "after_fork_child", rbtrace_after_fork_child_m, 0);
    rb_define_singleton_method(rbtrace_mRBTrace, "attached?", rbtrace_attached_p_m, 0);
    rb_define_singleton_method(rbtrace_mRBTrace, "resumed?", rbtrace_resumed_p_m, 0);
    Init_rbtrace_channel(rbtrace_mRBTrace);
    Init_rbtrace_handoff(rbtrace_mRBTrace);
    Init_rbtrace_clock(rbtrace_mRBTrace);
    Init_rbtrace_session(rbtrace_mRBTrace);
    Init_rbtrace_tracer(rbtrace_mRBTrace);
    Init_rbtrace_wrapper(rbtrace_mRBTrace);
    Init_rbtrace_slow(rbtrace_mRBTrace);
    Init_rbtrace_gcwatch(rbtrace_mRBTrace);
    Init_rbtrace_raisewatch(rbtrace_mRBTrace);
    Init_rbtrace_gvlwatch(rbtrace_mRBTrace);
    Init_rbtrace_threadnames(rbtrace_mRBTrace);
    Init_rbtrace_devmode(rbtrace_mRBTrace);
    Init_rbtrace_ractors(rbtrace_mRBTrace);
    rbtrace_inplace_install();
    rbtrace_clock_init();
    rbtrace_mn_threads_init();
    rbtrace_channel_init();
}
