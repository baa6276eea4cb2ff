/*
 * threadnames.c - --thread-names: each traced thread's name (Thread#name)
 * sent as a THREAD_NAME event before its calls
 * (docs/DESIGN.md, "Thread names").
 *
 * Asked for by the THREAD_NAMES command (the client's --thread-names, and
 * its json and chrome formats). Until then nothing here runs: the hot path
 * pays nothing, as the flag sits in the event flags' word, which the
 * firehose's way compares whole anyway (rbtrace_firehose_only) and which
 * the general way reads a byte of, in the cache line it reads already.
 *
 * Once asked, a call event of a thread other than the last call event's
 * (the chain's, codec.h) comes here first: that is each thread's first
 * event of the trace, and its first after another thread ran, a few per
 * GVL hand-off. Here the thread's name is read and compared with the one
 * sent last for this thread; a new or changed name is sent. A name changed
 * while its thread keeps the GVL shows at its next turn. There is no C API
 * for a thread's name: it is read by Ruby's own Thread#name. Where the
 * thread's class has it as Ruby defined it (rb_method_basic_definition_p)
 * it is called; else the one there was when rbtrace was loaded
 * (Thread.instance_method(:name)) is called on the thread (bind_call), so
 * that an app's later redefinition or prepended module is not run, and a
 * trace of Thread#name does not see rbtrace's reads. Protected all the
 * same: a redefinition made before rbtrace was loaded is what was taken.
 *
 * What was sent is kept in a small direct-mapped table keyed by thread id
 * (a name's hash, no copy, no allocation): a thread whose slot another
 * took is named again, which is harmless. A dead thread's id reused by a
 * new thread is the same thread to the client: its name is sent again if
 * it differs.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "emit.h"
#include "threadnames.h"
#include <string.h>

/* Slots of the table of names sent: far more than the threads of a
 * Puma or Sidekiq process; a collision costs one THREAD_NAME again. */
#define THREAD_NAMES_SLOTS 512

struct thread_name_sent {
    uint64_t thread; /* rbtrace_thread_id, 0 for a free slot */
    uint64_t hash;   /* of the name sent (thread_name_hash) */
};

static struct thread_name_sent sent[THREAD_NAMES_SLOTS];
static ID id_name, id_bind_call;
static VALUE thread_name_method; /* Thread#name, as rbtrace was loaded */

/*
 * The threads reading their name now, each node on its reader's stack: a
 * wrapper on Thread#name (-m Thread#name) must not bring a thread back here
 * while it reads. Per thread, not one flag: Ruby checks interrupts as
 * Thread#name returns, where a timer's switch lets other threads run, and
 * their calls must be named all the same (with one flag, a thread's first
 * calls went out unnamed meanwhile: json's thread line had no "name").
 * Unlinked by address (readers end in any order), even when the read ends
 * by a Thread#kill (rb_ensure): a stale node would keep its thread unnamed.
 */
struct thread_name_reader {
    uint64_t thread;
    struct thread_name_reader *next;
};
static struct thread_name_reader *readers;

static int thread_name_reading(uint64_t thread)
{
    const struct thread_name_reader *r;

    for (r = readers; r; r = r->next)
        if (r->thread == thread) return 1;
    return 0;
}

static VALUE thread_name_reader_unlink(VALUE me)
{
    struct thread_name_reader **p;

    for (p = &readers; *p; p = &(*p)->next) {
        if (*p == (struct thread_name_reader *)me) {
            *p = (*p)->next;
            break;
        }
    }
    return Qnil;
}

/* FNV-1a of the name, with its length so that "" differs from none at all
 * (a fresh slot's hash, 0, is no name's). */
static uint64_t thread_name_hash(const char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ len;
    size_t i;

    for (i = 0; i < len; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h | 1;
}

static struct thread_name_sent *thread_name_slot(uint64_t thread)
{
    uint64_t h = thread * 0x9e3779b97f4a7c15ULL;

    return &sent[(h >> 40) & (THREAD_NAMES_SLOTS - 1)];
}

static VALUE thread_name_get_i(VALUE thread)
{
    /* Ruby's own, as in nearly every app: called as it is (bind_call costs
     * ~250 ns more, at each of a thread's turns) */
    if (rb_method_basic_definition_p(CLASS_OF(thread), id_name))
        return rb_funcall(thread, id_name, 0);
    /* redefined, or prepended to (an app's module, or rbtrace's own
     * wrapper for -m Thread#name): the one taken at load */
    return rb_funcall(thread_name_method, id_bind_call, 1, thread);
}

/* The current thread's name: a String, or nil (none, or Thread#name
 * failed). A raise inside is swallowed (a redefinition taken at load); a
 * Thread#kill or exit goes on (rbtrace_protect). */
static VALUE thread_name_current_i(VALUE thread)
{
    int state = 0;
    VALUE name = rbtrace_protect(thread_name_get_i, thread, &state, NULL);

    if (state) return Qnil;
    return RB_TYPE_P(name, T_STRING) ? name : Qnil;
}

/* The same, as thread (rbtrace_thread_id) reading: its node linked
 * meanwhile (readers). */
static VALUE thread_name_current(uint64_t thread)
{
    struct thread_name_reader me = { thread, readers };

    readers = &me;
    return rb_ensure(thread_name_current_i, rb_thread_current(), thread_name_reader_unlink,
                     (VALUE)&me);
}

void rbtrace_thread_names_start(void)
{
    memset(sent, 0, sizeof(sent));
    /* The next call event is encoded in full, and so comes here: the
     * thread that runs now is named too. */
    rbtrace.chain.thread_id = 0;
    rbtrace.thread_names = 1;
}

/* A new session names every thread again (--profile's start). */
void rbtrace_thread_names_forget(void)
{
    memset(sent, 0, sizeof(sent));
}

void rbtrace_thread_names_stop(void)
{
    rbtrace.thread_names = 0;
}

/* In a forked child only the forking thread lives on: another's read never
 * ends there, and its node would keep a new thread of the same id unnamed.
 * (The forking thread is not inside a read; were it, its unlink finds
 * nothing.) */
void rbtrace_thread_names_after_fork(void)
{
    readers = NULL;
}

/* Called by the emitters of call events (emit_call.h, emit.c) with the GVL,
 * for a thread that is not the chain's. */
__attribute__((noinline)) void rbtrace_thread_name_note(uint64_t thread)
{
    struct thread_name_sent *slot;
    const char *p = "";
    size_t len = 0;
    uint64_t hash;
    VALUE name;

    if (!rbtrace.attached || thread_name_reading(thread)) return;
    name = thread_name_current(thread);
    if (name != Qnil) {
        p = RSTRING_PTR(name);
        len = (size_t)RSTRING_LEN(name);
        if (len > RBTRACE_THREAD_NAME_MAX) len = RBTRACE_THREAD_NAME_MAX;
    }
    hash = thread_name_hash(p, len);
    slot = thread_name_slot(thread);
    if (slot->thread == thread && slot->hash == hash) return;
    if (rbtrace_emit_thread_name(thread, p, len) != 0) return; /* again next time */
    RB_GC_GUARD(name);
    slot->thread = thread;
    slot->hash = hash;
}

/* --profile's drain (profile.c), with the GVL on rbtrace's helper thread:
 * thread's name (thread: rbtrace_thread_id of it) sent if new or changed,
 * so that the samples' threads are named as the calls' are. */
void rbtrace_thread_name_of(VALUE thread, uint64_t id)
{
    struct thread_name_sent *slot;
    const char *p = "";
    size_t len = 0;
    uint64_t hash;
    int state = 0;
    VALUE name;

    if (!rbtrace.attached || id == 0) return;
    name = rbtrace_protect(thread_name_get_i, thread, &state, NULL);
    if (state || !RB_TYPE_P(name, T_STRING)) name = Qnil;
    if (name != Qnil) {
        p = RSTRING_PTR(name);
        len = (size_t)RSTRING_LEN(name);
        if (len > RBTRACE_THREAD_NAME_MAX) len = RBTRACE_THREAD_NAME_MAX;
    }
    hash = thread_name_hash(p, len);
    slot = thread_name_slot(id);
    if (slot->thread == id && slot->hash == hash) return;
    if (rbtrace_emit_thread_name(id, p, len) != 0) return; /* again next time */
    RB_GC_GUARD(name);
    slot->thread = id;
    slot->hash = hash;
}

void Init_rbtrace_threadnames(VALUE mod)
{
    (void)mod;
    id_name = rb_intern("name");
    id_bind_call = rb_intern("bind_call");
    rb_gc_register_address(&thread_name_method);
    thread_name_method = rb_funcall(rb_cThread, rb_intern("instance_method"), 1,
                                    ID2SYM(rb_intern("name")));
}
