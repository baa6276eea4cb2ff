/*
 * clock_tsc.c - the slow path of the events' clock (clock_tsc.h): measuring
 * the TSC's rate, renewing the anchor, telling a TSC that jumped.
 */
#include "clock_tsc.h"

#ifdef __SIZEOF_INT128__

void rbtrace_clock_tsc_start(struct rbtrace_clock *c, int usable, uint64_t tsc, uint64_t ns)
{
    c->tsc_usable = usable;
    c->real_tsc = tsc;
    c->real_ns = ns;
}

int rbtrace_clock_calibrating(const struct rbtrace_clock *c, uint64_t ns)
{
    return !c->mult && ns - c->real_ns < RBTRACE_CLOCK_CALIBRATE_NS;
}

uint64_t rbtrace_clock_fallback(struct rbtrace_clock *c, uint64_t ns)
{
    if (ns < c->last_ns) return c->last_ns;
    c->last_ns = ns;
    return ns;
}

/* Measures the rate afresh from (tsc, ns): clock_gettime's stamps until
 * then, none before the latest the hot path may have given. */
static uint64_t clock_measure_again(struct rbtrace_clock *c, uint64_t tsc, uint64_t ns)
{
    if (c->mult) {
        uint64_t given = rbtrace_clock_ns_at(
            c, rbtrace_clock_fresh(c, tsc) ? tsc : c->anchor_tsc + c->period_ticks);

        if (given > c->last_ns) c->last_ns = given;
        c->mult = 0;
        c->period_ticks = 0;
    }
    c->real_tsc = tsc;
    c->real_ns = ns;
    return rbtrace_clock_fallback(c, ns);
}

/* A jump of the TSC: measure again, or, after too many, stop using it. */
static uint64_t clock_jumped(struct rbtrace_clock *c, uint64_t tsc, uint64_t ns)
{
    if (++c->jumps >= RBTRACE_CLOCK_JUMPS_MAX) c->tsc_usable = 0;
    return clock_measure_again(c, tsc, ns);
}

/* Whether rate is more than 1/64 away from the last period's (NTP slews
 * CLOCK_MONOTONIC by 500 ppm at most; a reading pair errs by ~1 ppm). */
static int clock_rate_moved(const struct rbtrace_clock *c, uint64_t rate)
{
    uint64_t last = c->mult;

    return last && (rate > last ? rate - last : last - rate) > last / 64;
}

/*
 * Measures the rate since the last reading pair and anchors the conversion
 * at the later of the real time and what the old rate gives for now (the
 * latest stamp the hot path may have given), so that time never goes back.
 */
uint64_t rbtrace_clock_tsc_renew(struct rbtrace_clock *c, uint64_t tsc, uint64_t ns)
{
    uint64_t rate, predicted;

    if (!c->tsc_usable) return rbtrace_clock_fallback(c, ns);
    if (tsc <= c->real_tsc) return clock_jumped(c, tsc, ns); /* it went back */
    if (rbtrace_clock_calibrating(c, ns)) return rbtrace_clock_fallback(c, ns);
    if (ns - c->real_ns > RBTRACE_CLOCK_RATE_MAX_NS) return clock_measure_again(c, tsc, ns);
    rate = (uint64_t)((((unsigned __int128)(ns - c->real_ns)) << 32) / (tsc - c->real_tsc));
    if (rate == 0 || clock_rate_moved(c, rate)) return clock_jumped(c, tsc, ns);
    predicted = c->mult ? rbtrace_clock_ns_at(c, tsc) : 0;
    c->mult = rate;
    c->period_ticks = (uint64_t)(((unsigned __int128)RBTRACE_CLOCK_PERIOD_NS << 32) / rate);
    c->real_tsc = tsc;
    c->real_ns = ns;
    c->anchor_tsc = tsc;
    c->anchor_ns = rbtrace_clock_fallback(c, ns > predicted ? ns : predicted);
    return c->anchor_ns;
}
#endif
