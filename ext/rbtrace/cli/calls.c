/*
 * calls.c - method names and per-thread call stacks for the formats
 * (calls.h). The same matching as the text renderer's (render.c): a
 * return closes the innermost open call of its method; calls opened
 * above it lost their returns and are dropped.
 */
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "cli.h"

#define CALLS_NAMES_MIN 64
#define CALLS_FRAMES_MIN 16
#define CALLS_THREADS_MIN 4

void calls_init(struct calls *c)
{
    memset(c, 0, sizeof(*c));
}

static void calls_free_frames(struct calls_thread *t, size_t from)
{
    size_t d;

    for (d = from; d < t->depth; d++) {
        free(t->frames[d].extra);
        t->frames[d].extra = NULL;
    }
    t->depth = from;
}

void calls_free(struct calls *c)
{
    size_t i;

    for (i = 0; i < c->names_cap; i++) free(c->names[i].text);
    free(c->names);
    for (i = 0; i < c->n_threads; i++) {
        calls_free_frames(&c->threads[i], 0);
        free(c->threads[i].frames);
    }
    free(c->threads);
    id_index_free(&c->thread_index);
    calls_init(c);
}

/* ---- names: open addressing, linear probing ---- */

static size_t calls_slot(const struct calls_name *names, size_t cap, uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ULL;
    size_t i = (size_t)(h ^ (h >> 32)) & (cap - 1);

    while (names[i].text && names[i].id != id) i = (i + 1) & (cap - 1);
    return i;
}

static int calls_rehash(struct calls *c, size_t cap)
{
    struct calls_name *names = calloc(cap, sizeof(*names));
    size_t i;

    if (!names) return CLI_ERR;
    for (i = 0; i < c->names_cap; i++)
        if (c->names[i].text) names[calls_slot(names, cap, c->names[i].id)] = c->names[i];
    free(c->names);
    c->names = names;
    c->names_cap = cap;
    return CLI_OK;
}

int calls_set_name(struct calls *c, uint64_t id, const char *text, size_t len)
{
    struct calls_name *slot;
    char *copy;

    if ((c->names_count + 1) * 2 > c->names_cap &&
        calls_rehash(c, c->names_cap ? c->names_cap * 2 : CALLS_NAMES_MIN) != CLI_OK)
        return CLI_ERR;
    copy = malloc(len + 1);
    if (!copy) return CLI_ERR;
    memcpy(copy, text, len);
    copy[len] = '\0';
    slot = &c->names[calls_slot(c->names, c->names_cap, id)];
    if (slot->text) free(slot->text); /* renamed: keep the latest */
    else c->names_count++;
    slot->id = id;
    slot->text = copy;
    slot->len = len;
    return CLI_OK;
}

const struct calls_name *calls_name(const struct calls *c, uint64_t id)
{
    const struct calls_name *n;

    if (!c->names_cap) return NULL;
    n = &c->names[calls_slot(c->names, c->names_cap, id)];
    return n->text ? n : NULL;
}

int calls_forget(struct calls *c, uint64_t id)
{
    size_t i;

    for (i = 0; i < c->names_cap; i++) {
        if (c->names[i].text && c->names[i].id < id) {
            free(c->names[i].text);
            c->names[i].text = NULL;
            c->names_count--;
        }
    }
    calls_drop_all(c);
    /* Open addressing: what stayed is placed again, in a table as large. */
    return c->names_count ? calls_rehash(c, c->names_cap) : CLI_OK;
}

/* ---- threads and stacks ---- */

long calls_thread(struct calls *c, uint64_t id, int *added)
{
    struct calls_thread *t;
    long found;

    *added = 0;
    if (c->n_threads && c->threads[c->last_thread].id == id) return (long)c->last_thread;
    if ((found = id_index_get(&c->thread_index, id, 0)) >= 0) {
        c->last_thread = (size_t)found;
        return found;
    }
    if (c->n_threads == c->threads_cap) {
        size_t cap = c->threads_cap ? c->threads_cap * 2 : CALLS_THREADS_MIN;
        t = realloc(c->threads, cap * sizeof(*t));
        if (!t) return -1;
        c->threads = t;
        c->threads_cap = cap;
    }
    if (id_index_put(&c->thread_index, id, 0, c->n_threads) != CLI_OK) return -1;
    t = &c->threads[c->n_threads];
    memset(t, 0, sizeof(*t));
    t->id = id;
    t->ordinal = (unsigned)c->n_threads + 1;
    c->last_thread = c->n_threads;
    *added = 1;
    return (long)c->n_threads++;
}

struct calls_frame *calls_push(struct calls *c, size_t ti, uint64_t method_id, uint64_t start_ns)
{
    struct calls_thread *t = &c->threads[ti];
    struct calls_frame *f;

    if (t->depth == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : CALLS_FRAMES_MIN;
        f = realloc(t->frames, cap * sizeof(*f));
        if (!f) return NULL;
        t->frames = f;
        t->cap = cap;
    }
    f = &t->frames[t->depth++];
    f->method_id = method_id;
    f->start_ns = start_ns;
    f->child_ns = 0;
    f->gvl_ns = 0;
    f->alloc = 0;
    f->node = 0;
    f->extra = NULL;
    f->extra_len = 0;
    return f;
}

struct calls_frame *calls_match(struct calls *c, size_t ti, uint64_t method_id)
{
    struct calls_thread *t = &c->threads[ti];
    size_t d;

    for (d = t->depth; d > 0; d--) {
        if (t->frames[d - 1].method_id == method_id) {
            size_t lost;

            /* The calls above it lost their returns: their GVL waits were in it. */
            for (lost = d; lost < t->depth; lost++)
                t->frames[d - 1].gvl_ns += t->frames[lost].gvl_ns;
            for (lost = d; lost < t->depth; lost++) t->frames[d - 1].alloc += t->frames[lost].alloc;
            calls_free_frames(t, d);
            return &t->frames[d - 1];
        }
    }
    return NULL;
}

void calls_pop(struct calls *c, size_t ti, uint64_t duration_ns)
{
    struct calls_thread *t = &c->threads[ti];
    uint64_t gvl_ns = t->depth ? t->frames[t->depth - 1].gvl_ns : 0;
    uint64_t alloc = t->depth ? t->frames[t->depth - 1].alloc : 0;

    calls_free_frames(t, t->depth - 1);
    if (t->depth) {
        t->frames[t->depth - 1].child_ns += duration_ns;
        t->frames[t->depth - 1].gvl_ns += gvl_ns;
        t->frames[t->depth - 1].alloc += alloc;
    }
}

void calls_add_alloc(struct calls *c, size_t ti, uint64_t count)
{
    struct calls_thread *t = &c->threads[ti];

    if (t->depth) t->frames[t->depth - 1].alloc += count;
}

void calls_add_gvl(struct calls *c, size_t ti, uint64_t wait_ns)
{
    struct calls_thread *t = &c->threads[ti];

    if (t->depth) t->frames[t->depth - 1].gvl_ns += wait_ns;
}

long calls_thread_known(const struct calls *c, uint64_t id)
{
    return id_index_get(&c->thread_index, id, 0);
}

void calls_drop_all(struct calls *c)
{
    size_t i;

    for (i = 0; i < c->n_threads; i++) calls_free_frames(&c->threads[i], 0);
}

void calls_split_name(const char *name, size_t len, size_t *class_len, size_t *method_off)
{
    size_t i = 0, nest = 0;

    /* An anonymous class or a singleton class is "#<...>": skip it whole. */
    if (len >= 2 && name[0] == '#' && name[1] == '<') {
        for (; i < len; i++) {
            if (name[i] == '<') nest++;
            else if (name[i] == '>' && --nest == 0) break;
        }
    }
    for (; i < len; i++) {
        if (name[i] == '#' || name[i] == '.') {
            *class_len = i;
            *method_off = i + 1;
            return;
        }
    }
    *class_len = 0;
    *method_off = 0;
}
