/*
 * format_folded.c - --format folded: collapsed stacks, as flamegraph.pl,
 * inferno and speedscope read them, written when the trace ends:
 *
 *   Foo#run;Foo#step;Hash#key? 1234
 *
 * one line per distinct stack (callers first, ';' between frames), the
 * weight the self time spent in that stack in microseconds (rounded; a
 * stack under half a microsecond says 0). The threads' stacks are merged.
 *
 * The stacks are a tree of nodes (caller, method) -> node, found through a
 * hash table: each call adds its self time to its node when it returns,
 * so the memory is one node per distinct stack, not per call.
 *
 * --slow events carry their depth among the slow calls but not their
 * callers, and come innermost first: per thread they wait, as subtrees,
 * until their caller (one level shallower) comes, and join the tree when
 * the trace ends. GC and raises have no place in a stack: not written.
 */
#define _GNU_SOURCE /* fwrite_unlocked */
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "cli.h"
#include "escape.h"
#include "format.h"

#define FOLDED_NODES_MIN 256

struct folded_node {
    uint32_t parent; /* 0: a root frame (node 0 is the root itself) */
    uint64_t method_id;
    uint64_t self_ns;
};

/* A slow call waiting for its caller: a subtree of folded_slow nodes. */
struct folded_slow {
    uint64_t method_id;
    uint64_t self_ns;
    uint64_t depth;
    uint32_t first_child, next_sibling; /* indexes + 1; 0: none */
};

/* Per thread (by calls.h's index): the slow subtrees waiting, roots only. */
struct folded_waiting {
    uint32_t *roots;     /* indexes into slow, innermost last */
    uint64_t *durations; /* each root's duration */
    size_t n, cap;
};

struct format_folded {
    struct format base;
    struct calls calls;
    struct folded_node *nodes;
    size_t n_nodes, nodes_cap;
    uint32_t *index;  /* hash of (parent, method) -> node; 0: free */
    size_t index_cap; /* a power of two */
    struct folded_slow *slow;
    size_t n_slow, slow_cap;
    struct folded_waiting *waiting;
    size_t n_waiting;
    uint32_t *path; /* scratch: a stack's nodes, innermost first */
    size_t path_cap;
};

static int folded_oom(struct format_folded *f)
{
    return format_fail(&f->base, "out of memory");
}

/* ---- the tree of stacks ---- */

static size_t folded_hash(uint32_t parent, uint64_t method_id, size_t cap)
{
    uint64_t h = (method_id ^ ((uint64_t)parent << 32 | parent)) * 0x9e3779b97f4a7c15ULL;

    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static size_t folded_slot(const struct format_folded *f, uint32_t parent, uint64_t method_id)
{
    size_t i = folded_hash(parent, method_id, f->index_cap);

    while (f->index[i]) {
        const struct folded_node *n = &f->nodes[f->index[i]];
        if (n->parent == parent && n->method_id == method_id) break;
        i = (i + 1) & (f->index_cap - 1);
    }
    return i;
}

static int folded_grow(struct format_folded *f)
{
    size_t cap = f->nodes_cap ? f->nodes_cap * 2 : FOLDED_NODES_MIN, i;
    struct folded_node *nodes = realloc(f->nodes, cap * sizeof(*nodes));
    uint32_t *index;

    if (!nodes) return CLI_ERR;
    f->nodes = nodes;
    f->nodes_cap = cap;
    if (cap > UINT32_MAX / 2 || !(index = calloc(cap * 2, sizeof(*index)))) return CLI_ERR;
    free(f->index);
    f->index = index;
    f->index_cap = cap * 2; /* at most half full */
    for (i = 1; i < f->n_nodes; i++)
        f->index[folded_slot(f, f->nodes[i].parent, f->nodes[i].method_id)] = (uint32_t)i;
    return CLI_OK;
}

/* The node of method_id called from parent, made if new; 0 when out of memory. */
static uint32_t folded_node(struct format_folded *f, uint32_t parent, uint64_t method_id)
{
    struct folded_node *n;
    size_t slot;

    if (f->index_cap) {
        slot = folded_slot(f, parent, method_id);
        if (f->index[slot]) return f->index[slot];
    }
    if (f->n_nodes + 1 >= f->nodes_cap && folded_grow(f) != CLI_OK) return 0;
    slot = folded_slot(f, parent, method_id);
    n = &f->nodes[f->n_nodes];
    n->parent = parent;
    n->method_id = method_id;
    n->self_ns = 0;
    f->index[slot] = (uint32_t)f->n_nodes;
    return (uint32_t)f->n_nodes++;
}

/* ---- calls ---- */

static int folded_call(struct format_folded *f, const struct rbtrace_event *ev)
{
    int added;
    long ti = calls_thread(&f->calls, ev->thread_id, &added);
    struct calls_thread *t;
    struct calls_frame *frame;
    uint32_t parent, node;

    if (ti < 0) return folded_oom(f);
    t = &f->calls.threads[ti];
    parent = t->depth ? t->frames[t->depth - 1].node : 0;
    if (!(node = folded_node(f, parent, ev->method_id))) return folded_oom(f);
    if (!(frame = calls_push(&f->calls, (size_t)ti, ev->method_id, ev->time_ns)))
        return folded_oom(f);
    frame->node = node;
    return CLI_OK;
}

/* A call that lasted dur_ns ends: its self time goes to its node. */
static void folded_close(struct format_folded *f, size_t ti, struct calls_frame *frame,
                         uint64_t dur_ns)
{
    f->nodes[frame->node].self_ns += dur_ns > frame->child_ns ? dur_ns - frame->child_ns : 0;
    calls_pop(&f->calls, ti, dur_ns);
}

static int folded_return(struct format_folded *f, const struct rbtrace_event *ev)
{
    int added;
    long ti = calls_thread(&f->calls, ev->thread_id, &added);
    struct calls_frame *frame;

    if (ti < 0) return folded_oom(f);
    frame = calls_match(&f->calls, (size_t)ti, ev->method_id);
    if (frame)
        folded_close(f, (size_t)ti, frame,
                     ev->time_ns > frame->start_ns ? ev->time_ns - frame->start_ns : 0);
    return CLI_OK;
}

/* ---- slow calls ---- */

static struct folded_waiting *folded_waiting(struct format_folded *f, size_t ti)
{
    if (ti >= f->n_waiting) {
        size_t n = f->calls.threads_cap;
        struct folded_waiting *w = realloc(f->waiting, n * sizeof(*w));

        if (!w) return NULL;
        memset(w + f->n_waiting, 0, (n - f->n_waiting) * sizeof(*w));
        f->waiting = w;
        f->n_waiting = n;
    }
    return &f->waiting[ti];
}

/* SLOW: the slow calls deeper than it that wait on its thread are its
 * callees; it waits in turn for its caller. */
static int folded_slow(struct format_folded *f, const struct rbtrace_event *ev)
{
    int added;
    long ti = calls_thread(&f->calls, ev->thread_id, &added);
    struct folded_waiting *w;
    struct folded_slow *s;
    uint64_t children = 0;
    uint32_t me;

    if (ti < 0 || !(w = folded_waiting(f, (size_t)ti))) return folded_oom(f);
    if (f->n_slow == f->slow_cap) {
        size_t cap = f->slow_cap ? f->slow_cap * 2 : FOLDED_NODES_MIN;
        if (cap > UINT32_MAX - 1 || !(s = realloc(f->slow, cap * sizeof(*s)))) return folded_oom(f);
        f->slow = s;
        f->slow_cap = cap;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        uint32_t *roots = realloc(w->roots, cap * sizeof(*roots));
        uint64_t *durations;

        if (!roots) return folded_oom(f);
        w->roots = roots;
        if (!(durations = realloc(w->durations, cap * sizeof(*durations)))) return folded_oom(f);
        w->durations = durations;
        w->cap = cap;
    }
    me = (uint32_t)f->n_slow++;
    s = &f->slow[me];
    memset(s, 0, sizeof(*s));
    s->method_id = ev->method_id;
    s->depth = ev->depth;
    while (w->n && f->slow[w->roots[w->n - 1]].depth > ev->depth) {
        uint32_t child = w->roots[--w->n];

        children += w->durations[w->n];
        f->slow[child].next_sibling = s->first_child;
        s->first_child = child + 1;
    }
    s->self_ns = ev->duration_ns > children ? ev->duration_ns - children : 0;
    w->roots[w->n] = me;
    w->durations[w->n++] = ev->duration_ns;
    return CLI_OK;
}

/* A waiting subtree into the tree of stacks, under parent. */
static int folded_merge_slow(struct format_folded *f, uint32_t parent, uint32_t si)
{
    uint32_t node = folded_node(f, parent, f->slow[si].method_id), c;

    if (!node) return folded_oom(f);
    f->nodes[node].self_ns += f->slow[si].self_ns;
    for (c = f->slow[si].first_child; c; c = f->slow[c - 1].next_sibling)
        if (folded_merge_slow(f, node, c - 1) != CLI_OK) return CLI_ERR;
    return CLI_OK;
}

/* ---- events ---- */

static int folded_event(struct format *base, const struct rbtrace_event *ev)
{
    struct format_folded *f = (struct format_folded *)base;
    size_t n;

    switch (ev->type) {
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_CALL_ARGS:
        calls_note_time(&f->calls, ev->time_ns);
        return folded_call(f, ev);
    case RBTRACE_EV_RETURN:
        calls_note_time(&f->calls, ev->time_ns);
        return folded_return(f, ev);
    case RBTRACE_EV_METHOD:
        /* Stored escaped as text is (escape.h), and ';' as ',': a frame
         * holds no separator. Never forgotten (FORGET): the stacks that
         * name it are written at the end. */
        {
            char *esc = malloc((size_t)ev->text.len * ESCAPE_MAX_PER_BYTE + 1);
            char *p, *q;
            int rc;

            if (!esc) return folded_oom(f);
            n = escape_text(esc, ev->text.ptr, ev->text.len, 0);
            for (p = esc, q = esc + n; p < q && (p = memchr(p, ';', (size_t)(q - p))); p++)
                *p = ',';
            rc = calls_set_name(&f->calls, ev->method_id, esc, n);
            free(esc);
            return rc == CLI_OK ? CLI_OK : folded_oom(f);
        }
    case RBTRACE_EV_FORGET:
    case RBTRACE_EV_LOST:
        calls_drop_all(&f->calls);
        return CLI_OK;
    case RBTRACE_EV_SLOW:
        calls_note_time(&f->calls, ev->time_ns + ev->duration_ns);
        return folded_slow(f, ev);
    default:
        return CLI_OK;
    }
}

/* ---- the end ---- */

/* The frames of node, callers first, ';' between them. Iterative: a
 * recursion thousands of calls deep makes stacks as deep. */
static int folded_write_stack(struct format_folded *f, uint32_t node)
{
    const struct calls_name *name;
    size_t n = 0;

    for (; node; node = f->nodes[node].parent) {
        if (n == f->path_cap) {
            size_t cap = f->path_cap ? f->path_cap * 2 : 64;
            uint32_t *path = realloc(f->path, cap * sizeof(*path));
            if (!path) return folded_oom(f);
            f->path = path;
            f->path_cap = cap;
        }
        f->path[n++] = node;
    }
    while (n--) {
        name = calls_name(&f->calls, f->nodes[f->path[n]].method_id);
        if (name) fwrite_unlocked(name->text, 1, name->len, f->base.out);
        else fwrite_unlocked("(unknown)", 1, 9, f->base.out);
        if (n) fputc_unlocked(';', f->base.out);
    }
    return CLI_OK;
}

/* Calls still open count until the latest time seen; slow calls still
 * waiting for a caller are roots; then one line per stack. */
static int folded_finish(struct format *base)
{
    struct format_folded *f = (struct format_folded *)base;
    uint64_t end = f->calls.last_time_ns;
    char num[24];
    size_t i, j;

    for (i = 0; i < f->calls.n_threads; i++) {
        struct calls_thread *t = &f->calls.threads[i];

        while (t->depth) {
            struct calls_frame *frame = &t->frames[t->depth - 1];
            folded_close(f, i, frame, end > frame->start_ns ? end - frame->start_ns : 0);
        }
    }
    for (i = 0; i < f->n_waiting; i++)
        for (j = 0; j < f->waiting[i].n; j++)
            if (folded_merge_slow(f, 0, f->waiting[i].roots[j]) != CLI_OK) return CLI_ERR;
    for (i = 1; i < f->n_nodes; i++) {
        uint64_t us = (f->nodes[i].self_ns + 500) / 1000;
        size_t n = 0;
        char digits[20];

        if (folded_write_stack(f, (uint32_t)i) != CLI_OK) return CLI_ERR;
        num[n++] = ' ';
        j = 0;
        do digits[j++] = (char)('0' + us % 10);
        while (us /= 10);
        while (j) num[n++] = digits[--j];
        num[n++] = '\n';
        fwrite_unlocked(num, 1, n, base->out);
    }
    return format_check_io(base);
}

static void folded_destroy(struct format *base)
{
    struct format_folded *f = (struct format_folded *)base;
    size_t i;

    calls_free(&f->calls);
    free(f->nodes);
    free(f->index);
    free(f->slow);
    for (i = 0; i < f->n_waiting; i++) {
        free(f->waiting[i].roots);
        free(f->waiting[i].durations);
    }
    free(f->waiting);
    free(f->path);
    free(f);
}

static const struct format_ops format_folded_ops = {
    .event = folded_event,
    .finish = folded_finish,
    .destroy = folded_destroy,
};

struct format *format_folded_new(FILE *out, const struct format_opts *opts)
{
    struct format_folded *f = calloc(1, sizeof(*f));

    if (!f) return NULL;
    format_base_init(&f->base, &format_folded_ops, out, opts);
    calls_init(&f->calls);
    f->n_nodes = 1; /* node 0: the root, above every first frame */
    return &f->base;
}
