/*
 * clock_tsc.h - TSC ticks to CLOCK_MONOTONIC nanoseconds, checking the TSC
 * as it goes. This part only computes, from readings it is given: clock.c
 * reads the clocks and decides whether the TSC may be used at all, and
 * test/c/test_clock.c feeds it readings of TSCs that jump, go back and
 * change rate. How it works: clock.c's header comment.
 */
#ifndef RBTRACE_CLOCK_TSC_H
#define RBTRACE_CLOCK_TSC_H

#include <stdint.h>

/* How often the anchor is renewed, and the least time a rate is measured
 * over: a reading pair is off by up to ~100 ns, 1e-6 of 100 ms. */
#define RBTRACE_CLOCK_PERIOD_NS 100000000ull
#define RBTRACE_CLOCK_CALIBRATE_NS 10000000ull
/* The longest time a rate is measured over: after that (an app that was
 * not traced for a while) it is measured afresh. */
#define RBTRACE_CLOCK_RATE_MAX_NS 1000000000ull
/* Jumps of the TSC after which it is not used any more. */
#define RBTRACE_CLOCK_JUMPS_MAX 3

struct rbtrace_clock {
    /* The hot path's. */
    uint64_t mult;         /* ns per TSC tick, 32.32 fixed point; 0: not measured */
    uint64_t period_ticks; /* ticks after the anchor that it is renewed; 0
                               while mult is (no tick converts then) */
    uint64_t anchor_tsc;   /* the conversion's origin in both clocks */
    uint64_t anchor_ns;
    /* The slow path's. */
    uint64_t last_ns;  /* no stamp is given before this */
    uint64_t real_tsc; /* where the measure of the rate began */
    uint64_t real_ns;
    int jumps;      /* jumps of the TSC seen */
    int tsc_usable; /* the TSC may stamp events */
};

/* The arithmetic needs 128-bit products: on 64-bit targets (the TSC is
 * read on x86-64 only, RBTRACE_HAVE_TSC). */
#ifdef __SIZEOF_INT128__
/* Whether tsc converts with the current anchor (the hot path's test; a
 * rate not measured has no period). */
static inline int rbtrace_clock_fresh(const struct rbtrace_clock *c, uint64_t tsc)
{
    return tsc - c->anchor_tsc < c->period_ticks;
}

static inline uint64_t rbtrace_clock_ns_at(const struct rbtrace_clock *c, uint64_t tsc)
{
    return c->anchor_ns + (uint64_t)(((unsigned __int128)(tsc - c->anchor_tsc) * c->mult) >> 32);
}

/* Starts the measure of the rate at (tsc, ns); usable: whether the TSC
 * may be used at all. */
void rbtrace_clock_tsc_start(struct rbtrace_clock *c, int usable, uint64_t tsc, uint64_t ns);

/* Whether the rate is still being measured at ns (the stamps are then
 * clock_gettime's, through rbtrace_clock_fallback). */
int rbtrace_clock_calibrating(const struct rbtrace_clock *c, uint64_t ns);

/* A clock_gettime stamp, never before one given earlier. */
uint64_t rbtrace_clock_fallback(struct rbtrace_clock *c, uint64_t ns);

/* The slow path, given both clocks read at one instant: measures the rate,
 * renews the anchor, or finds that the TSC jumped. Returns the stamp. */
uint64_t rbtrace_clock_tsc_renew(struct rbtrace_clock *c, uint64_t tsc, uint64_t ns);
#endif

#endif
