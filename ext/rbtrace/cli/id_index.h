/*
 * id_index.h - a map from a key of two 64-bit numbers to an index (an
 * array position), by open addressing: the formats find a thread by its id
 * (calls.c), --convert by its [PID] and [tN] (convert.c), once a line, so
 * a trace of many threads is read in linear time.
 */
#ifndef RBTRACE_CLI_ID_INDEX_H
#define RBTRACE_CLI_ID_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct id_index_slot {
    uint64_t a, b; /* the key */
    size_t value;  /* the index + 1; 0: a free slot */
};

struct id_index {
    struct id_index_slot *slots;
    size_t cap; /* a power of two, at least twice count; 0 before the first put */
    size_t count;
};

/* An empty index: all zero ({0} or memset) is one too. */
void id_index_init(struct id_index *x);
void id_index_free(struct id_index *x);

/* The value of key (a, b), or -1 when it is not there. */
long id_index_get(const struct id_index *x, uint64_t a, uint64_t b);

/* Adds key (a, b) (not there yet) with value. CLI_OK, or CLI_ERR out of
 * memory (the index unchanged). */
int id_index_put(struct id_index *x, uint64_t a, uint64_t b, size_t value);

#endif
