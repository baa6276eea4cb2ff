/*
 * ring.h - a byte ring buffer for one producer and one consumer thread.
 *
 * The producer is whichever Ruby thread holds the GVL (so producers never
 * run at once); the consumer is the writer pthread. Neither locks: head is
 * written only by the producer, tail only by the consumer, each published
 * with release/acquire ordering. Pushes are all-or-nothing, so the consumer
 * only ever sees whole events.
 */
#ifndef RBTRACE_RING_H
#define RBTRACE_RING_H

#include <stddef.h>
#include <stdint.h>

struct rbtrace_ring {
    char *buf;          /* size bytes, or NULL when not allocated */
    size_t size;        /* a power of two */
    uint64_t head;      /* bytes ever pushed (producer-owned) */
    uint64_t tail;      /* bytes ever consumed (consumer-owned) */
};

/* Allocates size bytes (a power of two). Returns 0, or -1 with errno. */
int rbtrace_ring_init(struct rbtrace_ring *ring, size_t size);
void rbtrace_ring_free(struct rbtrace_ring *ring);

/* Free bytes, as the producer sees them. */
size_t rbtrace_ring_space(const struct rbtrace_ring *ring);

/* Appends len bytes, or nothing: returns 0, or -1 when they do not fit. */
int rbtrace_ring_push(struct rbtrace_ring *ring, const void *data, size_t len);

/* Consumer: bytes waiting to be read. */
size_t rbtrace_ring_used(const struct rbtrace_ring *ring);

/* Consumer: the readable bytes at the tail that are contiguous in memory. */
size_t rbtrace_ring_peek(const struct rbtrace_ring *ring, const char **data);

/* Consumer: releases n bytes returned by rbtrace_ring_peek. */
void rbtrace_ring_consume(struct rbtrace_ring *ring, size_t n);

#endif
