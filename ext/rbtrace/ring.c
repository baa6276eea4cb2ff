/*
 * ring.c - the single-producer single-consumer byte ring (see ring.h).
 * No Ruby here: unit-tested on its own.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "ring.h"

int rbtrace_ring_init(struct rbtrace_ring *ring, size_t size)
{
    if (size == 0 || (size & (size - 1)) != 0) {
        errno = EINVAL;
        return -1;
    }
    /* Pages of its own, not malloc's: malloc would keep a freed megabyte in
     * its heap (its mmap threshold rises once a large block is freed), and
     * an app must get back what a session took when it ends. */
    ring->buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring->buf == MAP_FAILED) {
        ring->buf = NULL;
        return -1;
    }
    ring->size = size;
    ring->head = ring->tail = ring->tail_seen = ring->reserve_limit = 0;
    ring->consumer_asleep = 0;
    ring->wake = NULL; /* the consumer's to set */
    return 0;
}

void rbtrace_ring_free(struct rbtrace_ring *ring)
{
    /* munmap fails only for a bad range, which ours never is. */
    if (ring->buf) (void)munmap(ring->buf, ring->size);
    ring->buf = NULL;
    ring->size = 0;
    ring->head = ring->tail = ring->tail_seen = ring->reserve_limit = 0;
    ring->consumer_asleep = 0;
}

/*
 * Producer, after it published bytes or a new limit: wakes a consumer that
 * dozes. The fence orders that store before the look at the mark, as
 * rbtrace_ring_doze orders its mark before its look at head: one of the
 * two sees the other (a consumer that missed the bytes is woken; one that
 * saw them did not sleep).
 */
static void ring_wake_consumer(struct rbtrace_ring *ring)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&ring->consumer_asleep, __ATOMIC_RELAXED) &&
        __atomic_exchange_n(&ring->consumer_asleep, 0, __ATOMIC_ACQ_REL) && ring->wake)
        ring->wake();
}

size_t rbtrace_ring_doze(struct rbtrace_ring *ring)
{
    __atomic_store_n(&ring->consumer_asleep, 1, __ATOMIC_SEQ_CST);
    /* The producer's next reserve goes the slow way, which wakes us. */
    __atomic_store_n(&ring->reserve_limit, 0, __ATOMIC_SEQ_CST);
    return (size_t)(__atomic_load_n(&ring->head, __ATOMIC_SEQ_CST) - ring->tail);
}

void rbtrace_ring_awake(struct rbtrace_ring *ring)
{
    __atomic_store_n(&ring->consumer_asleep, 0, __ATOMIC_RELAXED);
}

char *rbtrace_ring_reserve_again(struct rbtrace_ring *ring, size_t len)
{
    uint64_t lap_end, limit;

    if (ring->buf == NULL) return NULL;
    ring->tail_seen = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
    lap_end = (ring->head & ~(uint64_t)(ring->size - 1)) + ring->size;
    limit = ring->tail_seen + ring->size;
    if (lap_end < limit) limit = lap_end;
    __atomic_store_n(&ring->reserve_limit, limit, __ATOMIC_RELAXED);
    /* Here too after a doze zeroed the limit: the consumer sleeps. */
    ring_wake_consumer(ring);
    /* From the limit worked out, which a doze meanwhile may have zeroed. */
    return ring->head + len <= limit ? rbtrace_ring_at_head(ring) : NULL;
}

int rbtrace_ring_push(struct rbtrace_ring *ring, const void *data, size_t len)
{
    size_t at, first;

    if (ring->buf == NULL || len > rbtrace_ring_space(ring, len)) return -1;
    at = (size_t)(ring->head & (ring->size - 1));
    first = ring->size - at;
    if (first > len) first = len;
    memcpy(ring->buf + at, data, first);
    memcpy(ring->buf, (const char *)data + first, len - first);
    /* Publish the bytes only once they are all in place. */
    __atomic_store_n(&ring->head, ring->head + len, __ATOMIC_RELEASE);
    ring_wake_consumer(ring);
    return 0;
}

size_t rbtrace_ring_used(const struct rbtrace_ring *ring)
{
    return (size_t)(__atomic_load_n(&ring->head, __ATOMIC_ACQUIRE) - ring->tail);
}

size_t rbtrace_ring_peek(const struct rbtrace_ring *ring, const char **data)
{
    uint64_t head = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
    size_t at = (size_t)(ring->tail & (ring->size - 1));
    size_t avail = (size_t)(head - ring->tail);

    if (avail > ring->size - at) avail = ring->size - at;
    *data = ring->buf + at;
    return avail;
}

void rbtrace_ring_consume(struct rbtrace_ring *ring, size_t n)
{
    __atomic_store_n(&ring->tail, ring->tail + n, __ATOMIC_RELEASE);
}
