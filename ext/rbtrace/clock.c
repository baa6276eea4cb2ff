/*
 * clock.c - the time stamp of every traced event, cheaply.
 *
 * clock_gettime(CLOCK_MONOTONIC) costs 30-50 ns through the vDSO on the
 * virtual machines we measured on (kvm-clock), the TSC about 10 ns; under
 * --firehose that is ~25 ns of every traced call (bench/hook_floor.rb).
 * Where the TSC can be trusted (below), the hot path reads it and converts
 * ticks to CLOCK_MONOTONIC nanoseconds with a rate measured against
 * clock_gettime:
 *
 *   ns = anchor_ns + (tsc - anchor_tsc) * mult / 2^32
 *
 * The anchor is a reading of both clocks, renewed every RBTRACE_CLOCK_PERIOD_NS
 * (by whichever event comes after that, in rbtrace_clock_renew), and mult
 * is measured over the last period, so the stamps follow CLOCK_MONOTONIC
 * (and NTP's slewing of it) to within tens of nanoseconds, never going
 * back. A rate is measured over at least RBTRACE_CLOCK_CALIBRATE_NS and at
 * most RBTRACE_CLOCK_RATE_MAX_NS (an app not traced for a while measures afresh rather
 * than trust what its TSC did meanwhile); until then stamps are
 * clock_gettime's. The arithmetic and the checks are clock_tsc.c's.
 *
 * The TSC is trusted where the kernel keeps time with it (clocksource
 * "tsc"), or where the CPU says it is invariant (CPUID: a constant rate, in
 * every power state), as on most KVM guests, whose kernel keeps time with
 * kvm-clock, itself computed from the TSC. Such a kernel may not vouch for
 * the TSC (a VM restored from a snapshot, or moved to another host, sees it
 * jump or change rate), so every renewal checks it: a rate that moved by
 * more than 1/64 since the last period, or a TSC that went back, is a jump.
 * The clock then measures afresh (clock_gettime meanwhile, never before a
 * stamp already given), and after RBTRACE_CLOCK_JUMPS_MAX jumps keeps to
 * clock_gettime for good. A jump can skew the stamps of one period at
 * most. RBTRACE_CLOCK=clock_gettime in the app's environment turns the TSC
 * off.
 *
 * Only threads holding the GVL stamp events (the hooks, the wrappers, GC
 * and raise events), so the state needs no lock.
 */
#include "clock.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock_tsc.h"
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct rbtrace_clock rbtrace_clock;

/* clock_gettime(CLOCK_MONOTONIC), any thread. */
uint64_t rbtrace_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef RBTRACE_HAVE_TSC
#include <cpuid.h>

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

/* Whether the CPU says its TSC is invariant: CPUID leaf 0x80000007, EDX
 * bit 8 (what Linux shows as constant_tsc and nonstop_tsc). */
static int clock_cpu_tsc_invariant(void)
{
    unsigned int eax, ebx, ecx, edx;

    /* unsigned in GCC's cpuid.h, int in clang's */
    if ((unsigned int)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u) return 0;
    if (!__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx)) return 0;
    return (edx >> 8) & 1;
}

static int clock_tsc_trusted(void)
{
    const char *choice = getenv("RBTRACE_CLOCK");

    if (choice && strcmp(choice, "clock_gettime") == 0) return 0;
    return clock_kernel_uses_tsc() || clock_cpu_tsc_invariant();
}

/* The slow path: no rate yet, or the anchor is a period old (clock_tsc.c). */
uint64_t rbtrace_clock_renew(void)
{
    uint64_t tsc, ns;

    if (!rbtrace_clock.tsc_usable) return rbtrace_now_ns();
    if (!rbtrace_clock.mult) {
        /* Measuring the rate: no need for the TSC before the time is up. */
        ns = rbtrace_now_ns();
        if (rbtrace_clock_calibrating(&rbtrace_clock, ns))
            return rbtrace_clock_fallback(&rbtrace_clock, ns);
    }
    clock_read_pair(&tsc, &ns);
    return rbtrace_clock_tsc_renew(&rbtrace_clock, tsc, ns);
}

void rbtrace_clock_init(void)
{
    uint64_t tsc, ns;
    int usable = clock_tsc_trusted();

    clock_read_pair(&tsc, &ns);
    rbtrace_clock_tsc_start(&rbtrace_clock, usable, tsc, ns);
}
#else
uint64_t rbtrace_clock_renew(void)
{
    return rbtrace_now_ns();
}

void rbtrace_clock_init(void) {}
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
