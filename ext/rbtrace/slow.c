/*
 * slow.c - --slow and --slowcpu: report the calls that took longer than a
 * threshold, with the nesting of the watched calls around them.
 *
 * Fed by the global call/return hook (trace.c). Each thread has a stack
 * of the watched calls it has open: a call pushes (class, method, start),
 * its return pops and, if it took at least the threshold, sends a SLOW
 * event with its depth. Only slow calls cost an event; every other call
 * costs a clock read and a push/pop. Calls that began before the attach
 * return onto an empty stack and are ignored.
 *
 * The VM fires a return for every call, also when an exception, throw or
 * break unwinds it, so calls and returns pair up on each thread. Fibers
 * interleave stacks on one thread: a return that does not match the top
 * frame is matched further down, and the frames above it are dropped.
 *
 * A thread's stack lives in a small object its Thread holds (a hidden
 * instance variable: no `@`, so instance_variables does not list it), freed
 * by the GC with the Thread: short-lived threads (one per Timeout.timeout
 * on 3.1) leave nothing behind, and there is no limit on their number. The
 * stack of the last thread seen is at hand; another thread's costs an
 * instance variable lookup. A session's end frees every stack's frames.
 * What is not watched (calls nested past SLOW_MAX_DEPTH, a frozen Thread,
 * no memory) is said once a session, with a notice.
 *
 * Time: CLOCK_MONOTONIC (the event's start), and with --slowcpu the
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID) for the duration.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "emit.h"
#include "slow.h"
#include "selector.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Deeper calls are counted, not stored (a runaway recursion). */
#define SLOW_MAX_DEPTH 10000

struct slow_frame {
    VALUE klass;
    ID mid;
    uint64_t start_ns;  /* CLOCK_MONOTONIC */
    uint64_t start_cpu; /* thread CPU time, with --slowcpu */
};

struct slow_stack {
    struct slow_stack *prev, *next; /* every stack alive (slow.stacks) */
    VALUE thread;                   /* its Thread, marked (and so pinned) */
    struct slow_frame *frames;
    uint32_t depth;  /* frames in use */
    uint32_t cap;    /* room in frames */
    uint32_t hidden; /* calls past SLOW_MAX_DEPTH, not stored */
};

/* One selector of --slow-methods: owner and method name, 0 for any. */
struct slow_filter {
    VALUE klass;
    ID mid;
};

static struct {
    int cpu;
    uint64_t threshold_ns;
    struct slow_filter filters[RBTRACE_SELECTORS_MAX];
    uint32_t n_filters;
    struct slow_stack *stacks; /* every stack alive, newest first */
    struct slow_stack *last;   /* the stack of the last event's thread */
    uint8_t said[3];           /* a SLOW_UNWATCHED_* notice was sent */
} slow;

/* Why calls went unwatched (slow_unwatched), each said once a session. */
enum { SLOW_UNWATCHED_DEEP, SLOW_UNWATCHED_THREAD, SLOW_UNWATCHED_MEMORY };

static ID id_slow_stack;

static uint64_t slow_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int slow_watched(VALUE klass, ID mid)
{
    uint32_t i;

    if (slow.n_filters == 0) return 1;
    for (i = 0; i < slow.n_filters; i++)
        if (rbtrace_selects(slow.filters[i].klass, slow.filters[i].mid, klass, mid)) return 1;
    return 0;
}

/* Says once a session why some calls are not watched: a notice from the
 * hook, which never waits (emit.c): if the ring has no room it is said at
 * a later such call. */
static void slow_unwatched(int why)
{
    int sent = -1;

    if (slow.said[why]) return;
    switch (why) {
    case SLOW_UNWATCHED_DEEP:
        sent = rbtrace_emit_message(RBTRACE_EV_NOTICE,
                                    "--slow: calls nested more than %d deep "
                                    "in a thread are not watched (the calls around them are)",
                                    SLOW_MAX_DEPTH);
        break;
    case SLOW_UNWATCHED_THREAD:
        sent = rbtrace_emit_message(RBTRACE_EV_NOTICE,
                                    "--slow: the calls of a thread are not "
                                    "watched: its Thread is frozen, or no memory was left for "
                                    "its state");
        break;
    case SLOW_UNWATCHED_MEMORY:
        sent = rbtrace_emit_message(RBTRACE_EV_NOTICE,
                                    "--slow: out of memory: calls nested "
                                    "deeper than %u in a thread are not watched",
                                    slow.last ? slow.last->cap : 0);
        break;
    }
    if (sent == 0) slow.said[why] = 1;
}

/* A stack goes with its Thread (the GC frees it), or at a session's end
 * with its frames only (slow_stack_clear). */
static void slow_stack_clear(struct slow_stack *s)
{
    free(s->frames);
    s->frames = NULL;
    s->depth = s->cap = s->hidden = 0;
}

static void slow_stack_mark(void *p)
{
    rb_gc_mark(((struct slow_stack *)p)->thread);
}

static void slow_stack_free(void *p)
{
    struct slow_stack *s = p;

    if (slow.last == s) slow.last = NULL;
    if (s->prev) s->prev->next = s->next;
    else if (slow.stacks == s) slow.stacks = s->next;
    if (s->next) s->next->prev = s->prev;
    slow_stack_clear(s);
    ruby_xfree(s);
}

static size_t slow_stack_memsize(const void *p)
{
    return sizeof(struct slow_stack) +
        ((const struct slow_stack *)p)->cap * sizeof(struct slow_frame);
}

static const rb_data_type_t slow_stack_type = {
    .wrap_struct_name = "rbtrace/slow_stack",
    .function = { .dmark = slow_stack_mark, .dfree = slow_stack_free, .dsize = slow_stack_memsize },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY
};

/* Makes thread's stack and hangs it on the thread (may allocate, and so
 * run the GC, which may free other stacks: slow.last is set after). */
static VALUE slow_stack_new_i(VALUE thread)
{
    struct slow_stack *s;
    /* No class: hidden, ObjectSpace does not hand it out. */
    VALUE obj = TypedData_Make_Struct(0, struct slow_stack, &slow_stack_type, s);

    s->thread = thread;
    rb_ivar_set(thread, id_slow_stack, obj);
    s->next = slow.stacks;
    if (s->next) s->next->prev = s;
    slow.stacks = s;
    return obj;
}

/* The current thread's stack, made on its first watched call (create);
 * NULL if it has none (or cannot have one: said). The Thread is marked by
 * its stack, so that it never moves and the cached compare holds. */
static struct slow_stack *slow_stack_of(VALUE thread, int create)
{
    VALUE obj;
    int state = 0;

    if (slow.last && slow.last->thread == thread) return slow.last;
    obj = rb_attr_get(thread, id_slow_stack);
    if (NIL_P(obj)) {
        if (!create) return NULL;
        if (OBJ_FROZEN(thread)) {
            slow_unwatched(SLOW_UNWATCHED_THREAD);
            return NULL;
        }
        obj = rb_protect(slow_stack_new_i, thread, &state);
        if (state) { /* NoMemoryError: ours, not the app's to see */
            rb_set_errinfo(Qnil);
            slow_unwatched(SLOW_UNWATCHED_THREAD);
            return NULL;
        }
    }
    return slow.last = RTYPEDDATA_DATA(obj);
}

static void slow_push(struct slow_stack *s, VALUE klass, ID mid)
{
    struct slow_frame *f;

    if (s->hidden || s->depth >= SLOW_MAX_DEPTH) {
        s->hidden++;
        slow_unwatched(SLOW_UNWATCHED_DEEP);
        return;
    }
    if (s->depth == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        /* malloc, not Ruby's allocator: no GC inside the hook. */
        struct slow_frame *grown = realloc(s->frames, cap * sizeof(*grown));
        if (!grown) {
            s->hidden++;
            slow_unwatched(SLOW_UNWATCHED_MEMORY);
            return;
        }
        s->frames = grown;
        s->cap = cap;
    }
    f = &s->frames[s->depth++];
    f->klass = klass;
    f->mid = mid;
    f->start_ns = rbtrace_clock_ns();
    f->start_cpu = slow.cpu ? slow_cpu_ns() : 0;
}

static void slow_pop(struct slow_stack *s, VALUE klass, ID mid)
{
    uint64_t now, start;
    uint32_t i;
    struct slow_frame *f;

    if (s->hidden) {
        s->hidden--;
        return;
    }
    /* The top frame, or the nearest one below it that matches. */
    for (i = s->depth; i > 0; i--) {
        if (s->frames[i - 1].klass == klass && s->frames[i - 1].mid == mid) break;
    }
    if (i == 0) return; /* a call that began before the attach */
    f = &s->frames[i - 1];
    s->depth = i - 1;
    now = slow.cpu ? slow_cpu_ns() : rbtrace_clock_ns();
    start = slow.cpu ? f->start_cpu : f->start_ns;
    if (now < start || now - start < slow.threshold_ns) return;
    rbtrace_emit_slow(klass, mid, f->start_ns, now - start, s->depth);
}

/* Out of line (the build uses LTO): inlined, its stack frame and stack
 * protector would be set up in every call of the firehose's hook too. */
__attribute__((noinline)) void rbtrace_slow_event(rb_event_flag_t ev, VALUE klass, ID mid)
{
    struct slow_stack *s;
    int call = (ev & (RUBY_EVENT_CALL | RUBY_EVENT_C_CALL)) != 0;

    if (!slow_watched(klass, mid)) return;
    s = slow_stack_of(rb_thread_current(), call);
    if (!s) return;
    if (call) slow_push(s, klass, mid);
    else slow_pop(s, klass, mid);
}

/* Starts watching: threshold, clock, and the selectors (an empty Array:
 * every method). A bad selector is reported and skipped. Returns 0 if
 * watching started (the caller installs the hook), -1 if no selector could
 * be used (reported). */
int rbtrace_slow_start(uint64_t threshold_ns, int cpu, VALUE selectors)
{
    long i, n = RARRAY_LEN(selectors);

    rbtrace_slow_stop();
    slow.threshold_ns = threshold_ns;
    slow.cpu = cpu;
    for (i = 0; i < n && slow.n_filters < RBTRACE_SELECTORS_MAX; i++) {
        VALUE text = RARRAY_AREF(selectors, i), err = Qnil;
        struct rbtrace_selector sel;
        struct slow_filter *f;

        if (rbtrace_selector_parse(text, RBTRACE_SELECTOR_AS_IS, &sel, &err) != 0) {
            rbtrace_report_selector_error(text, err);
            continue;
        }
        if (!NIL_P(sel.exprs))
            rbtrace_emit_message(RBTRACE_EV_NOTICE,
                                 "%.*s: --slow-methods shows no trace "
                                 "expressions; the method is watched without them",
                                 (int)RSTRING_LEN(text), RSTRING_PTR(text));
        f = &slow.filters[slow.n_filters++];
        f->klass = sel.owner;
        f->mid = sel.mid;
    }
    if (n > 0 && slow.n_filters == 0) {
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "no --slow-methods selector could be used: "
                             "slow calls are not watched");
        return -1;
    }
    return 0;
}

/* Forgets every frame and selector. The stacks stay with their threads,
 * empty (a few words each), until the threads are gone. */
void rbtrace_slow_stop(void)
{
    struct slow_stack *s;

    for (s = slow.stacks; s; s = s->next) slow_stack_clear(s);
    slow.last = NULL;
    slow.n_filters = 0;
    memset(slow.said, 0, sizeof(slow.said));
}

/* The filters compare classes by address: keep them alive and pinned
 * (a method name's ID needs nothing: rbtrace_method_id_of).
 * Stack frames hold only classes the filters or the running calls keep
 * alive; they are compared, never dereferenced. */
void rbtrace_slow_mark(void)
{
    uint32_t i;

    for (i = 0; i < slow.n_filters; i++) rb_gc_mark(slow.filters[i].klass);
}

void Init_rbtrace_slow(VALUE mod)
{
    (void)mod;
    /* No `@`: a Thread's instance_variables do not list it. */
    id_slow_stack = rb_intern("__rbtrace_slow_stack__");
}
