/*
 * allocwatch.c - --alloc: the objects the app allocates, counted per
 * thread (the client adds them to the traced calls open on that thread)
 * and per site (where, and of which class), from Ruby's NEWOBJ internal
 * event (docs/DESIGN.md, "Allocations").
 *
 * The hook runs inside Ruby's allocator, on the object just made, with
 * the GVL (and, 3.4, with GC disabled around it). It must not allocate a
 * Ruby object, nor call what might: it touches only C memory of its own
 * and the ring. Most calls only count down to the next sample (one object
 * in `sample`, at a random gap of 1 to 2*sample-1, so that a loop's
 * period cannot line up with it); a sampled object
 *  - adds `sample` to rbtrace_alloc_pending, the count of the thread that
 *    allocated last; when another thread allocates, the count so far goes
 *    out first as an ALLOC event of its thread (encoded in place, as the
 *    GVL hook's are). Every call event sends the pending count before
 *    itself (emit.h), so the objects of a call are between its CALL
 *    and its RETURN in the stream, as the client counts them;
 *  - finds its site: rb_profile_frames (made for profilers' signal-time
 *    use: it allocates nothing) into a buffer on the stack, the innermost
 *    frame with a line (a Ruby frame: a C method has none, its caller's
 *    line says where), and the object's class. The site is counted in a
 *    fixed table keyed by (frame, line, class). The frame and the class
 *    are VALUEs: marked, and so pinned, while the table holds them
 *    (rbtrace_alloc_mark), and named only at the detach, hook removed
 *    (rbtrace_alloc_report), into the ALLOC_SITE events.
 *
 * The class: at NEWOBJ time Ruby has set the object's flags and class,
 * not its contents. RBASIC_CLASS reads the class field, rb_class_real
 * walks from a singleton or include class to the real one; neither
 * allocates. The field is 0 for a hidden object (an internal buffer Ruby
 * may reveal later as a String or an Array): such an object is counted,
 * as "" (the client says "(hidden)"). T_IMEMO objects (the VM's own:
 * environments, caches) use the field for other data and, with T_ICLASS
 * (a module included somewhere), are not the app's objects: they are skipped (not counted; a sample that lands on
 * one is simply not taken, which leaves the counts of the others
 * unbiased). An object whose class changes later (a singleton class
 * added) is counted as its class at birth.
 *
 * rbtrace's own allocations (the helper thread, a command's thread, trace
 * expressions) are not counted. Ruby runs NEWOBJ hooks of the Ractor that
 * allocates: other Ractors' objects are not seen. The hook is removed at
 * detach, when the client goes away, and in a forked child
 * (rbtrace_trace_clear): Ruby then calls nothing of ours.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "allocwatch.h"
#include "emit.h"
#include <ruby/debug.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sites kept: far more than an app's hot allocation sites (a power of two).
 * A site that finds no slot within ALLOC_PROBES is counted as dropped. */
#define ALLOC_SITES 4096
#define ALLOC_PROBES 32
/* Frames read to find the innermost Ruby one. */
#define ALLOC_FRAMES 8
/* Sites sent at the detach, most first. */
#define ALLOC_REPORT_SITES 50
/* The most --alloc-sample may ask: beyond, almost nothing is seen. */
#define ALLOC_SAMPLE_MAX 1000000000ull

struct alloc_site {
    VALUE frame;    /* rb_profile_frames' (an iseq, or a C method's entry), or 0 */
    VALUE klass;    /* the object's real class, or 0 (hidden) */
    int line;       /* 0: no Ruby frame */
    uint64_t count; /* objects (sampled); 0: a free slot */
};

static struct {
    int hooked;
    uint64_t sample;    /* one object in sample counts, as sample */
    uint64_t countdown; /* objects to the next sample */
    uint64_t random;    /* xorshift64's state */
    uint64_t samples;   /* samples taken, ever (RBTrace.alloc_stats) */
    uint64_t dropped;   /* samples whose site found no slot */
    uint32_t n_used;
    uint32_t used[ALLOC_SITES]; /* indexes of the slots in use, for marking */
    struct alloc_site sites[ALLOC_SITES];
} alloc;

/* The gap to the next sample: 1 to 2*sample-1 objects, sample on average. */
static inline uint64_t alloc_gap(void)
{
    uint64_t x = alloc.random;

    if (alloc.sample <= 1) return 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    alloc.random = x;
    return 1 + x % (2 * alloc.sample - 1);
}

/* The object's class as the site names it; Qundef for the VM's own. */
static inline VALUE alloc_class_of(VALUE obj)
{
    VALUE klass;

    if (RB_SPECIAL_CONST_P(obj)) return Qundef;
    switch (RB_BUILTIN_TYPE(obj)) {
    case RUBY_T_IMEMO:
    case RUBY_T_ICLASS: /* a module's place in an ancestry: the VM's too */
    case RUBY_T_NONE:
        return Qundef;
    default:
        break;
    }
    klass = RBASIC_CLASS(obj);
    return klass ? rb_class_real(klass) : 0;
}

static inline uint32_t alloc_hash(VALUE frame, int line, VALUE klass)
{
    uint64_t h = ((uint64_t)frame >> 3) * 0x9E3779B97F4A7C15ull;

    h ^= ((uint64_t)klass >> 3) * 0xC2B2AE3D27D4EB4Full;
    h ^= (uint64_t)(unsigned)line * 0x165667B19E3779F9ull;
    return (uint32_t)(h >> 40) & (ALLOC_SITES - 1);
}

/* Counts n objects at (frame, line, klass). */
static void alloc_count_site(VALUE frame, int line, VALUE klass, uint64_t n)
{
    uint32_t i = alloc_hash(frame, line, klass), probe;

    for (probe = 0; probe < ALLOC_PROBES; probe++, i = (i + 1) & (ALLOC_SITES - 1)) {
        struct alloc_site *s = &alloc.sites[i];

        if (s->count == 0) {
            s->frame = frame;
            s->line = line;
            s->klass = klass;
            s->count = n;
            alloc.used[alloc.n_used++] = i;
            return;
        }
        if (s->frame == frame && s->line == line && s->klass == klass) {
            s->count += n;
            return;
        }
    }
    alloc.dropped++;
}

/* Where the current thread allocates: the innermost frame with a line. */
static void alloc_find_site(VALUE *frame, int *line)
{
    VALUE frames[ALLOC_FRAMES];
    int lines[ALLOC_FRAMES];
    int n = rb_profile_frames(0, ALLOC_FRAMES, frames, lines), i;

    *frame = n > 0 ? frames[0] : 0;
    *line = 0;
    for (i = 0; i < n; i++) {
        if (lines[i] > 0) {
            *frame = frames[i];
            *line = lines[i];
            return;
        }
    }
}

/* A sampled object: its thread's count, its site's. */
static void alloc_sampled(VALUE obj)
{
    uint64_t thread = rbtrace_thread_id();
    VALUE klass = alloc_class_of(obj), frame;
    int line;

    if (klass == Qundef || RBTRACE_OWN_CALL() || thread == rbtrace.helper_thread ||
        rbtrace_expr_call_p())
        return;
    alloc.samples++;
    if (thread != rbtrace_alloc_pending_thread && rbtrace_alloc_pending)
        rbtrace_emit_alloc_pending();
    rbtrace_alloc_pending_thread = thread;
    rbtrace_alloc_pending += alloc.sample;
    alloc_find_site(&frame, &line);
    alloc_count_site(frame, line, klass, alloc.sample);
}

/* The NEWOBJ hook (RUBY_EVENT_HOOK_FLAG_RAW_ARG): one compare for most
 * objects. */
static void alloc_newobj_i(VALUE unused, rb_trace_arg_t *arg)
{
    (void)unused;
    if (__builtin_expect(--alloc.countdown != 0, 1)) return;
    alloc.countdown = alloc_gap();
    alloc_sampled(rb_tracearg_object(arg));
}

/* Ruby calls a RAW_ARG hook with (data, trace arg) through the general
 * hook's type; the cast through void (*)(void) says so. */
#define ALLOC_HOOK ((rb_event_hook_func_t)(void (*)(void))alloc_newobj_i)

static void alloc_clear_sites(void)
{
    uint32_t i;

    for (i = 0; i < alloc.n_used; i++)
        memset(&alloc.sites[alloc.used[i]], 0, sizeof(alloc.sites[0]));
    alloc.n_used = 0;
    alloc.dropped = 0;
}

void rbtrace_alloc_start(uint64_t sample)
{
    if (sample == 0 || sample > ALLOC_SAMPLE_MAX) {
        rbtrace_emit_message(RBTRACE_EV_ERROR,
                             "--alloc: a sample of %llu objects is out of range "
                             "(1 to %llu): allocations are not counted",
                             (unsigned long long)sample, ALLOC_SAMPLE_MAX);
        return;
    }
    if (alloc.hooked) return;
    alloc_clear_sites();
    alloc.sample = sample;
    alloc.random = (rbtrace_now_ns() | 1) * 0x9E3779B97F4A7C15ull;
    if (alloc.random == 0) alloc.random = 1;
    alloc.countdown = alloc_gap();
    rbtrace_alloc_pending_thread = 0;
    rbtrace_alloc_pending = 0;
    rb_add_event_hook2(ALLOC_HOOK, RUBY_INTERNAL_EVENT_NEWOBJ, Qnil, RUBY_EVENT_HOOK_FLAG_RAW_ARG);
    alloc.hooked = 1;
}

/* Removes the hook; the sites stay until the report (or the next start). */
void rbtrace_alloc_stop(void)
{
    if (!alloc.hooked) return;
    rb_remove_event_hook(ALLOC_HOOK);
    alloc.hooked = 0;
    rbtrace_alloc_pending = 0;
}

int rbtrace_alloc_active(void)
{
    return alloc.hooked;
}

static int alloc_by_count(const void *a, const void *b)
{
    uint64_t x = alloc.sites[*(const uint32_t *)a].count,
             y = alloc.sites[*(const uint32_t *)b].count;

    return x < y ? 1 : x > y ? -1 : 0;
}

/* A class's name, without allocating for a named one. */
static size_t alloc_class_name(VALUE klass, char *out, size_t size)
{
    VALUE name;
    int n;

    if (!klass) return 0;
    name = rb_mod_name(klass);
    if (RB_TYPE_P(name, T_STRING))
        n = snprintf(out, size, "%.*s", (int)RSTRING_LEN(name), RSTRING_PTR(name));
    else n = snprintf(out, size, "#<Class:%p>", (void *)klass);
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

static void alloc_send_site(const struct alloc_site *s)
{
    char klass[256];
    size_t klass_len = alloc_class_name(s->klass, klass, sizeof(klass));
    VALUE path = s->frame ? rb_profile_frame_path(s->frame) : Qnil;
    VALUE label = s->frame ? rb_profile_frame_full_label(s->frame) : Qnil;
    int has_path = RB_TYPE_P(path, T_STRING) && s->line > 0, has_label = RB_TYPE_P(label, T_STRING);

    rbtrace_emit_alloc_site(s->count, klass, klass_len, has_path ? RSTRING_PTR(path) : "",
                            has_path ? (size_t)RSTRING_LEN(path) : 0,
                            has_path ? (uint64_t)s->line : 0, has_label ? RSTRING_PTR(label) : "",
                            has_label ? (size_t)RSTRING_LEN(label) : 0);
    RB_GC_GUARD(path);
    RB_GC_GUARD(label);
}

/*
 * At the detach, the hook removed (GVL held): the top sites as ALLOC_SITE
 * events if send, most first; then the table is emptied (nothing is kept
 * alive past the session).
 */
void rbtrace_alloc_report(int send)
{
    uint32_t order[ALLOC_SITES], i, n = alloc.n_used;

    if (send && n) {
        memcpy(order, alloc.used, n * sizeof(order[0]));
        qsort(order, n, sizeof(order[0]), alloc_by_count);
        for (i = 0; i < n && i < ALLOC_REPORT_SITES; i++) alloc_send_site(&alloc.sites[order[i]]);
        if (alloc.dropped)
            rbtrace_emit_message(RBTRACE_EV_NOTICE,
                                 "--alloc: %llu sampled objects were of sites "
                                 "beyond the %d the table holds: not among the sites",
                                 (unsigned long long)alloc.dropped, ALLOC_SITES);
    }
    alloc_clear_sites();
}

/* The sites' frames and classes: alive and in place while kept. */
void rbtrace_alloc_mark(void)
{
    uint32_t i;

    for (i = 0; i < alloc.n_used; i++) {
        const struct alloc_site *s = &alloc.sites[alloc.used[i]];

        if (s->frame) rb_gc_mark(s->frame);
        if (s->klass) rb_gc_mark(s->klass);
    }
}

/*
 * call-seq: RBTrace.alloc_stats -> [hooked, samples, sites]
 *
 * Whether the NEWOBJ hook is installed, the objects it has sampled in
 * this process (ever), and the sites it keeps now. For the specs: after a
 * detach the count stays still.
 */
static VALUE alloc_stats_m(VALUE self)
{
    (void)self;
    return rb_ary_new_from_args(3, alloc.hooked ? Qtrue : Qfalse, ULL2NUM(alloc.samples),
                                UINT2NUM(alloc.n_used));
}

void Init_rbtrace_allocwatch(VALUE mod)
{
    rb_define_singleton_method(mod, "alloc_stats", alloc_stats_m, 0);
}
