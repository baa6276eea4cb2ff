/*
 * state.c - the bottom of the extension: its one global state struct, and
 * what every layer above needs of it (docs/DESIGN.md, "Layers"): which
 * thread runs (rbtrace_thread_id's M:N hook), rb_protect that lets a
 * thread die, waking the helper thread, whose thread's calls are rbtrace's
 * own.
 *
 * Waking the helper and forgetting a half-read command are the channel's
 * (channel.c), but the writer thread, the event encoder and the session
 * below it need them too: they are here, on the state they touch, so that
 * no layer calls up into the channel.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include <stdio.h>
#include <stdlib.h>

struct rbtrace_state rbtrace;
VALUE rbtrace_mRBTrace;
int rbtrace_mn_threads;
uint64_t rbtrace_mn_thread;

#ifdef RBTRACE_HAVE_MN_THREAD_HOOK
/* A Ruby thread took the GVL (RUBY_INTERNAL_THREAD_EVENT_RESUMED, on its
 * native thread, GVL held): it is the one whose events follow. Its
 * rb_thread_t, which stays in place for the thread's life (the Thread
 * object may be moved by GC.compact). */
static void rbtrace_thread_resumed(rb_event_flag_t event,
                                   const rb_internal_thread_event_data_t *data, void *unused)
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
void rbtrace_mn_threads_init(void)
{
#ifdef RBTRACE_HAVE_MN_THREAD_HOOK
    const char *mn = getenv("RUBY_MN_THREADS");

    if (mn == NULL || atoi(mn) <= 0) return;
    rbtrace_mn_thread = (uint64_t)(uintptr_t)RTYPEDDATA_GET_DATA(rb_thread_current());
    if (rb_internal_thread_add_event_hook(rbtrace_thread_resumed,
                                          RUBY_INTERNAL_THREAD_EVENT_RESUMED, NULL) == NULL) {
        fprintf(stderr,
                "rbtrace: cannot watch which Ruby thread runs (RUBY_MN_THREADS=1): traces "
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
 * VM is waiting for at exit alive, and the process hung. The caller turns
 * the exception into words for the client (docs/DESIGN.md, "Errors").
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

/* Wakes the helper thread from any thread (used by the writer too). */
void rbtrace_channel_wake(void)
{
    sem_post(&rbtrace.wake);
}

/* Forgets a half-read command: a new session starts afresh. */
void rbtrace_channel_reset_socket(void)
{
    rbtrace.command_len = 0;
    rbtrace.frame_header_len = 0;
    rbtrace.frame_len = 0;
    rbtrace.sock_readable = 0;
}

/* Whether the current thread is evaluating trace expressions. Out of
 * line: only reached while some thread evaluates (rbtrace_expr_call_p). */
__attribute__((noinline)) int rbtrace_evaluating(void)
{
    uint64_t self = rbtrace_thread_id();
    const struct rbtrace_evaluator *e;

    for (e = rbtrace.evaluators; e; e = e->next)
        if (e->thread == self) return 1;
    return 0;
}
