/*
 * clock.h - the events' time stamps (GVL held), in CLOCK_MONOTONIC ns: the
 * TSC where it can be trusted, inline (clock.c, clock_tsc.h).
 */
#ifndef RBTRACE_CLOCK_H
#define RBTRACE_CLOCK_H

#include <ruby.h>
#include <stdint.h>
#include "clock_tsc.h"

/* The TSC, where the compiler can read it (clock.c decides if it may). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <x86intrin.h>
#define RBTRACE_HAVE_TSC 1
#endif

/* clock_gettime(CLOCK_MONOTONIC), any thread. */
uint64_t rbtrace_now_ns(void);

extern struct rbtrace_clock rbtrace_clock;
uint64_t rbtrace_clock_renew(void);
void rbtrace_clock_init(void);
void Init_rbtrace_clock(VALUE mod);

static inline uint64_t rbtrace_clock_ns(void)
{
#ifdef RBTRACE_HAVE_TSC
    uint64_t tsc = __rdtsc();

    if (rbtrace_clock_fresh(&rbtrace_clock, tsc)) return rbtrace_clock_ns_at(&rbtrace_clock, tsc);
#endif
    return rbtrace_clock_renew();
}

/* rbtrace_clock_ns without a call. Returns the times it read: 1 (in *now),
 * or 0 (not a failure) where it needs a call (the anchor is due, or there
 * is no TSC). */
static inline int rbtrace_clock_ns_quick(uint64_t *now)
{
#ifdef RBTRACE_HAVE_TSC
    uint64_t tsc = __rdtsc();

    if (rbtrace_clock_fresh(&rbtrace_clock, tsc)) {
        *now = rbtrace_clock_ns_at(&rbtrace_clock, tsc);
        return 1;
    }
#endif
    (void)now;
    return 0;
}

#endif
