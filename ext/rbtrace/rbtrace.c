/*
 * rbtrace.c - the extension's entry point, the top of its layers
 * (docs/DESIGN.md, "Layers"): Init, the Ruby methods of this file, and
 * what a forked child must reset. The global state is state.c's.
 *
 * Loading the extension installs the SIGURG handler and nothing else; the
 * Ruby glue (lib/rbtrace.rb) then parks one helper thread (channel.c).
 * Queue, socket, writer thread, buffers and hooks exist only from the
 * first signal or attach on.
 *
 * Each file's one job: docs/DESIGN.md, "Files".
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "channel.h"
#include "clock.h"
#include "emit.h"
#include "gcwatch.h"
#include "gvlwatch.h"
#include "allocwatch.h"
#include "handoff.h"
#include "inplace.h"
#include "profile.h"
#include "protocol.h"
#include <ruby/version.h> /* RUBY_API_VERSION_*: the mark --inject reads */
#include "selector.h"
#include "ractors.h"
#include "raisewatch.h"
#include "command.h"
#include "slow.h"
#include "threadnames.h"
#include "trace.h"
#include "wrapper.h"

/* The objects the C state refers to (selections' classes and expressions,
 * wrappers' modules, the classes the session has named) are marked, and
 * pinned, through this one object. */
static void rbtrace_roots_mark(void *unused)
{
    rbtrace_trace_mark();
    rbtrace_wrapper_mark();
    rbtrace_emit_mark();
    rbtrace_alloc_mark();
}

static const rb_data_type_t rbtrace_roots_type = { .wrap_struct_name = "rbtrace_roots",
                                                   .function = { .dmark = rbtrace_roots_mark },
                                                   .flags = RUBY_TYPED_FREE_IMMEDIATELY };

static VALUE rbtrace_roots;

/*
 * call-seq: RBTrace.after_fork_child -> nil
 *
 * Called in a forked child (lib/rbtrace.rb hooks Process._fork): the child
 * starts detached, with a queue of its own once it is signalled.
 */
static VALUE rbtrace_after_fork_child_m(VALUE self)
{
    rbtrace_command_after_fork();
    rbtrace_trace_after_fork();
    rbtrace_thread_names_after_fork();
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

/* The Ruby this library is for, for --inject to check (protocol.h). */
#define RBTRACE_STR2(x) #x
#define RBTRACE_STR(x) RBTRACE_STR2(x)
__attribute__((used)) static const char rbtrace_built_for[] = RBTRACE_BUILT_FOR_MARK RBTRACE_STR(
    RUBY_API_VERSION_MAJOR) "." RBTRACE_STR(RUBY_API_VERSION_MINOR) "\n";

RUBY_FUNC_EXPORTED void Init_rbtrace(void)
{
    rbtrace.sock = -1;
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
    Init_rbtrace_command(rbtrace_mRBTrace);
    Init_rbtrace_trace(rbtrace_mRBTrace);
    Init_rbtrace_wrapper(rbtrace_mRBTrace);
    Init_rbtrace_selector(rbtrace_mRBTrace);
    Init_rbtrace_slow(rbtrace_mRBTrace);
    Init_rbtrace_gcwatch(rbtrace_mRBTrace);
    Init_rbtrace_raisewatch(rbtrace_mRBTrace);
    Init_rbtrace_gvlwatch(rbtrace_mRBTrace);
    Init_rbtrace_profile(rbtrace_mRBTrace);
    Init_rbtrace_allocwatch(rbtrace_mRBTrace);
    Init_rbtrace_threadnames(rbtrace_mRBTrace);
    Init_rbtrace_ractors(rbtrace_mRBTrace);
    rbtrace_inplace_install();
    rbtrace_clock_init();
    rbtrace_mn_threads_init();
    rbtrace_channel_init();
}
