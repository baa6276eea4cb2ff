/*
 * calls.h - what the json, chrome and folded formats (format.h) share:
 * method names by id, and per thread the stack of open calls, matched
 * with their returns as the text renderer (render.c) matches them.
 *
 * Pure bookkeeping: no output. Each format keeps, per method, the name as
 * it writes it (escaped its own way), and may hang on each open call a
 * number (a folded stack's node) and bytes (a json call's expression
 * values), freed with the call.
 */
#ifndef RBTRACE_CLI_CALLS_H
#define RBTRACE_CLI_CALLS_H

#include <stddef.h>
#include <stdint.h>

struct calls_frame {
    uint64_t method_id;
    uint64_t start_ns;
    uint64_t child_ns;         /* time spent in the calls it made (for self time) */
    uint64_t gvl_ns;           /* --gvl: its thread's GVL waits inside it, its callees' too */
    uint64_t alloc;            /* --alloc: objects its thread allocated inside it, callees' too */
    uint32_t node;             /* the format's */
    char *extra;               /* the format's, freed with the frame; or NULL */
    size_t extra_len;
};

struct calls_thread {
    uint64_t id;               /* the target's thread id */
    unsigned ordinal;          /* 1-based, in order of first appearance */
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
    size_t names_cap;          /* a power of two, or 0 */
    size_t names_count;
    struct calls_thread *threads;
    size_t n_threads, threads_cap;
    size_t last_thread;        /* the thread of the last event (a cache) */
    uint64_t last_time_ns;     /* the latest time any event carried */
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

/* Notes an event's time: last_time_ns is the latest. */
static inline void calls_note_time(struct calls *c, uint64_t time_ns)
{
    if (time_ns > c->last_time_ns) c->last_time_ns = time_ns;
}

#endif
