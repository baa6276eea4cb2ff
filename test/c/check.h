/*
 * check.h - the C unit tests' assertions: count, report, keep going.
 * Each test program ends with `return check_report();`, which prints
 * "N passed, N failed" and exits non-zero on any failure.
 */
#ifndef RBTRACE_TEST_CHECK_H
#define RBTRACE_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond) check_true((cond) != 0, #cond, __FILE__, __LINE__)
#define CHECK_STR(got, want) check_str((got), (want), __FILE__, __LINE__)

static inline void check_true(int ok, const char *what, const char *file, int line)
{
    if (ok) {
        check_passed++;
        return;
    }
    check_failed++;
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
}

static inline void check_str(const char *got, const char *want, const char *file, int line)
{
    if (got && !strcmp(got, want)) {
        check_passed++;
        return;
    }
    check_failed++;
    fprintf(stderr, "%s:%d: output differs\n--- want\n%s--- got\n%s---\n", file, line, want,
            got ? got : "(null)\n");
}

static inline int check_report(void)
{
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
