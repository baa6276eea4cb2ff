/*
 * calls.h - what the json, chrome and folded formats (format.h) share:
 * method names by id, and per thread the stack of open calls, matched
 * with their returns as the text renderer (render.c) matches them.
 *
 * Pure bookkeeping: no output. Each format keeps, per method, the name as
 * it writes it (escaped its own way), and may hang on each open call a
 * number (a folded stack's node) and bytes (a json call's expression
 * values), freed with the call.
 *
 * The formats that write each event as it comes (json, chrome) share one
 * walk of the events, calls_walk_event: it keeps the stacks and calls the
 * format's emit functions (struct calls_emit), which only write.
 */
#ifndef RBTRACE_CLI_CALLS_H
#define RBTRACE_CLI_CALLS_H

#include <stddef.h>
#include <stdint.h>
#include "cli.h"
#include "codec.h"
#include "id_index.h"
#include "format.h"

struct calls_frame {
    uint64_t method_id;
    uint64_t start_ns;
    uint64_t child_ns; /* time spent in the calls it made (for self time) */
    uint64_t gvl_ns;   /* --gvl: its thread's GVL waits inside it, its callees' too */
    uint64_t alloc;    /* --alloc: objects its thread allocated inside it, callees' too */
    uint32_t node;     /* the format's */
    char *extra;       /* the format's, freed with the frame; or NULL */
    size_t extra_len;
};

struct calls_thread {
    uint64_t id;      /* the target's thread id */
    unsigned ordinal; /* 1-based, in order of first appearance */
    struct calls_frame *frames;
    size_t depth, cap;
};

/* A method's name as the format writes it; text NULL for a free slot. */
struct calls_name {
    uint64_t id;
    char *text;
    size_t len;
};

struct calls {
    struct calls_name *names;
    size_t names_cap; /* a power of two, or 0 */
    size_t names_count;
    struct calls_thread *threads;
    size_t n_threads, threads_cap;
    struct id_index thread_index; /* thread id -> its index in threads */
    size_t last_thread;           /* the thread of the last event (a cache) */
    uint64_t last_time_ns;        /* the latest time any event carried */
};

void calls_init(struct calls *c);
void calls_free(struct calls *c);

/* Keeps text[0, len) (copied) as method id's name. CLI_OK or CLI_ERR (memory). */
int calls_set_name(struct calls *c, uint64_t id, const char *text, size_t len);

/* Method id's name, NULL if the target never named it. */
const struct calls_name *calls_name(const struct calls *c, uint64_t id);

/* Forgets the names of ids below id (FORGET) and every open call. */
int calls_forget(struct calls *c, uint64_t id);

/* The index of thread id, added if new (*added set); -1 when out of memory. */
long calls_thread(struct calls *c, uint64_t id, int *added);

/* Opens a call on thread ti; the frame, or NULL when out of memory. */
struct calls_frame *calls_push(struct calls *c, size_t ti, uint64_t method_id, uint64_t start_ns);

/*
 * The innermost open call of method_id on thread ti, or NULL (a return
 * with no call: we attached mid-call, or events were lost). The calls
 * above it lost their returns: they are dropped. The frame stays valid
 * until calls_pop.
 */
struct calls_frame *calls_match(struct calls *c, size_t ti, uint64_t method_id);

/* Closes the innermost call of thread ti (the one calls_match found),
 * which lasted duration_ns: counted in its caller's child time. */
void calls_pop(struct calls *c, size_t ti, uint64_t duration_ns);

/* --gvl: thread ti waited wait_ns for the GVL, inside its innermost open
 * call (if any); a call's waits go to its caller as it returns. */
void calls_add_gvl(struct calls *c, size_t ti, uint64_t wait_ns);

/* --alloc: thread ti allocated count objects, inside its innermost open
 * call (if any); a call's objects go to its caller as it returns. */
void calls_add_alloc(struct calls *c, size_t ti, uint64_t count);

/* The index of thread id, or -1 if it was never seen (nothing added). */
long calls_thread_known(const struct calls *c, uint64_t id);

/* Drops every open call (events lost: their returns may be among them). */
void calls_drop_all(struct calls *c);

/* Where a method's name ("Foo#bar", "Foo::Bar.baz", "#<Class:0x1>#x")
 * splits into its class and method: *class_len bytes of class (0: none),
 * the method from *method_off. */
void calls_split_name(const char *name, size_t len, size_t *class_len, size_t *method_off);

/* ---- the walk json and chrome share ---- */

/*
 * What a format writes, one function a kind of output; f is the format
 * (its struct starts with struct format). Each returns CLI_OK, or CLI_ERR
 * with f's errstr set (format_fail).
 */
struct calls_emit {
    /* Thread t was first seen: its line or track name. */
    int (*thread)(struct format *f, const struct calls_thread *t);
    /* METHOD: keeps the name as the format writes it (calls_set_name). */
    int (*method)(struct format *f, const struct rbtrace_event *ev);
    /* CALL_ARGS with expressions: their text, kept on frame->extra. */
    int (*args)(struct format *f, struct calls_frame *frame, const struct rbtrace_event *ev);
    /* A call of thread t returned after dur_ns: frame is still on t. */
    int (*call)(struct format *f, const struct calls_thread *t, const struct calls_frame *frame,
                uint64_t dur_ns);
    /* SLOW, GC, RAISE and GVL, as they come (their time noted). */
    int (*slow)(struct format *f, const struct rbtrace_event *ev);
    int (*gc)(struct format *f, const struct rbtrace_event *ev);
    int (*raise)(struct format *f, const struct rbtrace_event *ev);
    int (*gvl)(struct format *f, const struct rbtrace_event *ev);
    /* LOST, once the open calls (which may have lost their returns) are dropped. */
    int (*lost)(struct format *f, const struct rbtrace_event *ev);
    /* --alloc's ALLOC_SITE, or NULL for a format that leaves the sites out. */
    int (*alloc_site)(struct format *f, const struct rbtrace_event *ev);
    /* THREAD_NAME (--thread-names), or NULL: the format shows no names. */
    int (*thread_name)(struct format *f, const struct rbtrace_event *ev);
};

/* Notes an event's time: last_time_ns is the latest. */
static inline void calls_note_time(struct calls *c, uint64_t time_ns)
{
    if (time_ns > c->last_time_ns) c->last_time_ns = time_ns;
}

/* The index of thread id, added if new (emit_thread writing it first);
 * -1 (f's errstr set) when out of memory or emit_thread failed. */
static inline long
calls_walk_thread(struct calls *c, struct format *f,
                  int (*emit_thread)(struct format *f, const struct calls_thread *t), uint64_t id)
{
    int added;
    long ti = calls_thread(c, id, &added);

    if (ti < 0) return format_fail(f, "out of memory");
    if (added && emit_thread(f, &c->threads[ti]) != CLI_OK) return -1;
    return ti;
}

static inline int calls_walk_call(struct calls *c, struct format *f, const struct calls_emit *emit,
                                  const struct rbtrace_event *ev)
{
    long ti = calls_walk_thread(c, f, emit->thread, ev->thread_id);
    struct calls_frame *frame;

    if (ti < 0) return CLI_ERR;
    frame = calls_push(c, (size_t)ti, ev->method_id, ev->time_ns);
    if (!frame) return format_fail(f, "out of memory");
    if (ev->type == RBTRACE_EV_CALL_ARGS && ev->n_exprs) return emit->args(f, frame, ev);
    return CLI_OK;
}

/* A return closes the innermost open call of its method (none: we
 * attached mid-call, or events were lost, and it is passed over). */
static inline int calls_walk_return(struct calls *c, struct format *f,
                                    const struct calls_emit *emit, const struct rbtrace_event *ev)
{
    long ti = calls_walk_thread(c, f, emit->thread, ev->thread_id);
    struct calls_frame *frame;
    uint64_t dur;

    if (ti < 0) return CLI_ERR;
    frame = calls_match(c, (size_t)ti, ev->method_id);
    if (!frame) return CLI_OK;
    dur = ev->time_ns > frame->start_ns ? ev->time_ns - frame->start_ns : 0;
    if (emit->call(f, &c->threads[ti], frame, dur) != CLI_OK) return CLI_ERR;
    calls_pop(c, (size_t)ti, dur);
    return format_check_io(f);
}

/*
 * The format's event (format_ops.event) for the formats of struct
 * calls_emit: keeps c and calls emit's functions. CLI_OK or CLI_ERR.
 * Inline: the client's hot path; each format passes its own constant
 * emit, so the compiler calls (or inlines) the format's functions directly.
 */
static inline int calls_walk_event(struct calls *c, struct format *f, const struct calls_emit *emit,
                                   const struct rbtrace_event *ev)
{
    switch (ev->type) {
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_CALL_ARGS:
        calls_note_time(c, ev->time_ns);
        return calls_walk_call(c, f, emit, ev);
    case RBTRACE_EV_RETURN:
        calls_note_time(c, ev->time_ns);
        return calls_walk_return(c, f, emit, ev);
    case RBTRACE_EV_METHOD:
        return emit->method(f, ev);
    case RBTRACE_EV_FORGET:
        return calls_forget(c, ev->number) == CLI_OK ? CLI_OK : format_fail(f, "out of memory");
    case RBTRACE_EV_LOST:
        calls_drop_all(c);
        return emit->lost(f, ev);
    case RBTRACE_EV_SLOW:
        calls_note_time(c, ev->time_ns + ev->duration_ns);
        return emit->slow(f, ev);
    case RBTRACE_EV_GC:
        calls_note_time(c, ev->time_ns + ev->duration_ns);
        return emit->gc(f, ev);
    case RBTRACE_EV_RAISE:
        calls_note_time(c, ev->time_ns);
        return emit->raise(f, ev);
    case RBTRACE_EV_GVL:
        calls_note_time(c, ev->time_ns + ev->duration_ns);
        return emit->gvl(f, ev);
    case RBTRACE_EV_ALLOC: {
        /* --alloc: to the calls open on its thread (a call's objects go to
         * its caller as it returns); a thread with no open call, to none. */
        long ti = calls_thread_known(c, ev->thread_id);

        if (ti >= 0) calls_add_alloc(c, (size_t)ti, ev->count);
        return CLI_OK;
    }
    case RBTRACE_EV_ALLOC_SITE:
        return emit->alloc_site ? emit->alloc_site(f, ev) : CLI_OK;
    case RBTRACE_EV_THREAD_NAME:
        return emit->thread_name ? emit->thread_name(f, ev) : CLI_OK;
    default:
        return CLI_OK;
    }
}

#endif
