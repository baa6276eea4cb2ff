/*
 * alloc_report.h - --alloc's report at the end of a trace (text and
 * summary formats): the traced methods that allocated most (the objects
 * allocated inside their calls, callees included) and the sites that
 * allocated most (ALLOC_SITE events, sent by the target at the detach):
 *
 *   *** allocations (--alloc-sample 16: one object in 16 seen, counted as 16)
 *   *** traced methods that allocated most (inside their calls, callees included):
 *         160000  Foo#bar  (100 calls)
 *   *** sites that allocated most:
 *         160000  String  app.rb:12  in Foo#bar
 *
 * Pure bookkeeping and text: the caller hands in names as it prints them
 * (escaped); the sites' fields come from the app and are escaped here.
 */
#ifndef RBTRACE_CLI_ALLOC_REPORT_H
#define RBTRACE_CLI_ALLOC_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "codec.h"

/* Rows printed of each table. */
#define ALLOC_REPORT_ROWS 10
/* Sites kept: the target sends at most 50; more is not believed. */
#define ALLOC_REPORT_SITES_MAX 256

struct alloc_report_method {
    char *name; /* as the format prints it; NULL for a free slot */
    size_t len;
    uint64_t count, calls;
};

struct alloc_report_site {
    uint64_t count, line;
    char *klass, *path, *label; /* escaped, NUL-ended */
};

struct alloc_report {
    unsigned long sample;                /* --alloc-sample */
    struct alloc_report_method *methods; /* open addressing on the name */
    size_t methods_cap, n_methods;
    struct alloc_report_site *sites; /* in the order they came */
    size_t n_sites, sites_cap;
    uint64_t total; /* objects counted in ALLOC events */
};

void alloc_report_init(struct alloc_report *a, unsigned long sample);
void alloc_report_free(struct alloc_report *a);

/* A traced call of name[0, len) allocated count objects (callees included).
 * CLI_OK or CLI_ERR (out of memory). */
int alloc_report_method(struct alloc_report *a, const char *name, size_t len, uint64_t count);

/* An ALLOC_SITE event (at most ALLOC_REPORT_SITES_MAX are kept). CLI_OK
 * or CLI_ERR (out of memory). */
int alloc_report_site(struct alloc_report *a, const struct rbtrace_event *ev);

/* A site by its fields, escaped already (as a combined summary reads them
 * from its processes' dumps, format_summary.c): its count is added to the
 * site of the same class, path, line and label if there is one (the same
 * site in several processes), else it is a new site. No limit: each dump
 * holds at most ALLOC_REPORT_SITES_MAX. CLI_OK or CLI_ERR (out of memory). */
int alloc_report_add_site(struct alloc_report *a, uint64_t count, const char *klass,
                          const char *path, uint64_t line, const char *label);

/* A site's class as shown: "(hidden)" for "" (an object Ruby had not
 * given a class yet). */
const char *alloc_report_class(const struct alloc_report_site *s);

/* Writes the report to out (nothing if nothing was counted); the sites
 * most first (the order they came in for equal counts). */
void alloc_report_write(const struct alloc_report *a, FILE *out);

#endif
