/*
 * test_convert.c - the text trace reader (ext/rbtrace/cli/convert.c):
 * the lines render.c writes, in every shape, into the events they came
 * from, each checked as one line of a log; and bad lines into errors that
 * name the line and what was expected there.
 */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "cli.h"
#include "convert.h"

static char log_text[8192];
static size_t log_len;
static int fail_after = -1; /* the callback fails at this event (-1: never) */

static void log_put(const char *fmt, const char *a, size_t a_len, unsigned long long x,
                    unsigned long long y, unsigned long long z)
{
    int n = snprintf(log_text + log_len, sizeof(log_text) - log_len, fmt, (int)a_len, a, x, y, z);
    if (n > 0 && (size_t)n < sizeof(log_text) - log_len) log_len += (size_t)n;
}

/* One line per event: its kind and what matters of it. */
static int collect(void *ctx, const struct rbtrace_event *ev)
{
    uint32_t i;

    (void)ctx;
    if (fail_after == 0) return CLI_ERR;
    if (fail_after > 0) fail_after--;
    switch (ev->type) {
    case RBTRACE_EV_METHOD:
        log_put("method %.*s %llu%.0llu%.0llu\n", ev->text.ptr, ev->text.len,
                (unsigned long long)ev->method_id, 0, 0);
        break;
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_CALL_ARGS:
        log_put("call%.*s t%llu m%llu at %llu", "", 0, (unsigned long long)ev->thread_id,
                (unsigned long long)ev->method_id, (unsigned long long)ev->time_ns);
        for (i = 0; ev->type == RBTRACE_EV_CALL_ARGS && i < ev->n_exprs; i++) {
            log_put(" [%.*s%.0llu%.0llu%.0llu=", ev->exprs[i].ptr, ev->exprs[i].len, 0, 0, 0);
            log_put("%.*s]%.0llu%.0llu%.0llu", ev->values[i].ptr, ev->values[i].len, 0, 0, 0);
        }
        log_put("%.*s\n%.0llu%.0llu%.0llu", "", 0, 0, 0, 0);
        break;
    case RBTRACE_EV_RETURN:
        log_put("return%.*s t%llu m%llu at %llu\n", "", 0, (unsigned long long)ev->thread_id,
                (unsigned long long)ev->method_id, (unsigned long long)ev->time_ns);
        break;
    case RBTRACE_EV_SLOW:
        log_put("slow%.*s m%llu at %llu", "", 0, (unsigned long long)ev->method_id,
                (unsigned long long)ev->time_ns, (unsigned long long)ev->duration_ns);
        log_put(" for %.*s%llu depth %llu%.0llu\n", "", 0, (unsigned long long)ev->duration_ns,
                (unsigned long long)ev->depth, 0);
        break;
    case RBTRACE_EV_GC:
        log_put("gc %.*s at %llu for %llu mark %llu", ev->text2.ptr, ev->text2.len,
                (unsigned long long)ev->time_ns, (unsigned long long)ev->duration_ns,
                (unsigned long long)ev->mark_ns);
        log_put(" (%.*s)%.0llu%.0llu%.0llu\n", ev->text.ptr, ev->text.len, 0, 0, 0);
        break;
    case RBTRACE_EV_RAISE:
        log_put("raise %.*s reraise %llu at %llu%.0llu", ev->text.ptr, ev->text.len,
                (unsigned long long)ev->number, (unsigned long long)ev->time_ns, 0);
        log_put(" msg [%.*s]%.0llu%.0llu%.0llu", ev->text2.ptr, ev->text2.len, 0, 0, 0);
        log_put(" where [%.*s]%.0llu%.0llu%.0llu\n", ev->text3.ptr, ev->text3.len, 0, 0, 0);
        break;
    case RBTRACE_EV_LOST:
        log_put("lost%.*s %llu%.0llu%.0llu\n", "", 0, (unsigned long long)ev->number, 0, 0);
        break;
    default:
        log_put("other%.*s%.0llu%.0llu%.0llu\n", "", 0, 0, 0, 0);
        break;
    }
    return CLI_OK;
}

/* Converts the lines of text (one per '\n'); the log, or "error: ..." after
 * the log of the lines before the bad one. */
static const char *convert_text(const char *text)
{
    static char result[9000];
    struct convert c;
    const char *p = text, *nl;
    int rc = CLI_OK;

    log_len = 0;
    log_text[0] = '\0';
    if (convert_init(&c, collect, NULL) != CLI_OK) return "init failed\n";
    while (*p && rc == CLI_OK) {
        nl = strchr(p, '\n');
        rc = convert_line(&c, p, nl ? (size_t)(nl - p) : strlen(p));
        p = nl ? nl + 1 : p + strlen(p);
    }
    snprintf(result, sizeof(result), "%s%s%s%s", log_text,
             rc == CLI_OK ? "" : "error: ", rc == CLI_OK ? "" : c.errstr, rc == CLI_OK ? "" : "\n");
    convert_free(&c);
    return result;
}

/* docs/usage.md's sample: nesting, expressions, one-line calls, the blank
 * line; without -t, each call starts where its previous sibling ended. */
static void test_calls(void)
{
    CHECK_STR(convert_text("Greeter#greet(name=\"Grace\", n=1)\n"
                           "  String#gsub <0.000010>\n"
                           "  Dir.pwd <0.000009>\n"
                           "Greeter#greet <0.000269>\n"
                           "\n"
                           "Kernel#sleep <0.201640>\n"),
              "method Greeter#greet 1\n"
              "call t1 m1 at 0 [name=\"Grace\"] [n=1]\n"
              "method String#gsub 2\n"
              "call t1 m2 at 0\n"
              "return t1 m2 at 10000\n"
              "method Dir.pwd 3\n"
              "call t1 m3 at 10000\n"
              "return t1 m3 at 19000\n"
              "return t1 m1 at 269000\n"
              "method Kernel#sleep 4\n"
              "call t1 m4 at 269000\n"
              "return t1 m4 at 201909000\n");
}

/* A recursive call of the same method on the next line is a call, not
 * the return (which would be on the call's own line); a return at the
 * same indentation after other lines is the return. */
static void test_recursion(void)
{
    CHECK_STR(convert_text("A#f\n"
                           "  A#f <0.000005>\n"
                           "A#f <0.000020>\n"),
              "method A#f 1\n"
              "call t1 m1 at 0\n"
              "call t1 m1 at 0\n"
              "return t1 m1 at 5000\n"
              "return t1 m1 at 20000\n");
    /* -r 0: no indentation at all; the stack alone tells. */
    CHECK_STR(convert_text("A#f\nA#f <0.000005>\nA#f <0.000020>\n"),
              "method A#f 1\n"
              "call t1 m1 at 0\n"
              "call t1 m1 at 0\n"
              "return t1 m1 at 5000\n"
              "return t1 m1 at 20000\n");
}

/* -t, threads, [PID]: times from the first, return lines with blanks in
 * the time column, and a clock passing midnight. */
static void test_times_threads(void)
{
    CHECK_STR(convert_text("[42] 23:59:59.999990 W#a\n"
                           "[42] [t2] 23:59:59.999995 W#b <0.000003>\n"
                           "[42] [t1]                 W#a <0.000020>\n"
                           "[42] [t1] 00:00:00.000010 W#b <0.000001>\n"),
              "method W#a 1\n"
              "call t44040193 m1 at 0\n"
              "method W#b 2\n"
              "call t44040194 m2 at 5000\n"
              "return t44040194 m2 at 8000\n"
              "return t44040193 m1 at 20000\n"
              "call t44040193 m2 at 20000\n"
              "return t44040193 m2 at 21000\n");
}

/* Threads 1 and 2^20 + 1 of one process, and process 1's thread 1 beside
 * process 0's thread 2^20 + 1: four threads (they were keyed pid << 20 |
 * ordinal & 0xfffff, and B's call fell on A's thread). */
static void test_many_threads(void)
{
    CHECK_STR(convert_text("[t1] A\n"
                           "[t1048577] B <0.000003>\n"
                           "[t1] A <0.000020>\n"
                           "[1] [t1] A <0.000001>\n"),
              "method A 1\n"
              "call t1 m1 at 0\n"
              "method B 2\n"
              "call t9223372036854775809 m2 at 0\n"
              "return t9223372036854775809 m2 at 3000\n"
              "return t1 m1 at 20000\n"
              "call t1048577 m1 at 0\n"
              "return t1048577 m1 at 1000\n");
}

/* --slow: deepest first, depth by indentation, [dN] past 40 levels. */
static void test_slow(void)
{
    CHECK_STR(convert_text("    C#c <0.000100>\n"
                           "  B#b <0.000300>\n"
                           "A#a <0.001000>\n"
                           "[d57] D#d <0.000050>\n"),
              "method C#c 1\n"
              "slow m1 at 0 for 100000 depth 2\n"
              "method B#b 2\n"
              "slow m2 at 0 for 300000 depth 1\n"
              "method A#a 3\n"
              "slow m3 at 0 for 1000000 depth 0\n"
              "method D#d 4\n"
              "slow m4 at 1000000 for 50000 depth 57\n");
}

/* GC, raise (folded re-raises, messages holding " at "), losses, notices. */
static void test_gc_raise_lost(void)
{
    CHECK_STR(
        convert_text(
            "*** attached to process 7\n"
            "GC minor by newobj <0.000812> (mark 0.000600, sweep 0.000212)\n"
            "GC major (oldgen) by method <0.012000> (mark 0.010000, sweep 0.002000)\n"
            "raise ArgumentError: bad at x at app.rb:12 (re-raised 4 times, last at mw.rb:9)\n"
            "re-raise E at b.rb:1\n"
            "*** 12 events lost\n"),
        "gc newobj at 0 for 812000 mark 600000 ()\n"
        "gc method at 812000 for 12000000 mark 10000000 (oldgen)\n"
        "raise ArgumentError reraise 0 at 12812000 msg [bad at x] where [app.rb:12]\n"
        "raise E reraise 1 at 12812000 msg [] where [b.rb:1]\n"
        "lost 12\n");
}

/* The original gem's own shapes: "garbage_collect" (with or without its
 * duration) and a method of no class, a bare name. */
static void test_original_gem(void)
{
    CHECK_STR(convert_text("Foo#bar\n"
                           "  garbage_collect <0.001000>\n"
                           "  garbage_collect\n"
                           "  require <0.000010>\n"
                           "Foo#bar <0.002000>\n"),
              "method Foo#bar 1\n"
              "call t1 m1 at 0\n"
              "gc  at 0 for 1000000 mark 0 ()\n"
              "gc  at 1000000 for 0 mark 0 ()\n"
              "method require 2\n"
              "call t1 m2 at 1000000\n"
              "return t1 m2 at 1010000\n"
              "return t1 m1 at 2000000\n");
    CHECK_STR(
        convert_text("garbage_collect x\n"),
        "error: line 1: expected the original gem's GC line: \"garbage_collect <S.uuuuuu>\"\n");
}

/* Bad lines: the error names the line and what was expected; the events
 * of the lines before it are out. */
static void test_errors(void)
{
    CHECK_STR(convert_text("A#a <0.000001>\nnot a trace at all\n"),
              "method A#a 1\n"
              "call t1 m1 at 0\n"
              "return t1 m1 at 1000\n"
              "error: line 2: expected a call (\"Class#method\", \"Class.method\", with "
              "\"(expr=value, ...)\" and \" <S.uuuuuu>\"), a GC or raise line, or \"*** ...\"\n");
    CHECK_STR(convert_text("A#a <0.00001>\n"),
              "error: line 1: expected a duration \"<S.uuuuuu>\" at the end of the line\n");
    CHECK_STR(convert_text("\nGC minor by newobj <0.1>\n"),
              "error: line 2: expected a GC line: \"GC minor by WHY <S.uuuuuu> (mark S.uuuuuu, "
              "sweep S.uuuuuu)\" or \"GC major (WHY) by WHY ...\"\n");
    CHECK_STR(convert_text("A#a\n  B#b\nA#a\n"),
              "method A#a 1\n"
              "call t1 m1 at 0\n"
              "method B#b 2\n"
              "call t1 m2 at 0\n"
              "error: line 3: expected a return with its duration, \"name <S.uuuuuu>\" (a trace "
              "written with -n has none, and --convert needs them)\n");
    CHECK_STR(convert_text("raise nothing\n"),
              "error: line 1: expected a raise line: \"raise Class: message at FILE:LINE\"\n");
    CHECK_STR(convert_text("[d5] <0.000001>\n"),
              "error: line 1: expected a slow call \"[dN] name <S.uuuuuu>\"\n");
    /* The callback refusing an event stops the reader, errstr empty. */
    fail_after = 1;
    CHECK_STR(convert_text("A#a <0.000001>\n"), "method A#a 1\nerror: \n");
    fail_after = -1;
}

/* A NUL byte, a name like "#<Class:0x1>#x" (ends in '>', no duration). */
static void test_odd_bytes(void)
{
    struct convert c;

    CHECK(convert_init(&c, collect, NULL) == CLI_OK);
    CHECK(convert_line(&c, "A#a\0 <0.000001>", 15) == CLI_ERR);
    CHECK_STR(c.errstr, "line 1: expected text, not a NUL byte");
    convert_free(&c);
    CHECK_STR(convert_text("#<Class:0x1>#x\n#<Class:0x1>#x <0.000002>\n"),
              "method #<Class:0x1>#x 1\n"
              "call t1 m1 at 0\n"
              "call t1 m1 at 0\n"
              "return t1 m1 at 2000\n");
}

int main(void)
{
    test_calls();
    test_recursion();
    test_times_threads();
    test_many_threads();
    test_slow();
    test_gc_raise_lost();
    test_original_gem();
    test_errors();
    test_odd_bytes();
    return check_report();
}
