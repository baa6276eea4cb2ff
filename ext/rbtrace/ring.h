/*
 * ring.h - a byte ring buffer for one producer and one consumer thread.
 *
 * The producer is whichever Ruby thread holds the GVL (so producers never
 * run at once); the consumer is the writer pthread. Neither locks: head is
 * written only by the producer, tail only by the consumer, each published
 * with release/acquire ordering. Pushes are all-or-nothing, so the consumer
 * only ever sees whole events.
 *
 * A consumer with nothing to read may sleep until the producer wakes it
 * (rbtrace_ring_doze): it marks itself asleep and sets reserve_limit to 0,
 * so that the hot path's one compare sends the producer's next reserve to
 * rbtrace_ring_reserve_again, which wakes it (ring->wake); pushes wake it
 * as they publish. Nothing is added to the hot path's quick way.
 */
#ifndef RBTRACE_RING_H
#define RBTRACE_RING_H

#include <stddef.h>
#include <stdint.h>

/* head and tail live on cache lines of their own, and the producer keeps
 * its own copy of tail, re-read only when the ring looks full: otherwise
 * every event would bounce one cache line between the app's core and the
 * writer's. Two values the producer could work out each time are kept:
 * tail_seen, that copy, and reserve_limit, from it and the ring's end, so
 * that the hot path's test is one compare. Without the limit (a compare
 * against the ring's end and one against tail_seen) a -f call cost 18
 * more of rbtrace's instructions, 190.7 -> 208.7 (bench/RESULTS.md,
 * "The ring's cached limit"). */
#define RBTRACE_CACHE_LINE 64

struct rbtrace_ring {
    char *buf;          /* size bytes, or NULL when not allocated */
    size_t size;        /* a power of two */
    void (*wake)(void); /* ends the consumer's sleep (rbtrace_ring_doze); NULL: none */
    uint64_t head __attribute__((aligned(RBTRACE_CACHE_LINE)));
    /* bytes ever pushed (producer-owned) */
    uint64_t tail_seen; /* the producer's last look at tail */
    /* head may grow up to here without a wrap or an overrun: the lesser of
     * the ring's end and tail_seen a lap on (rbtrace_ring_reserve_again;
     * 0: work it out again). The consumer sets it to 0 as it dozes. */
    uint64_t reserve_limit;
    uint64_t tail __attribute__((aligned(RBTRACE_CACHE_LINE)));
    /* bytes ever consumed (consumer-owned) */
    int consumer_asleep __attribute__((aligned(RBTRACE_CACHE_LINE)));
    /* set by the consumer as it dozes, taken back by whichever of the two
     * clears it first (the producer then calls wake) */
    char pad[RBTRACE_CACHE_LINE - sizeof(int)];
};

/* Allocates size bytes (a power of two). Returns 0, or -1 with errno. */
int rbtrace_ring_init(struct rbtrace_ring *ring, size_t size);
void rbtrace_ring_free(struct rbtrace_ring *ring);

/* Producer: free bytes (at least; re-reads tail only when needed). */
static inline size_t rbtrace_ring_space(struct rbtrace_ring *ring, size_t want)
{
    size_t space = ring->size - (size_t)(ring->head - ring->tail_seen);

    if (space >= want) return space;
    ring->tail_seen = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
    return ring->size - (size_t)(ring->head - ring->tail_seen);
}

/* rbtrace_ring_reserve when the last limit is passed (ring.c). */
char *rbtrace_ring_reserve_again(struct rbtrace_ring *ring, size_t len);

/* Whether len bytes fit at the head within the last limit worked out
 * (rbtrace_ring_reserve). Never for an unallocated ring: its limit is 0. */
static inline int rbtrace_ring_fits_quick(const struct rbtrace_ring *ring, size_t len)
{
    /* A plain load, though the consumer may zero the limit as it dozes
     * (an aligned word: the old limit or 0, never a mix). An atomic one,
     * the same mov on x86, kept GCC from folding it into the compare: one
     * more instruction an event (bench/RESULTS.md, "The writer's doze"). */
    return ring->head + len <= ring->reserve_limit;
}

/* Where the next bytes go, once rbtrace_ring_fits_quick said they fit.
 * Apart from it, not one call that gives the place or NULL: the firehose's
 * way then tests no pointer (folded, a -f call cost 2 more instructions). */
static inline char *rbtrace_ring_at_head(const struct rbtrace_ring *ring)
{
    return ring->buf + (size_t)(ring->head & (ring->size - 1));
}

/* rbtrace_ring_reserve without a call: NULL also where the bytes may fit
 * but the limit must be worked out again first. */
static inline char *rbtrace_ring_reserve_quick(struct rbtrace_ring *ring, size_t len)
{
    return rbtrace_ring_fits_quick(ring, len) ? rbtrace_ring_at_head(ring) : NULL;
}

/* Producer, the hot path's way: where len bytes fit contiguously at the
 * head, to encode an event in place; NULL if they do not (the ring is
 * full, or they would wrap: push the event then). One compare, against a
 * limit worked out when it is passed: the lesser of the ring's end and
 * the tail last seen a lap on. Pushes only move head towards it, and the
 * consumer only moves the tail away, so the limit stays safe until
 * passed. rbtrace_ring_commit publishes the bytes. */
static inline char *rbtrace_ring_reserve(struct rbtrace_ring *ring, size_t len)
{
    char *at = rbtrace_ring_reserve_quick(ring, len);

    return at ? at : rbtrace_ring_reserve_again(ring, len);
}

/* Publishes len bytes written at rbtrace_ring_reserve's pointer. */
static inline void rbtrace_ring_commit(struct rbtrace_ring *ring, size_t len)
{
    __atomic_store_n(&ring->head, ring->head + len, __ATOMIC_RELEASE);
}

/* Appends len bytes, or nothing: returns 0, or -1 when they do not fit. */
int rbtrace_ring_push(struct rbtrace_ring *ring, const void *data, size_t len);

/* Consumer: bytes waiting to be read. */
size_t rbtrace_ring_used(const struct rbtrace_ring *ring);

/* Consumer: the readable bytes at the tail that are contiguous in memory. */
size_t rbtrace_ring_peek(const struct rbtrace_ring *ring, const char **data);

/* Consumer: releases n bytes returned by rbtrace_ring_peek. */
void rbtrace_ring_consume(struct rbtrace_ring *ring, size_t n);

/* Consumer, before a sleep that only ring->wake (or its timeout) ends:
 * marks it asleep, so that the producer's next reserve or push calls
 * ring->wake. Returns the bytes waiting: if any, it should not sleep (and
 * may leave the mark: rbtrace_ring_awake). One event may be missed: one
 * the producer is writing at a limit it read just before the doze, which
 * the consumer's next look (its next timeout) finds. */
size_t rbtrace_ring_doze(struct rbtrace_ring *ring);

/* Consumer, awake again: takes the mark back. */
void rbtrace_ring_awake(struct rbtrace_ring *ring);

#endif
