/*
 * id_index.c - a map from a two-number key to an index (id_index.h):
 * open addressing, linear probing, grown to keep it at most half full.
 */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "id_index.h"

#define ID_INDEX_MIN 8

void id_index_init(struct id_index *x)
{
    memset(x, 0, sizeof(*x));
}

void id_index_free(struct id_index *x)
{
    free(x->slots);
    id_index_init(x);
}

/* The slot of key (a, b) in slots (cap > 0): its own, or the free one
 * where it goes. */
static size_t id_index_slot(const struct id_index_slot *slots, size_t cap, uint64_t a, uint64_t b)
{
    uint64_t h = (a * 0x9e3779b97f4a7c15ULL) ^ (b * 0xc2b2ae3d27d4eb4fULL);
    size_t mask = cap - 1, i = (size_t)(h ^ (h >> 29)) & mask;

    while (slots[i].value && (slots[i].a != a || slots[i].b != b)) i = (i + 1) & mask;
    return i;
}

long id_index_get(const struct id_index *x, uint64_t a, uint64_t b)
{
    size_t i;

    if (!x->cap) return -1;
    i = id_index_slot(x->slots, x->cap, a, b);
    return x->slots[i].value ? (long)(x->slots[i].value - 1) : -1;
}

/* slots twice as big (or made), every key placed again. */
static int id_index_grow(struct id_index *x)
{
    size_t cap = x->cap ? x->cap * 2 : ID_INDEX_MIN, i;
    struct id_index_slot *slots = calloc(cap, sizeof(*slots));

    if (!slots) return CLI_ERR;
    for (i = 0; i < x->cap; i++)
        if (x->slots[i].value)
            slots[id_index_slot(slots, cap, x->slots[i].a, x->slots[i].b)] = x->slots[i];
    free(x->slots);
    x->slots = slots;
    x->cap = cap;
    return CLI_OK;
}

int id_index_put(struct id_index *x, uint64_t a, uint64_t b, size_t value)
{
    struct id_index_slot *s;

    if ((x->count + 1) * 2 > x->cap && id_index_grow(x) != CLI_OK) return CLI_ERR;
    s = &x->slots[id_index_slot(x->slots, x->cap, a, b)];
    s->a = a;
    s->b = b;
    s->value = value + 1;
    x->count++;
    return CLI_OK;
}
