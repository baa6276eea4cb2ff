/*
 * inplace.c - Kernel#trap, Signal.trap and Process.daemon, replaced in
 * place by C methods that call Ruby's own and then do rbtrace's part:
 *
 *   trap    An app's trap('URG') replaces rbtrace's SIGURG handler, after
 *           which the process can no longer be attached to: say so once,
 *           where the app logs (Kernel.warn). And Ruby's trap names a
 *           handler it did not set itself nil, so the first trap('URG')
 *           would return nil where it returns "SYSTEM_DEFAULT" (or
 *           "IGNORE") untraced: it returns that instead
 *           (rbtrace_channel_handler_before).
 *   daemon  Process.daemon forks without Process._fork (which
 *           lib/rbtrace.rb hooks): the child, the only one to return,
 *           starts its own helper thread (RBTrace.reset_in_child).
 *
 * In place, not by a prepended module: a module would show in the
 * ancestors of every class (Kernel's) and in the method's owner,
 * source_location and parameters. The replacements are defined on the
 * same owners, with the same visibility and arity (-1), so `owner`,
 * `arity`, `parameters` and `source_location` (nil) are as untraced.
 *
 * What differs: Ruby's trap and daemon are static in signal.c and
 * process.c, so the replacement calls the original through a Method
 * object captured before it was replaced (rb_method_call_with_block_kw).
 * That call is a C frame of its own, named like ours: an exception raised
 * by trap (trap('BOGUS'), trap('SEGV') {}) has one more "in `trap'" line at
 * the top of its backtrace (and of backtrace_locations), the same line
 * twice; caller inside a trap handler is not affected (handlers run later,
 * from the VM's signal check). A c_call TracePoint sees trap called twice.
 *
 * Each place is replaced only while its method is still Ruby's own: a trap
 * or daemon an app or gem defined before rbtrace loaded stays (its trap of
 * URG then goes unwatched).
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "channel.h"
#include "inplace.h"

/* Ruby's own methods, as Method objects bound at load time (the receiver
 * is nil for the instance methods: neither trap nor daemon looks at self). */
static VALUE inplace_kernel_trap;      /* Kernel#trap (private) */
static VALUE inplace_kernel_s_trap;    /* Kernel.trap */
static VALUE inplace_signal_trap;      /* Signal#trap (private) */
static VALUE inplace_signal_s_trap;    /* Signal.trap */
static VALUE inplace_process_daemon;   /* Process#daemon (private) */
static VALUE inplace_process_s_daemon; /* Process.daemon */

/* Whether the app has been told that its trap('URG') took SIGURG. */
static int inplace_urg_lost_said;

/* Calls a captured original with our arguments, block and keywords. */
static VALUE inplace_call(VALUE original, int argc, const VALUE *argv)
{
    VALUE block = rb_block_given_p() ? rb_block_proc() : Qnil;

    return rb_method_call_with_block_kw(argc, argv, original, block, rb_keyword_given_p());
}

static void inplace_say_urg_lost(void)
{
    VALUE msg;

    if (inplace_urg_lost_said) return;
    inplace_urg_lost_said = 1;
    msg = rb_sprintf("rbtrace: the app replaced rbtrace's SIGURG handler (trap('URG')); "
                     "this process (pid %ld) can no longer be traced",
                     (long)getpid());
    rb_funcall(rb_mKernel, rb_intern("warn"), 1, msg);
}

/*
 * The trap of every place. Which signal was trapped is not parsed here
 * (that would call the app's #to_str a second time): when rbtrace's
 * handler was there before Ruby's trap and is gone after it, this trap
 * took SIGURG. Ruby then returned nil for our handler; the app gets what
 * it would have got untraced. Any later check that finds the handler gone
 * (a C extension's sigaction, say) warns too, once.
 */
static VALUE inplace_trap(VALUE original, int argc, VALUE *argv)
{
    int ours = rbtrace_channel_handler_installed();
    VALUE old = inplace_call(original, argc, argv);

    if (rbtrace_channel_handler_installed()) return old;
    inplace_say_urg_lost();
    return ours && NIL_P(old) ? rbtrace_channel_handler_before() : old;
}

static VALUE inplace_kernel_trap_m(int argc, VALUE *argv, VALUE self)
{
    return inplace_trap(inplace_kernel_trap, argc, argv);
}

static VALUE inplace_kernel_s_trap_m(int argc, VALUE *argv, VALUE self)
{
    return inplace_trap(inplace_kernel_s_trap, argc, argv);
}

static VALUE inplace_signal_trap_m(int argc, VALUE *argv, VALUE self)
{
    return inplace_trap(inplace_signal_trap, argc, argv);
}

static VALUE inplace_signal_s_trap_m(int argc, VALUE *argv, VALUE self)
{
    return inplace_trap(inplace_signal_s_trap, argc, argv);
}

/* Only the daemon child returns from Ruby's daemon (the parent exits). */
static VALUE inplace_daemon(VALUE original, int argc, VALUE *argv)
{
    VALUE result = inplace_call(original, argc, argv);

    rb_funcall(rbtrace_mRBTrace, rb_intern("reset_in_child"), 0);
    return result;
}

static VALUE inplace_process_daemon_m(int argc, VALUE *argv, VALUE self)
{
    return inplace_daemon(inplace_process_daemon, argc, argv);
}

static VALUE inplace_process_s_daemon_m(int argc, VALUE *argv, VALUE self)
{
    return inplace_daemon(inplace_process_s_daemon, argc, argv);
}

/* mod.name as a Method: the singleton method (a module function's public half). */
static VALUE inplace_singleton_original(VALUE *slot, VALUE mod, const char *name)
{
    rb_global_variable(slot);
    return *slot = rb_obj_method(mod, ID2SYM(rb_intern(name)));
}

/* mod#name (private), bound to nil: a module's instance method binds to any object. */
static VALUE inplace_instance_original(VALUE *slot, VALUE mod, const char *name)
{
    VALUE unbound = rb_funcall(mod, rb_intern("instance_method"), 1, ID2SYM(rb_intern(name)));

    rb_global_variable(slot);
    return *slot = rb_funcall(unbound, rb_intern("bind"), 1, Qnil);
}

/*
 * A module function (Signal.trap, Process.daemon: a public singleton
 * method and a private instance method), replaced if it is still Ruby's.
 * rb_method_basic_definition_p is asked of the singleton class only (a
 * class: it caches into what it is given, which a module is not made for).
 */
static void inplace_module_function(VALUE mod, const char *name, VALUE *instance,
                                    VALUE (*instance_m)(int, VALUE *, VALUE), VALUE *singleton,
                                    VALUE (*singleton_m)(int, VALUE *, VALUE))
{
    if (!rb_method_basic_definition_p(rb_singleton_class(mod), rb_intern(name))) return;
    inplace_instance_original(instance, mod, name);
    inplace_singleton_original(singleton, mod, name);
    rb_define_private_method(mod, name, instance_m, -1);
    rb_define_singleton_method(mod, name, singleton_m, -1);
}

/*
 * Puts the replacements in place. Kernel's trap is a global function:
 * Kernel#trap, asked of Object (what every object calls), and Kernel.trap,
 * each replaced apart. Marked Ractor-safe, as Ruby's own are: else a trap
 * in a non-main Ractor would raise Ractor::UnsafeError. The Method objects
 * they call are not shareable, but no Ruby code of another Ractor reaches
 * them: the C call only reads them, and a trap there returns and raises as
 * without rbtrace (spec/e2e/ractors_spec.rb, the same probe run with and
 * without rbtrace). $VERBOSE is off
 * meanwhile: Ruby would warn "method redefined".
 */
void rbtrace_inplace_install(void)
{
    ID trap = rb_intern("trap");
    VALUE signal = rb_path2class("Signal"); /* Ruby exports no rb_mSignal */
    VALUE verbose = ruby_verbose;

    ruby_verbose = Qfalse;
#ifdef HAVE_RB_EXT_RACTOR_SAFE
    rb_ext_ractor_safe(true);
#endif
    if (rb_method_basic_definition_p(rb_cObject, trap)) {
        inplace_instance_original(&inplace_kernel_trap, rb_mKernel, "trap");
        rb_define_private_method(rb_mKernel, "trap", inplace_kernel_trap_m, -1);
    }
    if (rb_method_basic_definition_p(rb_singleton_class(rb_mKernel), trap)) {
        inplace_singleton_original(&inplace_kernel_s_trap, rb_mKernel, "trap");
        rb_define_singleton_method(rb_mKernel, "trap", inplace_kernel_s_trap_m, -1);
    }
    inplace_module_function(signal, "trap", &inplace_signal_trap, inplace_signal_trap_m,
                            &inplace_signal_s_trap, inplace_signal_s_trap_m);
    inplace_module_function(rb_mProcess, "daemon", &inplace_process_daemon,
                            inplace_process_daemon_m, &inplace_process_s_daemon,
                            inplace_process_s_daemon_m);
#ifdef HAVE_RB_EXT_RACTOR_SAFE
    rb_ext_ractor_safe(false);
#endif
    ruby_verbose = verbose;
}
