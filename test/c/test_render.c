/*
 * test_render.c - the renderer against exact expected text: rbtrace's
 * output format, line for line. Events are built by hand, output goes to
 * an open_memstream buffer. Durations are checked against printf's "%.6f"
 * for every kind of value the integer formatting must match.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "cli.h"
#include "render.h"

#define US 1000ULL    /* ns per microsecond */
#define MS 1000000ULL /* ns per millisecond */

struct fixture {
    char *buf;
    size_t len;
    FILE *f;
    struct render r;
    int failures; /* render_event calls that did not return CLI_OK */
};

static void fx_open_raise(struct fixture *fx, int start_time, int no_duration, unsigned prefix,
                          int raise_all)
{
    struct render_opts o = { .start_time = start_time,
                             .no_duration = no_duration,
                             .prefix = prefix,
                             .raise_all = raise_all };

    memset(fx, 0, sizeof(*fx));
    fx->f = open_memstream(&fx->buf, &fx->len);
    if (!fx->f) {
        perror("open_memstream");
        exit(2);
    }
    render_init(&fx->r, fx->f, &o);
}

static void fx_open(struct fixture *fx, int start_time, int no_duration, unsigned prefix)
{
    fx_open_raise(fx, start_time, no_duration, prefix, 0);
}

static void fx_send(struct fixture *fx, const struct rbtrace_event *ev)
{
    if (render_event(&fx->r, ev) != CLI_OK) fx->failures++;
}

static void fx_method(struct fixture *fx, uint64_t id, const char *name)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_METHOD;
    ev.method_id = id;
    ev.text.ptr = name;
    ev.text.len = (uint32_t)strlen(name);
    fx_send(fx, &ev);
}

static void fx_call_type(struct fixture *fx, enum rbtrace_event_type type, uint64_t thread,
                         uint64_t time_ns, uint64_t id)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.thread_id = thread;
    ev.time_ns = time_ns;
    ev.method_id = id;
    fx_send(fx, &ev);
}

static void fx_call(struct fixture *fx, uint64_t thread, uint64_t time_ns, uint64_t id)
{
    fx_call_type(fx, RBTRACE_EV_CALL, thread, time_ns, id);
}

static void fx_return(struct fixture *fx, uint64_t thread, uint64_t time_ns, uint64_t id)
{
    fx_call_type(fx, RBTRACE_EV_RETURN, thread, time_ns, id);
}

/* CALL_ARGS with pairs: exprs[i] = values[i] */
static void fx_call_args(struct fixture *fx, uint64_t thread, uint64_t time_ns, uint64_t id,
                         const char **pairs, uint32_t n)
{
    struct rbtrace_event ev;
    uint32_t i;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_CALL_ARGS;
    ev.thread_id = thread;
    ev.time_ns = time_ns;
    ev.method_id = id;
    ev.n_exprs = n;
    for (i = 0; i < n; i++) {
        ev.exprs[i].ptr = pairs[2 * i];
        ev.exprs[i].len = (uint32_t)strlen(pairs[2 * i]);
        ev.values[i].ptr = pairs[2 * i + 1];
        ev.values[i].len = (uint32_t)strlen(pairs[2 * i + 1]);
    }
    fx_send(fx, &ev);
}

static void fx_lost(struct fixture *fx, uint64_t count)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_LOST;
    ev.number = count;
    fx_send(fx, &ev);
}

/* Ends the output and checks it; frees everything. */
static void fx_check(struct fixture *fx, const char *want, const char *file, int line)
{
    CHECK(render_end_line(&fx->r) == CLI_OK);
    CHECK(fx->failures == 0);
    fclose(fx->f);
    check_str(fx->buf, want, file, line);
    render_free(&fx->r);
    free(fx->buf);
}

#define FX_CHECK(fx, want) fx_check((fx), (want), __FILE__, __LINE__)

static void test_leaf(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Kernel#sleep");
    fx_call(&fx, 7, 1000, 1);
    fx_return(&fx, 7, 1000 + 138615 * US, 1);
    FX_CHECK(&fx, "Kernel#sleep <0.138615>\n");
}

/* The README's example: nesting, CALL_ARGS, the blank line after the
 * outermost return once anything nested. */
static void fx_example(struct fixture *fx)
{
    static const char *args[] = { "self", "\"hello\"", "@test", "123" };

    fx_method(fx, 1, "Dir.chdir");
    fx_method(fx, 2, "Dir.pwd");
    fx_method(fx, 3, "String#gsub");
    fx_method(fx, 4, "String#*");
    fx_call(fx, 1, 0, 1);
    fx_call(fx, 1, 10 * US, 2);
    fx_return(fx, 1, 33 * US, 2);
    fx_call_args(fx, 1, 100 * US, 3, args, 2);
    fx_call(fx, 1, 110 * US, 4);
    fx_return(fx, 1, 118 * US, 4);
    fx_return(fx, 1, 150 * US, 3);
    fx_return(fx, 1, 499025 * US, 1);
}

static void test_nesting(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_example(&fx);
    FX_CHECK(&fx,
             "Dir.chdir\n"
             "  Dir.pwd <0.000023>\n"
             "  String#gsub(self=\"hello\", @test=123)\n"
             "    String#* <0.000008>\n"
             "  String#gsub <0.000050>\n"
             "Dir.chdir <0.499025>\n"
             "\n");
}

/* max_nesting is never reset: once anything nested, every outermost
 * return is followed by a blank line, as in the original. */
static void test_blank_line_rule(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_method(&fx, 2, "B#b");
    fx_call(&fx, 1, 0, 1);
    fx_return(&fx, 1, 1 * US, 1);
    fx_call(&fx, 1, 2 * US, 1);
    fx_call(&fx, 1, 3 * US, 2);
    fx_return(&fx, 1, 4 * US, 2);
    fx_return(&fx, 1, 5 * US, 1);
    fx_call(&fx, 1, 6 * US, 2);
    fx_return(&fx, 1, 7 * US, 2);
    FX_CHECK(&fx,
             "A#a <0.000001>\n"
             "A#a\n"
             "  B#b <0.000001>\n"
             "A#a <0.000003>\n"
             "\n"
             "B#b <0.000001>\n"
             "\n");
}

static void test_call_args_empty(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_call_args(&fx, 1, 0, 1, NULL, 0);
    fx_return(&fx, 1, 2 * US, 1);
    FX_CHECK(&fx, "A#a <0.000002>\n");
}

static void test_no_duration(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 1, 2);
    fx_example(&fx);
    FX_CHECK(&fx,
             "Dir.chdir\n"
             "  Dir.pwd\n"
             "  String#gsub(self=\"hello\", @test=123)\n"
             "    String#*\n"
             "  String#gsub\n"
             "Dir.chdir\n"
             "\n");
}

static void test_prefix(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 4);
    fx_example(&fx);
    FX_CHECK(&fx,
             "Dir.chdir\n"
             "    Dir.pwd <0.000023>\n"
             "    String#gsub(self=\"hello\", @test=123)\n"
             "        String#* <0.000008>\n"
             "    String#gsub <0.000050>\n"
             "Dir.chdir <0.499025>\n"
             "\n");
}

static void test_prefix_zero(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 0);
    fx_method(&fx, 1, "A#a");
    fx_method(&fx, 2, "B#b");
    fx_call(&fx, 1, 0, 1);
    fx_call(&fx, 1, 1 * US, 2);
    fx_return(&fx, 1, 2 * US, 2);
    fx_return(&fx, 1, 3 * US, 1);
    FX_CHECK(&fx, "A#a\nB#b <0.000001>\nA#a <0.000003>\n\n");
}

/* -t: the start time of each call; lines that show only a return are
 * indented by the width of a time so that names stay aligned. */
static void test_start_time(void)
{
    struct fixture fx;

    fx_open(&fx, 1, 0, 2);
    /* 2023-11-14 22:13:20 UTC */
    render_set_wall_origin(&fx.r, 1700000000ULL * 1000000000ULL);
    fx_example(&fx);
    FX_CHECK(&fx,
             "22:13:20.000000 Dir.chdir\n"
             "22:13:20.000010   Dir.pwd <0.000023>\n"
             "22:13:20.000100   String#gsub(self=\"hello\", @test=123)\n"
             "22:13:20.000110     String#* <0.000008>\n"
             "                  String#gsub <0.000050>\n"
             "                Dir.chdir <0.499025>\n"
             "\n");
}

/* Two threads: once the second one appears, every line says which. */
static void test_threads(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_method(&fx, 2, "B#b");
    fx_method(&fx, 3, "C#c");
    fx_call(&fx, 100, 0, 1);
    fx_return(&fx, 100, 1 * US, 1);
    fx_call(&fx, 100, 2 * US, 1);
    fx_call(&fx, 200, 3 * US, 2);
    fx_call(&fx, 200, 4 * US, 3);
    fx_return(&fx, 100, 5 * US, 1);
    fx_return(&fx, 200, 6 * US, 3);
    fx_return(&fx, 200, 9 * US, 2);
    fx_call(&fx, 100, 10 * US, 1);
    fx_return(&fx, 100, 11 * US, 1);
    FX_CHECK(&fx,
             "A#a <0.000001>\n"
             "A#a\n"
             "[t2] B#b\n"
             "[t2]   C#c\n"
             "[t1] A#a <0.000003>\n"
             "\n"
             "[t2]   C#c <0.000002>\n"
             "[t2] B#b <0.000006>\n"
             "\n"
             "[t1] A#a <0.000001>\n"
             "\n");
}

/* More threads than the table starts with, events from each in turn and
 * in runs: every line names its own thread. */
static void test_many_threads(void)
{
    struct fixture fx;
    uint64_t th;

    fx_open(&fx, 0, 1, 2);
    fx_method(&fx, 1, "A#a");
    for (th = 1; th <= 6; th++) fx_call(&fx, th << 40, 0, 1);
    fx_call(&fx, 6ULL << 40, 0, 1);
    for (th = 6; th >= 1; th--) fx_return(&fx, th << 40, 1, 1);
    fx_return(&fx, 6ULL << 40, 1, 1);
    FX_CHECK(&fx,
             "A#a\n[t2] A#a\n[t3] A#a\n[t4] A#a\n[t5] A#a\n[t6] A#a\n[t6]   A#a\n"
             "[t5] A#a\n\n[t4] A#a\n\n[t3] A#a\n\n[t2] A#a\n\n[t1] A#a\n\n[t6] A#a\n\n");
}

static void test_threads_start_time(void)
{
    struct fixture fx;

    fx_open(&fx, 1, 0, 2);
    render_set_wall_origin(&fx.r, 1700000000ULL * 1000000000ULL);
    fx_method(&fx, 1, "A#a");
    fx_call(&fx, 1, 0, 1);
    fx_call(&fx, 2, 1 * MS, 1);
    fx_return(&fx, 1, 2 * MS, 1);
    fx_return(&fx, 2, 3 * MS, 1);
    FX_CHECK(&fx,
             "22:13:20.000000 A#a\n"
             "[t2] 22:13:20.001000 A#a\n"
             "[t1]                 A#a <0.002000>\n"
             "[t2]                 A#a <0.002000>\n");
}

static void test_unmatched_return(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_method(&fx, 2, "B#b");
    fx_method(&fx, 3, "C#c");
    fx_return(&fx, 1, 0, 1); /* nothing open: ignored */
    fx_call(&fx, 1, 1 * US, 1);
    fx_return(&fx, 1, 2 * US, 2); /* not open: ignored */
    fx_return(&fx, 1, 3 * US, 1);
    fx_call(&fx, 1, 4 * US, 1);
    fx_call(&fx, 1, 5 * US, 2);
    fx_call(&fx, 1, 6 * US, 3);
    fx_return(&fx, 1, 8 * US, 1); /* B and C lost their returns */
    fx_return(&fx, 1, 9 * US, 2); /* already popped: ignored */
    FX_CHECK(&fx,
             "A#a <0.000002>\n"
             "A#a\n"
             "  B#b\n"
             "    C#c\n"
             "A#a <0.000004>\n"
             "\n");
}

static void test_unknown_method(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_call(&fx, 1, 0, 42);
    fx_return(&fx, 1, 5 * US, 42);
    FX_CHECK(&fx, "(unknown) <0.000005>\n");
}

/* A loss empties the stacks: returns may have been dropped, and calls left
 * open would indent everything after them. */
static void test_lost(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_method(&fx, 2, "B#b");
    fx_lost(&fx, 12);
    fx_call(&fx, 1, 0, 1);
    fx_lost(&fx, 3);
    fx_return(&fx, 1, 5 * US, 1); /* opened before the loss: nothing */
    fx_call(&fx, 1, 6 * US, 2);
    fx_return(&fx, 1, 7 * US, 2);
    FX_CHECK(&fx,
             "*** 12 events lost\n"
             "A#a\n"
             "*** 3 events lost\n"
             "B#b <0.000001>\n");
}

/* FORGET drops the old names (their ids are not used again) and starts the
 * stacks afresh, silently: the open call's RETURN carries a new id. */
static void test_forget(void)
{
    struct fixture fx;
    struct rbtrace_event ev;
    char name[32];
    uint64_t i;

    fx_open(&fx, 0, 0, 2);
    for (i = 1; i <= 100; i++) {
        snprintf(name, sizeof(name), "M%llu#m", (unsigned long long)i);
        fx_method(&fx, i, name);
    }
    fx_call(&fx, 1, 0, 1);
    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_FORGET;
    ev.number = 101;
    fx_send(&fx, &ev);
    CHECK(fx.r.names_count == 0);
    fx_method(&fx, 101, "M1#m");
    fx_return(&fx, 1, 5 * US, 101); /* opened before: nothing */
    fx_call(&fx, 1, 6 * US, 2);     /* forgotten */
    fx_return(&fx, 1, 7 * US, 2);
    fx_call(&fx, 1, 8 * US, 101);
    fx_return(&fx, 1, 10 * US, 101);
    FX_CHECK(&fx,
             "M1#m\n"
             "(unknown) <0.000001>\n"
             "M1#m <0.000002>\n");
}

/* Sparse, huge and renamed ids; enough of them to grow the table. */
static void test_many_methods(void)
{
    struct fixture fx;
    char name[32], want[32];
    uint64_t i;
    int ok = 1;

    fx_open(&fx, 0, 1, 2);
    for (i = 0; i < 1000; i++) {
        snprintf(name, sizeof(name), "M%llu#m", (unsigned long long)i);
        fx_method(&fx, i * 7919 + (i << 40), name);
    }
    fx_method(&fx, UINT64_MAX, "Max#m");
    fx_method(&fx, 0, "Renamed#m");
    fflush(fx.f);
    for (i = 1; i < 1000; i += 37) {
        size_t start = fx.len;
        fx_call(&fx, 1, 0, i * 7919 + (i << 40));
        fx_return(&fx, 1, 1, i * 7919 + (i << 40));
        fflush(fx.f);
        snprintf(want, sizeof(want), "M%llu#m\n", (unsigned long long)i);
        ok &= fx.len - start == strlen(want) && !memcmp(fx.buf + start, want, strlen(want));
    }
    CHECK(ok);
    fx_call(&fx, 1, 0, UINT64_MAX);
    fx_return(&fx, 1, 1, UINT64_MAX);
    fx_call(&fx, 1, 0, 0);
    fx_return(&fx, 1, 1, 0);
    fflush(fx.f);
    CHECK(strstr(fx.buf, "Max#m\nRenamed#m\n") != NULL);
    CHECK(render_end_line(&fx.r) == CLI_OK);
    fclose(fx.f);
    render_free(&fx.r);
    free(fx.buf);
}

/* Deep stacks grow; the indent follows. */
static void test_deep(void)
{
    struct fixture fx;
    int i;

    fx_open(&fx, 0, 1, 1);
    fx_method(&fx, 1, "R#r");
    for (i = 0; i < 100; i++) fx_call(&fx, 1, (uint64_t)i, 1);
    for (i = 0; i < 100; i++) fx_return(&fx, 1, 200, 1);
    fflush(fx.f);
    CHECK(strstr(fx.buf,
                 "\n"
                 "                                                                      "
                 "                             R#r\n") != NULL);
    CHECK(fx.len > 2 && !strcmp(fx.buf + fx.len - 6, "\nR#r\n\n"));
    CHECK(render_end_line(&fx.r) == CLI_OK);
    fclose(fx.f);
    render_free(&fx.r);
    free(fx.buf);
}

/* A write error (full disk) is reported, not ignored. */
static void test_write_error(void)
{
    struct render_opts o = { .prefix = 2 };
    struct rbtrace_event ev;
    struct render r;
    FILE *full = fopen("/dev/full", "w");
    int rc = CLI_OK, i;

    if (!full) {
        printf("skipped: no /dev/full\n");
        return;
    }
    setvbuf(full, NULL, _IONBF, 0);
    render_init(&r, full, &o);
    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_CALL;
    for (i = 0; i < 3 && rc == CLI_OK; i++) rc = render_event(&r, &ev);
    CHECK(rc == CLI_ERR);
    CHECK(strstr(r.errstr, "could not write") != NULL);
    render_free(&r);
    fclose(full);
}

/* ---- durations: render_format_seconds against printf ---- */

static int seconds_mismatches;

/* render_format_seconds(ns) is printf's "%.6f" of (double)ns / 1e9. */
static void seconds_check(uint64_t ns)
{
    char want[64], got[RENDER_SECONDS_MAX + 1];
    size_t len = render_format_seconds(got, ns);

    snprintf(want, sizeof(want), "%.6f", (double)ns / 1e9);
    got[len] = '\0';
    if (len <= RENDER_SECONDS_MAX && !strcmp(got, want)) return;
    if (seconds_mismatches++ < 10)
        fprintf(stderr, "%llu ns: printf %s, render %s\n", (unsigned long long)ns, want, got);
}

static uint64_t seconds_rng_state = 0x2545f4914f6cdd1dULL;

static uint64_t seconds_rng(void)
{
    seconds_rng_state ^= seconds_rng_state << 13;
    seconds_rng_state ^= seconds_rng_state >> 7;
    seconds_rng_state ^= seconds_rng_state << 17;
    return seconds_rng_state;
}

static void test_format_seconds(void)
{
    /* ties in decimal that the double rounds either way, or hits exactly
     * (7812500 ns = 2^-7 s: printf rounds the tie to even) */
    static const uint64_t named[] = { 0,
                                      1,
                                      499,
                                      500,
                                      501,
                                      999,
                                      1000,
                                      1499,
                                      1500,
                                      2500,
                                      3500,
                                      7812500,
                                      23437500,
                                      999999499,
                                      999999500,
                                      999999501,
                                      1000000000,
                                      59999999500ULL,
                                      86400000000500ULL,
                                      (1ULL << 53) - 1,
                                      1ULL << 53,
                                      (1ULL << 53) + 1,
                                      1ULL << 63,
                                      UINT64_MAX - 500,
                                      UINT64_MAX };
    uint64_t ns, k;
    int bit;

    for (k = 0; k < sizeof(named) / sizeof(named[0]); k++) seconds_check(named[k]);
    for (ns = 0; ns <= 200000; ns++) seconds_check(ns);
    for (k = 0; k <= 200000; k++) seconds_check(k * 1000 + 500);    /* every tie */
    for (k = 1; k <= 2000; k++) seconds_check(k * 7812500);         /* exact ties */
    for (ns = 999990000; ns <= 1000010000; ns++) seconds_check(ns); /* a second's edge */
    for (bit = 10; bit < 64; bit++)
        for (k = 0; k < 2000; k++) seconds_check((1ULL << bit) - 1000 + k);
    for (k = 0; k < 200000; k++) {
        uint64_t r = seconds_rng() >> (seconds_rng() % 64);
        seconds_check(r);
        seconds_check(r - r % 1000 + 500);
    }
    CHECK(seconds_mismatches == 0);
}

/* A duration through render_event: printf's digits, seconds of any size. */
static void test_long_duration(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_call(&fx, 1, 5, 1);
    fx_return(&fx, 1, 5 + 86400 * 1000 * MS + 999999600, 1);
    fx_call(&fx, 1, 10, 1);
    fx_return(&fx, 1, 9, 1); /* the clock went back: 0 */
    FX_CHECK(&fx, "A#a <86401.000000>\nA#a <0.000000>\n");
}

static void fx_slow(struct fixture *fx, uint64_t thread, uint64_t time_ns, uint64_t id,
                    uint64_t duration_ns, uint64_t depth)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_SLOW;
    ev.thread_id = thread;
    ev.time_ns = time_ns;
    ev.method_id = id;
    ev.duration_ns = duration_ns;
    ev.depth = depth;
    fx_send(fx, &ev);
}

static struct rbtrace_str fx_str(const char *s)
{
    struct rbtrace_str out = { s, (uint32_t)strlen(s) };
    return out;
}

static void fx_gc(struct fixture *fx, uint64_t thread, uint64_t mark_ns, uint64_t sweep_ns,
                  const char *major_by, const char *gc_by)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_GC;
    ev.thread_id = thread;
    ev.time_ns = 5 * MS;
    ev.duration_ns = mark_ns + sweep_ns;
    ev.mark_ns = mark_ns;
    ev.sweep_ns = sweep_ns;
    ev.text = fx_str(major_by);
    ev.text2 = fx_str(gc_by);
    fx_send(fx, &ev);
}

static void fx_raise_at(struct fixture *fx, uint64_t thread, uint64_t time_ns, const char *klass,
                        const char *msg, const char *where, uint64_t reraise)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_RAISE;
    ev.thread_id = thread;
    ev.time_ns = time_ns;
    ev.text = fx_str(klass);
    ev.text2 = fx_str(msg);
    ev.text3 = fx_str(where);
    ev.number = reraise;
    fx_send(fx, &ev);
}

static void fx_reraise(struct fixture *fx, uint64_t thread, const char *klass, const char *msg,
                       const char *where, uint64_t reraise)
{
    fx_raise_at(fx, thread, 6 * MS, klass, msg, where, reraise);
}

static void fx_raise(struct fixture *fx, uint64_t thread, const char *klass, const char *msg,
                     const char *where)
{
    fx_reraise(fx, thread, klass, msg, where, 0);
}

/* Slow calls come innermost first, each indented by its own depth. */
static void test_slow(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Kernel#sleep");
    fx_method(&fx, 2, "Worker#run");
    fx_slow(&fx, 7, 10 * MS, 1, 300 * MS, 1);
    fx_slow(&fx, 7, 9 * MS, 2, 301 * MS + 5 * US, 0);
    FX_CHECK(&fx, "  Kernel#sleep <0.300000>\nWorker#run <0.301005>\n");

    fx_open(&fx, 1, 1, 4);
    fx_method(&fx, 1, "Kernel#sleep");
    fx_slow(&fx, 7, 1500 * MS, 1, 300 * MS, 2);
    FX_CHECK(&fx, "00:00:01.500000         Kernel#sleep\n");
}

/* A METHOD with an empty name whose pointer is NULL (found by fuzz_event:
 * memcpy from NULL, undefined even for 0 bytes): named "" and rendered. */
static void test_empty_name(void)
{
    struct fixture fx;
    struct rbtrace_event ev;

    fx_open(&fx, 0, 0, 2);
    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_METHOD;
    ev.method_id = 3;
    ev.text.ptr = NULL;
    ev.text.len = 0;
    fx_send(&fx, &ev);
    fx_call(&fx, 7, 1000, 3);
    fx_return(&fx, 7, 1000 + 5 * US, 3);
    FX_CHECK(&fx, " <0.000005>\n");
}

/* A depth no stack reaches (a malformed event: found by fuzz_event, which
 * hung printing 2^63 levels of spaces) is indented RENDER_SLOW_INDENT_MAX
 * levels and says its depth. */
static void test_slow_depth_bounded(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Kernel#sleep");
    fx_slow(&fx, 7, 10 * MS, 1, 300 * MS, UINT64_MAX);
    CHECK(2 * RENDER_SLOW_INDENT_MAX == 80);
    FX_CHECK(&fx,
             "                                        "
             "                                        "
             "[d18446744073709551615] Kernel#sleep <0.300000>\n");
}

/* A Rails request's slow calls nest ~100 deep: up to RENDER_SLOW_INDENT_MAX
 * levels a line is indented by its depth, past it by that much, with its
 * depth as a number. */
static void test_slow_deep(void)
{
    struct fixture fx;
    char want[512];
    int n;

    fx_open(&fx, 0, 0, 1);
    fx_method(&fx, 1, "A#a");
    fx_slow(&fx, 7, 10 * MS, 1, 300 * MS, RENDER_SLOW_INDENT_MAX);
    fx_slow(&fx, 7, 10 * MS, 1, 300 * MS, RENDER_SLOW_INDENT_MAX + 1);
    fx_slow(&fx, 7, 10 * MS, 1, 300 * MS, 97);
    n = snprintf(want, sizeof(want),
                 "%*sA#a <0.300000>\n%*s[d41] A#a <0.300000>\n"
                 "%*s[d97] A#a <0.300000>\n",
                 RENDER_SLOW_INDENT_MAX, "", RENDER_SLOW_INDENT_MAX, "", RENDER_SLOW_INDENT_MAX,
                 "");
    CHECK(n > 0 && (size_t)n < sizeof(want));
    FX_CHECK(&fx, want);
}

/* An open call line is ended before a slow line; nesting of -m calls and
 * the slow lines' own depth do not mix. */
static void test_slow_with_calls(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Worker#run");
    fx_method(&fx, 2, "Kernel#sleep");
    fx_call(&fx, 7, 0, 1);
    fx_slow(&fx, 7, 1 * MS, 2, 300 * MS, 0);
    fx_return(&fx, 7, 301 * MS, 1);
    FX_CHECK(&fx, "Worker#run\nKernel#sleep <0.300000>\nWorker#run <0.301000>\n");
}

static void test_gc(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_gc(&fx, 7, 600 * US, 212 * US, "", "newobj");
    fx_gc(&fx, 7, 10 * MS, 2 * MS, "oldgen", "malloc");
    FX_CHECK(&fx,
             "GC minor by newobj <0.000812> (mark 0.000600, sweep 0.000212)\n"
             "GC major (oldgen) by malloc <0.012000> (mark 0.010000, sweep 0.002000)\n");

    /* Inline: at the depth of the open calls of its thread. */
    fx_open(&fx, 0, 1, 2);
    fx_method(&fx, 1, "Worker#run");
    fx_call(&fx, 7, 0, 1);
    fx_gc(&fx, 7, 1 * MS, 1 * MS, "", "newobj");
    fx_return(&fx, 7, 5 * MS, 1);
    FX_CHECK(&fx, "Worker#run\n  GC minor by newobj\nWorker#run\n");
}

static void fx_gvl(struct fixture *fx, uint64_t thread, uint64_t time_ns, uint64_t wait_ns)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_GVL;
    ev.thread_id = thread;
    ev.time_ns = time_ns;
    ev.duration_ns = wait_ns;
    fx_send(fx, &ev);
}

static void fx_thread_name(struct fixture *fx, uint64_t thread, const char *name, size_t len)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_THREAD_NAME;
    ev.thread_id = thread;
    ev.text.ptr = name;
    ev.text.len = (uint32_t)len;
    fx_send(fx, &ev);
}

/* --thread-names: "[tN name]" once named (even alone), "[tN]" unnamed,
 * renamed and unnamed again; without the option the events change nothing. */
static void test_thread_names(void)
{
    struct render_opts o = { .prefix = 2, .thread_names = 1 };
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx.r.opts = o;
    fx_method(&fx, 1, "Worker#step");
    fx_thread_name(&fx, 7, "puma srv tp 001", 15);
    fx_call(&fx, 7, 0, 1);
    fx_return(&fx, 7, 1 * MS, 1);
    fx_thread_name(&fx, 9, "", 0);
    fx_call(&fx, 9, 2 * MS, 1);
    fx_return(&fx, 9, 3 * MS, 1);
    fx_thread_name(&fx, 7, "renamed", 7);
    fx_call(&fx, 7, 4 * MS, 1);
    fx_return(&fx, 7, 5 * MS, 1);
    fx_thread_name(&fx, 7, "", 0);
    fx_call(&fx, 7, 6 * MS, 1);
    fx_return(&fx, 7, 7 * MS, 1);
    FX_CHECK(&fx,
             "[t1 puma srv tp 001] Worker#step <0.001000>\n"
             "[t2] Worker#step <0.001000>\n"
             "[t1 renamed] Worker#step <0.001000>\n"
             "[t1] Worker#step <0.001000>\n");

    /* A hostile name: escaped, its ']' as \x5d, cut to 48 bytes at a
     * character's end (the 2-byte "é" that would cross it is left out). */
    {
        char name[10240];
        const char *head = "a]b\n\x1b[31m"; /* 9 bytes, then 38 x */

        memset(name, 'x', sizeof(name));
        memcpy(name, head, strlen(head));
        name[47] = (char)0xc3; /* "é" at bytes 47-48 */
        name[48] = (char)0xa9;
        fx_open(&fx, 0, 0, 2);
        fx.r.opts = o;
        fx_method(&fx, 1, "Worker#step");
        fx_thread_name(&fx, 7, name, sizeof(name));
        fx_call(&fx, 7, 0, 1);
        fx_return(&fx, 7, 1 * MS, 1);
        FX_CHECK(&fx,
                 "[t1 a\\x5db\\n\\x1b[31mxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...] "
                 "Worker#step <0.001000>\n");
    }

    /* Without --thread-names: nothing shows. */
    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Worker#step");
    fx_thread_name(&fx, 7, "puma srv tp 001", 15);
    fx_call(&fx, 7, 0, 1);
    fx_return(&fx, 7, 1 * MS, 1);
    FX_CHECK(&fx, "Worker#step <0.001000>\n");
}

/* --gvl MS: waits over MS on a line of their own; each call's waits after
 * its duration, its callees' included, its calls lost included. */
static void test_gvl(void)
{
    struct render_opts o = { .prefix = 2, .gvl = 1, .gvl_threshold_ns = 1 * MS };
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx.r.opts = o;
    fx_method(&fx, 1, "Worker#run");
    fx_method(&fx, 2, "Worker#step");
    fx_gvl(&fx, 7, 0, 2 * MS); /* before any call: a line, no call */
    fx_call(&fx, 7, 10 * MS, 1);
    fx_gvl(&fx, 7, 11 * MS, 500 * US); /* short: counted, no line */
    fx_call(&fx, 7, 12 * MS, 2);
    fx_gvl(&fx, 7, 13 * MS, 3 * MS);
    fx_return(&fx, 7, 20 * MS, 2);
    fx_gvl(&fx, 9, 21 * MS, 400 * US); /* another thread, short: nothing at all */
    fx_return(&fx, 7, 30 * MS, 1);
    FX_CHECK(&fx,
             "GVL wait <0.002000>\n"
             "Worker#run\n"
             "  Worker#step\n"
             "    GVL wait <0.003000>\n"
             "  Worker#step <0.008000> gvl <0.003000>\n"
             "Worker#run <0.020000> gvl <0.003500>\n\n");

    /* A second thread's long wait: [tN] from then on. A call whose inner
     * call lost its return still has that call's waits. */
    fx_open(&fx, 0, 0, 2);
    fx.r.opts = o;
    fx_method(&fx, 1, "Worker#run");
    fx_method(&fx, 2, "Worker#step");
    fx_call(&fx, 7, 0, 1);
    fx_call(&fx, 7, 1 * MS, 2);
    fx_gvl(&fx, 9, 2 * MS, 5 * MS);
    fx_gvl(&fx, 7, 3 * MS, 700 * US);
    fx_return(&fx, 7, 10 * MS, 1);
    FX_CHECK(&fx,
             "Worker#run\n"
             "  Worker#step\n"
             "[t2] GVL wait <0.005000>\n"
             "[t1] Worker#run <0.010000> gvl <0.000700>\n\n");

    /* --gvl, but the target never said it measures (no GVL event: Ruby 3.1):
     * no " gvl <0.000000>" that would mean no wait. */
    fx_open(&fx, 0, 0, 2);
    fx.r.opts = o;
    fx_method(&fx, 1, "Worker#run");
    fx_call(&fx, 7, 0, 1);
    fx_return(&fx, 7, 10 * MS, 1);
    FX_CHECK(&fx, "Worker#run <0.010000>\n");

    /* Without --gvl: GVL events change nothing (a target never sends them). */
    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Worker#run");
    fx_call(&fx, 7, 0, 1);
    fx_return(&fx, 7, 10 * MS, 1);
    FX_CHECK(&fx, "Worker#run <0.010000>\n");
}

static void test_raise(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Worker#run");
    fx_call(&fx, 7, 0, 1);
    fx_raise(&fx, 7, "ArgumentError", "bad\nvalue\x01", "app.rb:12");
    fx_return(&fx, 7, 5 * MS, 1);
    FX_CHECK(&fx,
             "Worker#run\n  raise ArgumentError: bad\\nvalue\\x01 at app.rb:12\n"
             "Worker#run <0.005000>\n");
}

/* The re-raises of one exception (Rails' middlewares: rescue => e; raise)
 * fold into its first line, which says how many and where the last was;
 * the next event ends it. */
static void test_reraise_folded(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_raise(&fx, 7, "Foo", "boom", "app.rb:3");
    fx_reraise(&fx, 7, "Foo", "boom", "mw1.rb:5", 1);
    fx_reraise(&fx, 7, "Foo", "boom", "mw2.rb:7", 2);
    fx_reraise(&fx, 7, "Foo", "boom", "mw\x1b.rb:9", 3);
    fx_raise(&fx, 7, "Bar", "", "app.rb:4");
    fx_reraise(&fx, 7, "Bar", "", "mw1.rb:5", 1);
    fx_raise(&fx, 7, "Baz", "", "app.rb:5");
    CHECK(render_raise_open(&fx.r));
    FX_CHECK(&fx,
             "raise Foo: boom at app.rb:3 (re-raised 3 times, last at mw\\x1b.rb:9)\n"
             "raise Bar at app.rb:4 (re-raised at mw1.rb:5)\n"
             "raise Baz at app.rb:5\n");

    /* inside a traced call: the call's return ends the line */
    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Worker#run");
    fx_call(&fx, 7, 0, 1);
    fx_raise(&fx, 7, "Foo", "boom", "app.rb:3");
    fx_reraise(&fx, 7, "Foo", "boom", "mw1.rb:5", 1);
    fx_return(&fx, 7, 5 * MS, 1);
    FX_CHECK(&fx,
             "Worker#run\n  raise Foo: boom at app.rb:3 (re-raised at mw1.rb:5)\n"
             "Worker#run <0.005000>\n");
}

/* A re-raise whose first line was printed (its thread's other output came
 * between them) has a line of its own, marked; further re-raises fold into
 * it. Lines held are printed once the output ends, oldest first, and marked
 * with their thread as every line is once two threads were seen. */
static void test_reraise_unfolded(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_raise(&fx, 7, "Foo", "boom", "app.rb:3");
    fx_slow(&fx, 7, 10 * MS, 1, 300 * MS, 0);
    fx_reraise(&fx, 7, "Foo", "boom", "mw1.rb:5", 1);
    fx_reraise(&fx, 7, "Foo", "boom", "mw2.rb:7", 2);
    fx_reraise(&fx, 8, "Bar", "x", "mw2.rb:7", 1);
    FX_CHECK(&fx,
             "raise Foo: boom at app.rb:3\nA#a <0.300000>\n"
             "[t1] re-raise Foo: boom at mw1.rb:5 (re-raised at mw2.rb:7)\n"
             "[t2] re-raise Bar: x at mw2.rb:7\n");
}

/* Other threads' output does not end a held raise line (a Puma worker's
 * threads serve on while Rails' middleware re-raises a request's
 * exception): each thread's re-raises fold into its own line, printed
 * before its thread's next event, or once events come RENDER_HOLD_NS
 * after it. */
static void test_reraise_interleaved(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "A#a");
    fx_raise_at(&fx, 7, 1 * MS, "Foo", "boom", "app.rb:3", 0);
    fx_raise_at(&fx, 8, 2 * MS, "EOFError", "", "socket.rb:452", 0);
    fx_call(&fx, 9, 3 * MS, 1);
    fx_raise_at(&fx, 7, 4 * MS, "Foo", "boom", "mw1.rb:5", 1);
    fx_raise_at(&fx, 7, 5 * MS, "Foo", "boom", "mw2.rb:7", 2);
    fx_return(&fx, 9, 6 * MS, 1);
    fx_call(&fx, 7, 7 * MS, 1);
    fx_return(&fx, 7, 8 * MS, 1);
    CHECK(render_raise_open(&fx.r));
    fx_call(&fx, 9, 8 * MS + RENDER_HOLD_NS, 1);
    CHECK(!render_raise_open(&fx.r));
    FX_CHECK(&fx,
             "[t3] A#a <0.003000>\n"
             "[t1] raise Foo: boom at app.rb:3 (re-raised 2 times, last at mw2.rb:7)\n"
             "[t1] A#a <0.001000>\n"
             "[t2] raise EOFError at socket.rb:452\n"
             "[t3] A#a\n");
}

/* --raise-all: every raise and re-raise on a line of its own, at once. */
static void test_reraise_all(void)
{
    struct fixture fx;

    fx_open_raise(&fx, 0, 0, 2, 1);
    fx_raise(&fx, 7, "Foo", "boom", "app.rb:3");
    CHECK(!render_raise_open(&fx.r));
    fx_reraise(&fx, 7, "Foo", "boom", "mw1.rb:5", 1);
    fx_reraise(&fx, 7, "Foo", "boom", "mw2.rb:7", 2);
    FX_CHECK(&fx,
             "raise Foo: boom at app.rb:3\nre-raise Foo: boom at mw1.rb:5\n"
             "re-raise Foo: boom at mw2.rb:7\n");
}

/* The app's bytes in names, expressions and values are escaped
 * (escape.h); plain UTF-8 is not. */
static void test_escaped(void)
{
    static const char *args[] = { "n\x1b", "\"\x1b[2J\\\\\"", "s", "\"h\xc3\xa9llo\"" };
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_method(&fx, 1, "Probe#x\x1b]0;PWNED\a\x1b[2J");
    fx_method(&fx, 2, "Probe#\xe6\x97\xa5\n");
    fx_call_args(&fx, 1, 0, 1, args, 2);
    fx_call(&fx, 1, 1 * MS, 2);
    fx_return(&fx, 1, 2 * MS, 2);
    fx_return(&fx, 1, 3 * MS, 1);
    FX_CHECK(&fx,
             "Probe#x\\x1b]0;PWNED\\x07\\x1b[2J(n\\x1b=\"\\x1b[2J\\\\\\\\\", "
             "s=\"h\xc3\xa9llo\")\n"
             "  Probe#\xe6\x97\xa5\\n <0.001000>\n"
             "Probe#x\\x1b]0;PWNED\\x07\\x1b[2J <0.003000>\n\n");
}

/* No message (none the target could read without the app's code): the
 * class alone, no ": ". */
static void test_raise_without_message(void)
{
    struct fixture fx;

    fx_open(&fx, 0, 0, 2);
    fx_raise(&fx, 7, "Exploding", "", "app.rb:17");
    FX_CHECK(&fx, "raise Exploding at app.rb:17\n");
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    test_leaf();
    test_nesting();
    test_blank_line_rule();
    test_call_args_empty();
    test_no_duration();
    test_prefix();
    test_prefix_zero();
    test_start_time();
    test_threads();
    test_threads_start_time();
    test_many_threads();
    test_unmatched_return();
    test_unknown_method();
    test_lost();
    test_many_methods();
    test_forget();
    test_deep();
    test_write_error();
    test_format_seconds();
    test_long_duration();
    test_slow();
    test_slow_depth_bounded();
    test_slow_deep();
    test_empty_name();
    test_slow_with_calls();
    test_gc();
    test_raise();
    test_gvl();
    test_thread_names();
    test_reraise_folded();
    test_reraise_unfolded();
    test_reraise_interleaved();
    test_reraise_all();
    test_escaped();
    test_raise_without_message();
    return check_report();
}
