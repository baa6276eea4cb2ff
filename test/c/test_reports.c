/*
 * test_reports.c - the Ruby code the client sends for each report: the
 * right method and arguments, a dump FILE made absolute against our cwd
 * and sent as hex, and the dumps' longer default timeout.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "reports.h"

#define ARGC(argv) ((int)(sizeof(argv) / sizeof(argv[0])))

/* The code for argv, or NULL if parsing or building it failed. */
static char *code_for(int argc, char **argv)
{
    struct options o;
    char errstr[CLI_ERRLEN] = "";
    char *code = NULL;

    if (options_parse(&o, argc, argv) == CLI_OK && reports_is_report(o.mode) &&
        reports_code(&o, &code, errstr) != CLI_OK)
        code = NULL;
    options_free(&o);
    return code;
}

static void expect_code(int argc, char **argv, const char *want)
{
    char *code = code_for(argc, argv);

    CHECK_STR(code, want);
    free(code);
}

static void test_calls(void)
{
    char *b[] = { "rbtrace", "-p", "1", "-b" };
    char *b5[] = { "rbtrace", "-p", "1", "-b", "5" };
    char *bt[] = { "rbtrace", "-p", "1", "--backtrace", "2" };
    char *mem[] = { "rbtrace", "-p", "1", "--memory" };
    char *fork_[] = { "rbtrace", "-p", "1", "--fork" };
    char *heap[] = { "rbtrace", "-p", "1", "--heapdump" };
    char *shapes[] = { "rbtrace", "-p", "1", "--shapesdump" };
    char *heap_abs[] = { "rbtrace", "-p", "1", "--heapdump", "/tmp/a'b\"c" };

    expect_code(ARGC(b), b, "RBTrace::Reports.backtraces(nil)");
    expect_code(ARGC(b5), b5, "RBTrace::Reports.backtraces(5)");
    expect_code(ARGC(bt), bt, "RBTrace::Reports.backtrace(2)");
    expect_code(ARGC(mem), mem, "RBTrace::Reports.memory");
    expect_code(ARGC(fork_), fork_, "RBTrace::Reports.fork_copy");
    expect_code(ARGC(heap), heap, "RBTrace::Reports.heapdump(nil)");
    expect_code(ARGC(shapes), shapes, "RBTrace::Reports.shapesdump(nil)");
    /* "/tmp/a'b\"c", quotes and all, as hex */
    expect_code(ARGC(heap_abs), heap_abs,
                "RBTrace::Reports.heapdump(['2f746d702f6127622263'].pack('H*'))");
}

static void test_relative_path(void)
{
    char *rel[] = { "rbtrace", "-p", "1", "--shapesdump", "x" };
    char cwd[PATH_MAX], want[PATH_MAX * 2 + 64], *p;
    size_t i;

    CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
    p = want + snprintf(want, sizeof(want), "RBTrace::Reports.shapesdump(['");
    for (i = 0; cwd[i]; i++) p += sprintf(p, "%02x", (unsigned char)cwd[i]);
    if (strcmp(cwd, "/") != 0) p += sprintf(p, "2f");
    sprintf(p, "78'].pack('H*'))");
    expect_code(ARGC(rel), rel, want);
}

static void test_timeouts(void)
{
    char *heap[] = { "rbtrace", "-p", "1", "--heapdump" };
    char *heap_t[] = { "rbtrace", "-p", "1", "--heapdump", "--timeout", "7" };
    char *mem[] = { "rbtrace", "-p", "1", "--memory" };
    struct options o;

    CHECK(options_parse(&o, ARGC(heap), heap) == CLI_OK);
    CHECK(reports_timeout_ms(&o, 5000) == REPORTS_DUMP_TIMEOUT_MS);
    options_free(&o);
    CHECK(options_parse(&o, ARGC(heap_t), heap_t) == CLI_OK);
    CHECK(reports_timeout_ms(&o, 7000) == 7000);
    options_free(&o);
    CHECK(options_parse(&o, ARGC(mem), mem) == CLI_OK);
    CHECK(reports_timeout_ms(&o, 5000) == 5000);
    CHECK(reports_is_report(o.mode) && !strcmp(reports_option(o.mode), "--memory"));
    options_free(&o);
    CHECK(!reports_is_report(OPTIONS_MODE_EVAL) && !reports_is_report(OPTIONS_MODE_METHODS));
}

int main(void)
{
    test_calls();
    test_relative_path();
    test_timeouts();
    return check_report();
}
