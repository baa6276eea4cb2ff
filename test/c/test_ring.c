/*
 * test_ring.c - the event ring (ext/rbtrace/ring.c) on its own: pushes
 * are all-or-nothing, bytes come out in order across the wrap-around, the
 * producer sees freed space only after consume, a dozing consumer is
 * woken by the producer's next reserve or push (once), and one producer
 * thread with one consumer thread move a long stream intact.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "check.h"
#include "ring.h"

static void test_init(void)
{
    struct rbtrace_ring r;

    CHECK(rbtrace_ring_init(&r, 1000) == -1); /* not a power of two */
    CHECK(rbtrace_ring_init(&r, 0) == -1);
    CHECK(rbtrace_ring_init(&r, 64) == 0);
    CHECK(rbtrace_ring_space(&r, 64) == 64);
    rbtrace_ring_free(&r);
    CHECK(r.buf == NULL);
    CHECK(rbtrace_ring_push(&r, "x", 1) == -1); /* freed: nothing fits */
}

static void test_all_or_nothing_and_wrap(void)
{
    struct rbtrace_ring r;
    const char *data;
    char out[64];
    size_t n, got = 0;

    CHECK(rbtrace_ring_init(&r, 16) == 0);
    CHECK(rbtrace_ring_push(&r, "0123456789", 10) == 0);
    CHECK(rbtrace_ring_push(&r, "abcdefg", 7) == -1); /* 6 free: refused whole */
    CHECK(rbtrace_ring_used(&r) == 10);
    n = rbtrace_ring_peek(&r, &data);
    CHECK(n == 10 && memcmp(data, "0123456789", 10) == 0);
    rbtrace_ring_consume(&r, 8);
    CHECK(rbtrace_ring_push(&r, "abcdefghijkl", 12) == 0); /* wraps around */
    while ((n = rbtrace_ring_peek(&r, &data)) > 0) {
        memcpy(out + got, data, n);
        got += n;
        rbtrace_ring_consume(&r, n);
    }
    CHECK(got == 14 && memcmp(out, "89abcdefghijkl", 14) == 0);
    CHECK(rbtrace_ring_space(&r, 16) == 16);
    rbtrace_ring_free(&r);
}

/* The hot path's in-place writes: contiguous room at the head, or NULL
 * where an event would wrap or the ring is full; committed bytes come out
 * like pushed ones, and room comes back as the consumer reads. */
static void test_reserve(void)
{
    struct rbtrace_ring r;
    const char *data;
    char *at;

    CHECK(rbtrace_ring_init(&r, 16) == 0);
    at = rbtrace_ring_reserve(&r, 4);
    CHECK(at == r.buf);
    memcpy(at, "wxyz", 4);
    CHECK(rbtrace_ring_used(&r) == 0); /* not published before the commit */
    rbtrace_ring_commit(&r, 3);
    CHECK(rbtrace_ring_used(&r) == 3);
    CHECK(rbtrace_ring_push(&r, "0123456789", 10) == 0); /* head at 13 */
    CHECK(rbtrace_ring_reserve(&r, 3) == r.buf + 13);
    CHECK(rbtrace_ring_reserve(&r, 4) == NULL); /* would wrap */
    CHECK(rbtrace_ring_peek(&r, &data) == 13 && memcmp(data, "wxy0123456789", 13) == 0);
    CHECK(rbtrace_ring_push(&r, "abc", 3) == 0); /* full: head 16, tail 0 */
    CHECK(rbtrace_ring_reserve(&r, 1) == NULL);
    rbtrace_ring_consume(&r, 5);                 /* tail 5 */
    CHECK(rbtrace_ring_reserve(&r, 5) == r.buf); /* the next lap */
    CHECK(rbtrace_ring_reserve(&r, 6) == NULL);  /* past the tail */
    memcpy(rbtrace_ring_reserve(&r, 2), "AB", 2);
    rbtrace_ring_commit(&r, 2); /* head 18 */
    CHECK(rbtrace_ring_reserve(&r, 3) == r.buf + 2);
    CHECK(rbtrace_ring_reserve(&r, 4) == NULL);
    rbtrace_ring_consume(&r, 11); /* everything up to the lap */
    CHECK(rbtrace_ring_peek(&r, &data) == 2 && memcmp(data, "AB", 2) == 0);
    CHECK(rbtrace_ring_reserve(&r, 14) == r.buf + 2); /* to the ring's end */
    CHECK(rbtrace_ring_reserve(&r, 15) == NULL);
    rbtrace_ring_free(&r);
    CHECK(rbtrace_ring_space(&r, 1) == 0); /* freed: no room to ask for */
    CHECK(rbtrace_ring_reserve(&r, 1) == NULL);
}

static int wakes;
static void count_wake(void)
{
    wakes++;
}

/* The consumer's doze: the producer's next reserve (its quick way refused
 * by the zeroed limit) or push wakes it, once per doze; a doze over bytes
 * already waiting says so; one taken back (awake) is not woken. */
static void test_doze(void)
{
    struct rbtrace_ring r;
    const char *data;
    char *at;

    CHECK(rbtrace_ring_init(&r, 64) == 0);
    r.wake = count_wake;
    wakes = 0;
    CHECK(rbtrace_ring_reserve(&r, 4) == r.buf); /* the limit worked out */
    CHECK(rbtrace_ring_fits_quick(&r, 4));
    CHECK(wakes == 0);
    CHECK(rbtrace_ring_doze(&r) == 0);
    CHECK(!rbtrace_ring_fits_quick(&r, 4)); /* the hot path's compare fails... */
    at = rbtrace_ring_reserve(&r, 4);       /* ...so the slow way wakes it */
    CHECK(at == r.buf && wakes == 1);
    memcpy(at, "abcd", 4);
    rbtrace_ring_commit(&r, 4);
    CHECK(rbtrace_ring_fits_quick(&r, 4)); /* its limit back */
    CHECK(rbtrace_ring_reserve(&r, 4) == r.buf + 4 && wakes == 1);
    CHECK(rbtrace_ring_push(&r, "ef", 2) == 0 && wakes == 1); /* awake: no wake */
    CHECK(rbtrace_ring_doze(&r) == 6);                        /* bytes wait: no sleep */
    rbtrace_ring_awake(&r);
    CHECK(rbtrace_ring_push(&r, "gh", 2) == 0 && wakes == 1);
    CHECK(rbtrace_ring_peek(&r, &data) == 8 && memcmp(data, "abcdefgh", 8) == 0);
    rbtrace_ring_consume(&r, 8);
    CHECK(rbtrace_ring_doze(&r) == 0);
    CHECK(rbtrace_ring_push(&r, "ij", 2) == 0 && wakes == 2); /* a push wakes it */
    CHECK(rbtrace_ring_push(&r, "kl", 2) == 0 && wakes == 2); /* once */
    CHECK(rbtrace_ring_reserve(&r, 4) != NULL && wakes == 2);
    rbtrace_ring_free(&r);
}

#define STREAM_BYTES (8u << 20)

static void *consume_stream(void *p)
{
    struct rbtrace_ring *r = p;
    uint32_t expect = 0;
    size_t total = 0;
    long bad = 0;

    while (total < STREAM_BYTES) {
        const char *data;
        size_t n = rbtrace_ring_peek(r, &data), i;
        for (i = 0; i < n; i++, total++)
            if ((unsigned char)data[i] != (unsigned char)(expect++ * 7)) bad++;
        rbtrace_ring_consume(r, n);
    }
    return (void *)bad;
}

static void test_two_threads(void)
{
    struct rbtrace_ring r;
    pthread_t consumer;
    uint32_t next = 0;
    void *bad;

    CHECK(rbtrace_ring_init(&r, 4096) == 0);
    CHECK(pthread_create(&consumer, NULL, consume_stream, &r) == 0);
    while (next < STREAM_BYTES) {
        unsigned char chunk[29];
        size_t len = 1 + next % 29, i;
        if (len > STREAM_BYTES - next) len = STREAM_BYTES - next;
        for (i = 0; i < len; i++) chunk[i] = (unsigned char)((next + i) * 7);
        if (rbtrace_ring_push(&r, chunk, len) == 0) next += (uint32_t)len;
    }
    CHECK(pthread_join(consumer, &bad) == 0);
    CHECK(bad == NULL);
    rbtrace_ring_free(&r);
}

int main(void)
{
    test_init();
    test_all_or_nothing_and_wrap();
    test_reserve();
    test_doze();
    test_two_threads();
    return check_report();
}
