/*
 * test_clock.c - the events' clock arithmetic (ext/rbtrace/clock_tsc.c) fed
 * made-up readings: a simulated TSC and CLOCK_MONOTONIC. It must follow
 * CLOCK_MONOTONIC closely while the TSC behaves, never give a stamp before
 * one it gave, and notice a TSC that jumps forward, goes back or changes
 * rate (a VM restored from a snapshot, or moved to another host): measure
 * it afresh, and give it up after RBTRACE_CLOCK_JUMPS_MAX jumps.
 */
#include <stdint.h>
#include "check.h"
#include "clock_tsc.h"

#define MS 1000000ull
#define SEC 1000000000ull

/* A simulated machine: CLOCK_MONOTONIC (ns) and a TSC at `ghz` ticks per
 * ns from `tsc_base`; every stamp taken is checked against the last. */
struct sim {
    struct rbtrace_clock c;
    uint64_t ns;
    uint64_t tsc_at_ns0, ns0; /* the TSC reads tsc_at_ns0 at ns0 */
    double ghz;
    uint64_t last_stamp;
    int went_back;
    uint64_t worst_off; /* the farthest a stamp was from ns */
};

static uint64_t sim_tsc(const struct sim *s)
{
    return s->tsc_at_ns0 + (uint64_t)((double)(s->ns - s->ns0) * s->ghz);
}

/* The TSC changes: from now on it reads tsc and runs at ghz. */
static void sim_set_tsc(struct sim *s, uint64_t tsc, double ghz)
{
    s->tsc_at_ns0 = tsc;
    s->ns0 = s->ns;
    s->ghz = ghz;
}

static void sim_start(struct sim *s, double ghz)
{
    memset(s, 0, sizeof(*s));
    s->ns = 5000 * SEC;
    sim_set_tsc(s, 123456789000ull, ghz);
    rbtrace_clock_tsc_start(&s->c, 1, sim_tsc(s), s->ns);
}

/* An event's stamp, as rbtrace_clock_ns takes it. */
static uint64_t sim_stamp(struct sim *s)
{
    uint64_t tsc = sim_tsc(s), stamp, off;

    if (s->c.tsc_usable && rbtrace_clock_fresh(&s->c, tsc)) stamp = rbtrace_clock_ns_at(&s->c, tsc);
    else if (!s->c.tsc_usable || rbtrace_clock_calibrating(&s->c, s->ns))
        stamp = rbtrace_clock_fallback(&s->c, s->ns);
    else stamp = rbtrace_clock_tsc_renew(&s->c, tsc, s->ns);
    if (stamp < s->last_stamp) s->went_back++;
    s->last_stamp = stamp;
    off = stamp > s->ns ? stamp - s->ns : s->ns - stamp;
    if (off > s->worst_off) s->worst_off = off;
    return stamp;
}

/* Events every step_ns for total_ns. */
static void sim_run(struct sim *s, uint64_t total_ns, uint64_t step_ns)
{
    uint64_t end = s->ns + total_ns;

    while (s->ns < end) {
        sim_stamp(s);
        s->ns += step_ns;
    }
}

static void test_steady(void)
{
    struct sim s;

    sim_start(&s, 2.1);
    sim_run(&s, 5 * MS, 100000);
    CHECK(s.c.mult == 0); /* still measuring: clock_gettime's stamps */
    CHECK(!rbtrace_clock_fresh(&s.c, s.c.anchor_tsc));
    CHECK(s.worst_off == 0);
    sim_run(&s, 2 * SEC, 50000);
    CHECK(s.c.mult != 0); /* the TSC is in use */
    CHECK(s.c.jumps == 0);
    CHECK(s.went_back == 0);
    CHECK(s.worst_off < 1000); /* within a microsecond */
}

/* NTP slews CLOCK_MONOTONIC by up to 500 ppm: not a jump. */
static void test_slew_is_not_a_jump(void)
{
    struct sim s;

    sim_start(&s, 2.1);
    sim_run(&s, 1 * SEC, 100000);
    sim_set_tsc(&s, sim_tsc(&s), 2.1 * 1.0005);
    sim_run(&s, 2 * SEC, 100000);
    CHECK(s.c.jumps == 0);
    CHECK(s.went_back == 0);
    CHECK(s.worst_off < 100 * 1000); /* one period of 500 ppm: 50 us */
}

static void test_jump_forward(void)
{
    struct sim s;
    uint64_t before;

    sim_start(&s, 2.1);
    sim_run(&s, 1 * SEC, 100000);
    before = s.last_stamp;
    sim_set_tsc(&s, sim_tsc(&s) + (uint64_t)(3600.0 * SEC * 2.1), 2.1); /* an hour ahead */
    sim_stamp(&s);
    CHECK(s.c.jumps == 1);
    CHECK(s.c.mult == 0);                              /* measuring afresh */
    CHECK(!rbtrace_clock_fresh(&s.c, s.c.anchor_tsc)); /* no tick converts meanwhile */
    CHECK(s.last_stamp >= before);
    CHECK(s.last_stamp - s.ns <= RBTRACE_CLOCK_PERIOD_NS); /* never an hour ahead */
    s.worst_off = 0;
    sim_run(&s, 2 * SEC, 100000);
    CHECK(s.c.mult != 0); /* the TSC again */
    CHECK(s.went_back == 0);
    s.worst_off = 0;
    sim_run(&s, 1 * SEC, 100000);
    CHECK(s.worst_off < 1000);
}

static void test_jump_back(void)
{
    struct sim s;

    sim_start(&s, 2.1);
    sim_run(&s, 1 * SEC, 100000);
    sim_set_tsc(&s, sim_tsc(&s) / 2, 2.1); /* the TSC restarts lower */
    sim_run(&s, 2 * MS, 100000);
    CHECK(s.c.jumps == 1);
    CHECK(s.went_back == 0);
    sim_run(&s, 2 * SEC, 100000);
    CHECK(s.c.mult != 0);
    s.worst_off = 0;
    sim_run(&s, 1 * SEC, 100000);
    CHECK(s.worst_off < 1000);
    CHECK(s.went_back == 0);
}

/* Moved to a host whose TSC runs 10 % faster. */
static void test_rate_change(void)
{
    struct sim s;

    sim_start(&s, 2.1);
    sim_run(&s, 1 * SEC, 100000);
    sim_set_tsc(&s, sim_tsc(&s), 2.1 * 1.1);
    sim_run(&s, 200 * MS, 100000);
    CHECK(s.c.jumps == 1);
    CHECK(s.went_back == 0);
    sim_run(&s, 2 * SEC, 100000);
    s.worst_off = 0;
    sim_run(&s, 1 * SEC, 100000);
    CHECK(s.c.jumps == 1);
    CHECK(s.worst_off < 1000); /* the new rate measured */
}

static void test_gives_up_after_jumps(void)
{
    struct sim s;
    int i;

    sim_start(&s, 2.1);
    sim_run(&s, 1 * SEC, 100000);
    for (i = 0; i < RBTRACE_CLOCK_JUMPS_MAX; i++) {
        sim_set_tsc(&s, sim_tsc(&s) + 1000 * SEC, 2.1);
        sim_run(&s, 1 * SEC, 100000);
    }
    CHECK(s.c.jumps == RBTRACE_CLOCK_JUMPS_MAX);
    CHECK(!s.c.tsc_usable);
    s.worst_off = 0;
    sim_set_tsc(&s, sim_tsc(&s) + 1000 * SEC, 2.1);
    sim_run(&s, 1 * SEC, 100000);
    CHECK(s.worst_off <= RBTRACE_CLOCK_PERIOD_NS); /* clock_gettime's, once caught up */
    s.worst_off = 0;
    sim_run(&s, 1 * SEC, 100000);
    CHECK(s.worst_off == 0);
    CHECK(s.went_back == 0);
}

/* An app traced again after a long pause measures the rate afresh (the TSC
 * may have done anything meanwhile): no jump counted, no stale rate used. */
static void test_idle_then_traced(void)
{
    struct sim s;

    sim_start(&s, 2.1);
    sim_run(&s, 1 * SEC, 100000);
    s.ns += 3600 * SEC;
    sim_set_tsc(&s, sim_tsc(&s), 2.0); /* changed rate while nobody looked */
    sim_stamp(&s);
    CHECK(s.c.jumps == 0);
    CHECK(s.c.mult == 0);
    s.worst_off = 0;
    sim_run(&s, 2 * SEC, 100000);
    CHECK(s.worst_off < 1000);
    CHECK(s.went_back == 0);
}

static void test_not_usable(void)
{
    struct sim s;

    sim_start(&s, 2.1);
    rbtrace_clock_tsc_start(&s.c, 0, sim_tsc(&s), s.ns);
    sim_run(&s, 1 * SEC, 100000);
    CHECK(s.c.mult == 0);
    CHECK(s.worst_off == 0);
}

int main(void)
{
    test_steady();
    test_slew_is_not_a_jump();
    test_jump_forward();
    test_jump_back();
    test_rate_change();
    test_gives_up_after_jumps();
    test_idle_then_traced();
    test_not_usable();
    return check_report();
}
