/*
 * slow.c - --slow and --slowcpu: report the calls that took longer than a
 * threshold, with the nesting of the watched calls around them.
 *
 * Fed by the global call/return hook (tracer.c). Each thread has a stack
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
 * Time: CLOCK_MONOTONIC (the event's start), and with --slowcpu the
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID) for the duration.
 */
#include "rbtrace.h"  /* first: ruby.h sets _GNU_SOURCE */
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Deeper calls are counted, not stored (a runaway recursion). */
#define SLOW_MAX_DEPTH 10000
/* Threads with a stack; calls of further threads are not watched. */
#define SLOW_MAX_THREADS 4096

struct slow_frame {
    VALUE klass;
    ID mid;
    uint64_t start_ns;     /* CLOCK_MONOTONIC */
    uint64_t start_cpu;    /* thread CPU time, with --slowcpu */
};

struct slow_stack {
    VALUE thread;
    struct slow_frame *frames;
    uint32_t depth;        /* frames in use */
    uint32_t cap;          /* room in frames */
    uint32_t hidden;       /* calls past SLOW_MAX_DEPTH, not stored */
};

/* One selector of --slow-methods: owner and method name, 0 for any. */
struct slow_filter {
    VALUE klass;
    ID mid;
};

static struct {
    int active;
    int cpu;
    uint64_t threshold_ns;
    struct slow_filter filters[RBTRACE_SELECTORS_MAX];
    uint32_t n_filters;
    struct slow_stack *stacks;
    uint32_t n_stacks, cap_stacks;
    struct slow_stack *last;   /* the stack of the last event's thread */
} slow;

static ID id_parse_selector;

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

/* The current thread's stack, made on its first watched call; NULL if
 * there is no room for another thread (malloc, not Ruby's allocator: this
 * runs inside the hook). */
static struct slow_stack *slow_stack_of(VALUE thread, int create)
{
    uint32_t i;

    if (slow.last && slow.last->thread == thread) return slow.last;
    for (i = 0; i < slow.n_stacks; i++) {
        if (slow.stacks[i].thread == thread) return slow.last = &slow.stacks[i];
    }
    if (!create || slow.n_stacks >= SLOW_MAX_THREADS) return NULL;
    if (slow.n_stacks == slow.cap_stacks) {
        uint32_t cap = slow.cap_stacks ? slow.cap_stacks * 2 : 16;
        struct slow_stack *grown = realloc(slow.stacks, cap * sizeof(*grown));
        if (!grown) return NULL;
        slow.stacks = grown;
        slow.cap_stacks = cap;
    }
    slow.last = &slow.stacks[slow.n_stacks++];
    memset(slow.last, 0, sizeof(*slow.last));
    slow.last->thread = thread;
    return slow.last;
}

static void slow_push(struct slow_stack *s, VALUE klass, ID mid)
{
    struct slow_frame *f;

    if (s->hidden || s->depth >= SLOW_MAX_DEPTH) {
        s->hidden++;
        return;
    }
    if (s->depth == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 64;
        struct slow_frame *grown = realloc(s->frames, cap * sizeof(*grown));
        if (!grown) {
            s->hidden++;
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
    if (i == 0) return;   /* a call that began before the attach */
    f = &s->frames[i - 1];
    s->depth = i - 1;
    now = slow.cpu ? slow_cpu_ns() : rbtrace_clock_ns();
    start = slow.cpu ? f->start_cpu : f->start_ns;
    if (now < start || now - start < slow.threshold_ns) return;
    if (rbtrace.in_expr) {
        /* Another thread evaluates trace expressions: count it (tracer.c). */
        rbtrace.lost++;
        return;
    }
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

static VALUE slow_parse_i(VALUE selector)
{
    return rb_funcall(rbtrace_mRBTrace, id_parse_selector, 1, selector);
}

/* Starts watching: threshold, clock, and the selectors (an empty Array:
 * every method). A bad selector is reported and skipped. Returns 1 if
 * watching started (the caller installs the hook). */
int rbtrace_slow_start(uint64_t threshold_ns, int cpu, VALUE selectors)
{
    long i, n = RARRAY_LEN(selectors);

    rbtrace_slow_stop();
    slow.threshold_ns = threshold_ns;
    slow.cpu = cpu;
    for (i = 0; i < n && slow.n_filters < RBTRACE_SELECTORS_MAX; i++) {
        VALUE sel = RARRAY_AREF(selectors, i), parsed, err = Qnil;
        struct slow_filter *f;
        int state = 0;

        parsed = rbtrace_protect(slow_parse_i, sel, &state, &err);
        if (state) {
            rbtrace_report_selector_error(sel, err);
            continue;
        }
        if (!NIL_P(RARRAY_AREF(parsed, 2)))
            rbtrace_emit_message(RBTRACE_EV_NOTICE, "%.*s: --slow-methods shows no trace "
                                 "expressions; the method is watched without them",
                                 (int)RSTRING_LEN(sel), RSTRING_PTR(sel));
        f = &slow.filters[slow.n_filters++];
        f->klass = NIL_P(RARRAY_AREF(parsed, 0)) ? 0 : RARRAY_AREF(parsed, 0);
        f->mid = rbtrace_method_id_of(RARRAY_AREF(parsed, 1));
    }
    if (n > 0 && slow.n_filters == 0) {
        rbtrace_emit_message(RBTRACE_EV_ERROR, "no --slow-methods selector could be used: "
                             "slow calls are not watched");
        return 0;
    }
    slow.active = 1;
    return 1;
}

int rbtrace_slow_active(void)
{
    return slow.active;
}

/* Forgets every stack and selector. */
void rbtrace_slow_stop(void)
{
    uint32_t i;

    for (i = 0; i < slow.n_stacks; i++) free(slow.stacks[i].frames);
    free(slow.stacks);
    slow.stacks = NULL;
    slow.n_stacks = slow.cap_stacks = 0;
    slow.last = NULL;
    slow.n_filters = 0;
    slow.active = 0;
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
    id_parse_selector = rb_intern("parse_selector");
}
