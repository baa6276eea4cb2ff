/*
 * clock.c - the time stamp of every traced event, cheaply.
 *
 * clock_gettime(CLOCK_MONOTONIC) costs 40-50 ns through the vDSO on the
 * virtual machines we measured on; under --firehose that was a fifth of
 * the app's time (bench/RESULTS.md). Where the kernel itself keeps time
 * with the TSC (its clocksource is "tsc": a constant rate, synchronised
 * across CPUs), the hot path reads the TSC instead (about half the cost)
 * and converts ticks to CLOCK_MONOTONIC nanoseconds with a rate measured
 * against clock_gettime:
 *
 *   ns = anchor_ns + (tsc - anchor_tsc) * mult / 2^32
 *
 * The anchor is a reading of both clocks, renewed every CLOCK_PERIOD_NS
 * (by whichever event comes after that, in rbtrace_clock_renew), and mult
 * is measured over the last period, so the stamps follow CLOCK_MONOTONIC
 * (and NTP's slewing of it) to within tens of nanoseconds, never going
 * back. Until the first CLOCK_CALIBRATE_NS of measurement, and wherever the
 * TSC is not the kernel's clock, stamps are clock_gettime's.
 *
 * Only threads holding the GVL stamp events (the hooks, the wrappers, GC
 * and raise events), so the state needs no lock.
 */
#include "rbtrace.h"
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* How often the anchor is renewed, and the least time a rate is measured
 * over: a reading pair is off by up to ~100 ns, 1e-6 of 100 ms. */
#define CLOCK_PERIOD_NS 100000000ull
#define CLOCK_CALIBRATE_NS 10000000ull

struct rbtrace_clock rbtrace_clock;

#ifdef RBTRACE_HAVE_TSC
static int clock_tsc_usable;   /* the kernel's clocksource is the TSC */
static uint64_t clock_real_tsc, clock_real_ns;   /* the last reading pair */

/* Both clocks at (nearly) one instant: the TSC read on either side of
 * clock_gettime, the tightest of three tries. */
static void clock_read_pair(uint64_t *tsc, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    int i;

    *tsc = *ns = 0;
    for (i = 0; i < 3; i++) {
        uint64_t t0 = __rdtsc(), n = rbtrace_now_ns(), t1 = __rdtsc();

        if (t1 - t0 < best) {
            best = t1 - t0;
            *tsc = t0 + (t1 - t0) / 2;
            *ns = n;
        }
    }
}

/* Whether the kernel keeps time with the TSC (so it found it stable). */
static int clock_kernel_uses_tsc(void)
{
    static const char path[] = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    char name[16];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) return 0;
    n = read(fd, name, sizeof(name) - 1);
    close(fd);
    return n == 4 && memcmp(name, "tsc\n", 4) == 0;
}

/* A clock_gettime stamp, never before one given earlier. */
static uint64_t clock_fallback(uint64_t ns)
{
    if (ns < rbtrace_clock.last_ns) return rbtrace_clock.last_ns;
    rbtrace_clock.last_ns = ns;
    return ns;
}

/*
 * The slow path: no rate yet, or the anchor is a period old. Measures the
 * rate since the last reading pair and anchors the conversion at the
 * later of the real time and what the old rate gives for now (the latest
 * stamp given so far), so that time never goes back.
 */
uint64_t rbtrace_clock_renew(void)
{
    uint64_t tsc, ns, predicted;

    if (!clock_tsc_usable) return rbtrace_now_ns();
    clock_read_pair(&tsc, &ns);
    if (ns - clock_real_ns < CLOCK_CALIBRATE_NS || tsc <= clock_real_tsc) {
        rbtrace_clock.mult = 0;   /* measure first (or again: the TSC went back) */
        return clock_fallback(ns);
    }
    predicted = rbtrace_clock.mult ? rbtrace_clock_ns_at(tsc) : 0;
    rbtrace_clock.mult = (uint64_t)((((unsigned __int128)(ns - clock_real_ns)) << 32) /
                                    (tsc - clock_real_tsc));
    rbtrace_clock.period_ticks = (uint64_t)(((unsigned __int128)CLOCK_PERIOD_NS << 32) /
                                            rbtrace_clock.mult);
    clock_real_tsc = tsc;
    clock_real_ns = ns;
    rbtrace_clock.anchor_tsc = tsc;
    rbtrace_clock.anchor_ns = clock_fallback(ns > predicted ? ns : predicted);
    return rbtrace_clock.anchor_ns;
}

void rbtrace_clock_init(void)
{
    clock_tsc_usable = clock_kernel_uses_tsc();
    if (clock_tsc_usable) clock_read_pair(&clock_real_tsc, &clock_real_ns);
}
#else
uint64_t rbtrace_clock_renew(void)
{
    return rbtrace_now_ns();
}

void rbtrace_clock_init(void)
{
}
#endif

/* call-seq: RBTrace.clock_source -> "tsc" or "clock_gettime" (for bench/ and specs) */
static VALUE clock_source_m(VALUE self)
{
    return rb_str_new_cstr(rbtrace_clock.mult ? "tsc" : "clock_gettime");
}

/* call-seq: RBTrace.clock_ns -> Integer: the events' clock, now (GVL held) */
static VALUE clock_ns_m(VALUE self)
{
    return ULL2NUM(rbtrace_clock_ns());
}

void Init_rbtrace_clock(VALUE mod)
{
    rb_define_singleton_method(mod, "clock_source", clock_source_m, 0);
    rb_define_singleton_method(mod, "clock_ns", clock_ns_m, 0);
}
