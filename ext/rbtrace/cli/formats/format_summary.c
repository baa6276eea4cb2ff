/*
 * format_summary.c - --summary: a table per method when the trace ends,
 * as strace -c gives per system call, instead of the trace's lines:
 *
 *   *** 2 threads, 3.201544 s traced, 0 events lost
 *   method             calls     total      self      mean       p50       p99       max  raises
 *   Worker#run             5  0.001234  0.000100  0.000247  0.000240  0.000300  0.000301       0
 *
 * Times in seconds. total sums each call's duration (a recursive method's
 * inner calls count again), self its duration less its traced callees';
 * p50 and p99 come from a histogram with 8 buckets per power of two: they
 * are the upper bound of their bucket, within 1/8 above the true value;
 * max is exact. raises counts the exceptions raised (--raise) while the
 * method was the innermost traced call on the raising thread (a re-raise
 * is not another). --gvl: a line before the table counts the waits longer
 * than its threshold. The method column is as wide as the longest name. --slow
 * calls count as calls (their self time is their whole duration). Rows
 * are sorted by --sort (total, the default; calls, self, max), most first.
 * With --alloc, a column "alloc": the objects allocated inside the
 * method's calls (callees included, sampled as --alloc-sample says), and
 * after the table the sites that allocated most (alloc_report.h); the
 * combined table of several processes too (its dumps carry both).
 *
 * Several processes (multi.c, one session each in a child): each session
 * also dumps its rows, histograms whole, in a plain form (summary_dump);
 * the client merges the dumps into one more summary, its rows matched by
 * method name (ids are each process's own), its histograms added bucket
 * by bucket so that the combined p50 and p99 are those of the union, its
 * alloc counts summed, its --alloc sites merged by alloc_report_add_site
 * (the same class, path, line and label in several processes: one site):
 *
 *   rbtrace-summary 2
 *   process THREADS LOST WALL_ORIGIN FIRST LAST   (ns; FIRST = LAST = 0: no event)
 *   row CALLS TOTAL SELF MAX RAISES ALLOC NAME_HEX BUCKET:COUNT...
 *   site COUNT LINE CLASS_HEX PATH_HEX LABEL_HEX  (--alloc; fields escaped already)
 *
 * HEX: the bytes in hex, so that any byte survives; "-" for none.
 */
#define _GNU_SOURCE /* fwrite_unlocked */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "alloc_report.h"
#include "calls.h"
#include "cli.h"
#include "escape.h"
#include "format.h"
#include "render.h"

/* Durations under 16 ns have a bucket each; above, 8 per power of two. */
#define SUMMARY_BUCKETS (16 + 60 * 8)

struct summary_row {
    uint64_t method_id;
    uint64_t calls, total_ns, self_ns, max_ns, raises;
    uint64_t alloc;      /* --alloc: objects allocated inside its calls */
    uint64_t *histogram; /* SUMMARY_BUCKETS counts, made at the first call (64-bit as
                            calls: past 2^32 calls in a bucket, p50/p99 stay right) */
};

struct format_summary {
    struct format base;
    struct calls calls;
    struct summary_row *rows; /* by method, open addressing on method_id */
    size_t rows_cap, n_rows;  /* rows_cap: a power of two */
    uint64_t first_ns;        /* the earliest time seen, or UINT64_MAX */
    uint64_t wall_origin_ns;  /* the ATTACHED event's: times are since then */
    /* A combined summary (format_summary_merge): */
    size_t processes, threads;      /* merged so far, and their threads */
    uint64_t wall_first, wall_last; /* the span of all, on the wall clock */
    uint64_t longest_ns;            /* the longest span of one, when a wall origin is missing */
    int no_wall;                    /* a dump had no wall origin */
    struct alloc_report alloc;      /* --alloc: the sites, for after the table */
    int gvl_live;                   /* --gvl: a GVL event came (the target measures them) */
    uint64_t gvl_waits, gvl_ns, gvl_max_ns; /* --gvl: the waits longer than its threshold */
};

static size_t summary_bucket(uint64_t ns)
{
    int e;

    if (ns < 16) return (size_t)ns;
    e = 63 - __builtin_clzll(ns); /* >= 4 */
    return 16 + (size_t)(e - 4) * 8 + (size_t)((ns >> (e - 3)) & 7);
}

/* The largest duration of bucket b. */
static uint64_t summary_bucket_top(size_t b)
{
    size_t e, sub;

    if (b < 16) return b;
    e = (b - 16) / 8 + 4;
    sub = (b - 16) % 8;
    return ((8 + sub + 1) << (e - 3)) - 1;
}

static size_t summary_slot(const struct format_summary *f, uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ULL;
    size_t i = (size_t)(h ^ (h >> 32)) & (f->rows_cap - 1);

    while (f->rows[i].histogram && f->rows[i].method_id != id) i = (i + 1) & (f->rows_cap - 1);
    return i;
}

/* The row of method_id, made if new; NULL when out of memory. */
static struct summary_row *summary_row(struct format_summary *f, uint64_t id)
{
    struct summary_row *r;

    if ((f->n_rows + 1) * 2 > f->rows_cap) {
        size_t cap = f->rows_cap ? f->rows_cap * 2 : 64, i, old_cap = f->rows_cap;
        struct summary_row *old = f->rows;

        if (!(f->rows = calloc(cap, sizeof(*f->rows)))) {
            f->rows = old;
            return NULL;
        }
        f->rows_cap = cap;
        for (i = 0; i < old_cap; i++)
            if (old[i].histogram) f->rows[summary_slot(f, old[i].method_id)] = old[i];
        free(old);
    }
    r = &f->rows[summary_slot(f, id)];
    if (r->histogram) return r;
    if (!(r->histogram = calloc(SUMMARY_BUCKETS, sizeof(*r->histogram)))) return NULL;
    r->method_id = id;
    f->n_rows++;
    return r;
}

static int summary_add(struct format_summary *f, uint64_t method_id, uint64_t dur, uint64_t self)
{
    struct summary_row *r = summary_row(f, method_id);
    if (!r) return format_fail(&f->base, "out of memory");
    r->calls++;
    r->total_ns += dur;
    r->self_ns += self;
    if (dur > r->max_ns) r->max_ns = dur;
    r->histogram[summary_bucket(dur)]++;
    return CLI_OK;
}

static void summary_note(struct format_summary *f, uint64_t t)
{
    if (t < f->first_ns) f->first_ns = t;
    calls_note_time(&f->calls, t);
}

/* --gvl: a wait longer than the threshold is counted (a line before the
 * table), its thread seen; any wait is part of the span. A short wait of
 * a thread never seen adds no thread (as in the other formats). */
static int summary_gvl(struct format_summary *f, const struct rbtrace_event *ev)
{
    int added;

    f->gvl_live = 1;
    summary_note(f, ev->time_ns);
    calls_note_time(&f->calls, ev->time_ns + ev->duration_ns);
    if (ev->duration_ns <= f->base.opts.text.gvl_threshold_ns) return CLI_OK;
    if (calls_thread(&f->calls, ev->thread_id, &added) < 0)
        return format_fail(&f->base, "out of memory");
    f->gvl_waits++;
    f->gvl_ns += ev->duration_ns;
    if (ev->duration_ns > f->gvl_max_ns) f->gvl_max_ns = ev->duration_ns;
    return CLI_OK;
}

static int summary_event(struct format *base, const struct rbtrace_event *ev)
{
    struct format_summary *f = (struct format_summary *)base;
    struct calls_frame *frame;
    int added;
    long ti = 0;
    uint64_t dur;

    switch (ev->type) {
    case RBTRACE_EV_METHOD:
        return calls_set_name(&f->calls, ev->method_id, ev->text.ptr, ev->text.len) == CLI_OK
            ? CLI_OK
            : format_fail(base, "out of memory");
    case RBTRACE_EV_GC: /* no row, but part of the span */
        summary_note(f, ev->time_ns);
        calls_note_time(&f->calls, ev->time_ns + ev->duration_ns);
        return CLI_OK;
    case RBTRACE_EV_ALLOC: /* to the calls open on its thread */
        if ((ti = calls_thread_known(&f->calls, ev->thread_id)) >= 0)
            calls_add_alloc(&f->calls, (size_t)ti, ev->count);
        return CLI_OK;
    case RBTRACE_EV_ALLOC_SITE:
        return alloc_report_site(&f->alloc, ev) == CLI_OK ? CLI_OK
                                                          : format_fail(base, "out of memory");
    case RBTRACE_EV_GVL: /* --gvl: no row, but part of the span; the long waits counted */
        return summary_gvl(f, ev);
    case RBTRACE_EV_LOST:
    case RBTRACE_EV_FORGET: /* names kept: the table names every method at the end */
        calls_drop_all(&f->calls);
        return CLI_OK;
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_CALL_ARGS:
    case RBTRACE_EV_RETURN:
    case RBTRACE_EV_RAISE:
    case RBTRACE_EV_SLOW:
        if ((ti = calls_thread(&f->calls, ev->thread_id, &added)) < 0)
            return format_fail(base, "out of memory");
        break;
    default:
        return CLI_OK;
    }
    summary_note(f, ev->time_ns);
    switch (ev->type) {
    case RBTRACE_EV_RETURN:
        if (!(frame = calls_match(&f->calls, (size_t)ti, ev->method_id))) return CLI_OK;
        dur = ev->time_ns > frame->start_ns ? ev->time_ns - frame->start_ns : 0;
        if (summary_add(f, ev->method_id, dur, dur > frame->child_ns ? dur - frame->child_ns : 0) !=
            CLI_OK)
            return CLI_ERR;
        if (frame->alloc) { /* --alloc: the row summary_add made */
            struct summary_row *r = summary_row(f, ev->method_id);

            if (!r) return format_fail(base, "out of memory");
            r->alloc += frame->alloc;
        }
        calls_pop(&f->calls, (size_t)ti, dur);
        return CLI_OK;
    case RBTRACE_EV_RAISE: {
        struct calls_thread *t = &f->calls.threads[ti];
        struct summary_row *r;

        /* A re-raise (rescue => e; raise) is the same exception again: one
         * raise, its first method's (a job failing through 3 layers of
         * middleware is 1 raise, not 4). */
        if (!t->depth || ev->number > 0) return CLI_OK;
        if (!(r = summary_row(f, t->frames[t->depth - 1].method_id)))
            return format_fail(base, "out of memory");
        r->raises++;
        return CLI_OK;
    }
    case RBTRACE_EV_SLOW:
        calls_note_time(&f->calls, ev->time_ns + ev->duration_ns);
        return summary_add(f, ev->method_id, ev->duration_ns, ev->duration_ns);
    default: /* CALL, CALL_ARGS */
        return calls_push(&f->calls, (size_t)ti, ev->method_id, ev->time_ns)
            ? CLI_OK
            : format_fail(base, "out of memory");
    }
}

/* The duration below which a share q (0..1) of the row's calls fall. */
static uint64_t summary_percentile(const struct summary_row *r, double q)
{
    uint64_t want = (uint64_t)(q * (double)r->calls + 0.999999), seen = 0;
    size_t b;

    if (want == 0) want = 1;
    for (b = 0; b < SUMMARY_BUCKETS; b++) {
        seen += r->histogram[b];
        if (seen >= want) {
            uint64_t top = summary_bucket_top(b);
            return top < r->max_ns ? top : r->max_ns;
        }
    }
    return r->max_ns;
}

static enum options_sort summary_sort_key;

static uint64_t summary_key(const struct summary_row *r)
{
    switch (summary_sort_key) {
    case OPTIONS_SORT_CALLS:
        return r->calls;
    case OPTIONS_SORT_SELF:
        return r->self_ns;
    case OPTIONS_SORT_MAX:
        return r->max_ns;
    default:
        return r->total_ns;
    }
}

static int summary_compare(const void *a, const void *b)
{
    uint64_t ka = summary_key(*(const struct summary_row *const *)a);
    uint64_t kb = summary_key(*(const struct summary_row *const *)b);

    return ka < kb ? 1 : ka > kb ? -1 : 0;
}

static void summary_seconds(FILE *out, uint64_t ns)
{
    char num[RENDER_SECONDS_MAX + 1];

    num[render_format_seconds(num, ns)] = '\0';
    fprintf(out, " %10s", num);
}

/* The method column: at least this wide, or as wide as the longest name
 * (ActiveRecord's are longer), so that the columns stay aligned. */
#define SUMMARY_NAME_COLUMN 40

/* The columns escaped text takes on a terminal: one per character (UTF-8
 * passes escaping as it is; the rest is ASCII). */
static size_t summary_columns(const char *esc, size_t len)
{
    size_t i, n = 0;

    for (i = 0; i < len; i++) n += ((unsigned char)esc[i] & 0xc0) != 0x80;
    return n;
}

/* The columns the name of method id takes, escaped; SIZE_MAX when out of memory. */
static size_t summary_name_width(const struct format_summary *f, uint64_t id)
{
    const struct calls_name *name = calls_name(&f->calls, id);
    char *esc;
    size_t w;

    if (!name) return strlen("(unknown)");
    if (!(esc = malloc(name->len * ESCAPE_MAX_PER_BYTE + 1))) return SIZE_MAX;
    w = summary_columns(esc, escape_text(esc, name->text, name->len, 0));
    free(esc);
    return w;
}

/* --gvl: "*** GVL waits longer than 5 ms: 2, 0.030000 s in all, longest 0.020000 s". */
static void summary_gvl_line(const struct format_summary *f)
{
    char all[RENDER_SECONDS_MAX + 1], longest[RENDER_SECONDS_MAX + 1];

    all[render_format_seconds(all, f->gvl_ns)] = '\0';
    longest[render_format_seconds(longest, f->gvl_max_ns)] = '\0';
    fprintf(f->base.out, "*** GVL waits longer than %g ms: %llu, %s s in all, longest %s s\n",
            (double)f->base.opts.text.gvl_threshold_ns / 1e6, (unsigned long long)f->gvl_waits, all,
            longest);
}

/* A combined summary's span: first to last event of all on the wall
 * clock, or (a dump without its wall origin) the longest of one. */
static uint64_t summary_merged_span(const struct format_summary *f)
{
    if (f->no_wall || f->wall_last < f->wall_first) return f->longest_ns;
    return f->wall_last - f->wall_first > f->longest_ns ? f->wall_last - f->wall_first
                                                        : f->longest_ns;
}

static int summary_finish(struct format *base)
{
    struct format_summary *f = (struct format_summary *)base;
    struct summary_row **sorted;
    uint64_t span = f->first_ns == UINT64_MAX ? 0 : f->calls.last_time_ns - f->first_ns;
    char num[RENDER_SECONDS_MAX + 1];
    size_t i, n = 0, column = SUMMARY_NAME_COLUMN, calls_w = 10;

    if (!(sorted = malloc((f->n_rows ? f->n_rows : 1) * sizeof(*sorted))))
        return format_fail(base, "out of memory");
    for (i = 0; i < f->rows_cap; i++)
        if (f->rows[i].histogram && f->rows[i].calls) sorted[n++] = &f->rows[i];
    summary_sort_key = base->opts.sort;
    qsort(sorted, n, sizeof(*sorted), summary_compare);
    size_t threads = f->processes ? f->threads : f->calls.n_threads;

    if (f->processes) span = summary_merged_span(f);
    num[render_format_seconds(num, span)] = '\0';
    if (f->processes)
        fprintf(base->out, "*** %zu process%s, ", f->processes, f->processes == 1 ? "" : "es");
    else fputs("*** ", base->out);
    fprintf(base->out, "%zu thread%s, %s s traced, %llu events lost\n", threads,
            threads == 1 ? "" : "s", num, (unsigned long long)base->lost);
    if (base->opts.text.gvl && f->gvl_live) summary_gvl_line(f);
    for (i = 0; i < n; i++) {
        size_t w = summary_name_width(f, sorted[i]->method_id);

        if (w == SIZE_MAX) {
            free(sorted);
            return format_fail(base, "out of memory");
        }
        if (w > column) column = w;
        /* calls past 10 digits (a merged table of days' traces) widen theirs */
        w = (size_t)snprintf(num, sizeof(num), "%llu", (unsigned long long)sorted[i]->calls);
        if (w > calls_w) calls_w = w;
    }
    fprintf(base->out, "%-*s %*s %10s %10s %10s %10s %10s %10s %7s", (int)column, "method",
            (int)calls_w, "calls", "total", "self", "mean", "p50", "p99", "max", "raises");
    fputs(base->opts.text.alloc ? "      alloc\n" : "\n", base->out);
    for (i = 0; i < n; i++) {
        const struct summary_row *r = sorted[i];
        const struct calls_name *name = calls_name(&f->calls, r->method_id);

        if (name) {
            /* the app's bytes, escaped as in the text format */
            char *esc = malloc(name->len * ESCAPE_MAX_PER_BYTE + 1);
            size_t len;

            if (!esc) {
                free(sorted);
                return format_fail(base, "out of memory");
            }
            len = escape_text(esc, name->text, name->len, 0);
            fwrite_unlocked(esc, 1, len, base->out);
            fprintf(base->out, "%*s", (int)(column - summary_columns(esc, len)), "");
            free(esc);
        } else {
            fprintf(base->out, "%-*s", (int)column, "(unknown)");
        }
        fprintf(base->out, " %*llu", (int)calls_w, (unsigned long long)r->calls);
        summary_seconds(base->out, r->total_ns);
        summary_seconds(base->out, r->self_ns);
        summary_seconds(base->out, r->total_ns / r->calls);
        summary_seconds(base->out, summary_percentile(r, 0.5));
        summary_seconds(base->out, summary_percentile(r, 0.99));
        summary_seconds(base->out, r->max_ns);
        fprintf(base->out, " %7llu", (unsigned long long)r->raises);
        if (base->opts.text.alloc) fprintf(base->out, " %10llu", (unsigned long long)r->alloc);
        fputc('\n', base->out);
    }
    free(sorted);
    alloc_report_write(&f->alloc, base->out);
    return format_check_io(base);
}

static void summary_destroy(struct format *base)
{
    struct format_summary *f = (struct format_summary *)base;
    size_t i;

    calls_free(&f->calls);
    alloc_report_free(&f->alloc);
    for (i = 0; i < f->rows_cap; i++) free(f->rows[i].histogram);
    free(f->rows);
    free(f);
}

static void summary_set_wall_origin(struct format *base, uint64_t wall_origin_ns)
{
    ((struct format_summary *)base)->wall_origin_ns = wall_origin_ns;
}

static const struct format_ops format_summary_ops = {
    .event = summary_event,
    .finish = summary_finish,
    .destroy = summary_destroy,
    .set_wall_origin = summary_set_wall_origin,
};

/* ---- several processes: dump, and merge into a combined summary ---- */

#define SUMMARY_DUMP_HEADER "rbtrace-summary 2\n"

/* " " then text[0, len) in hex, or " -" when empty. */
static void summary_dump_hex(FILE *out, const char *text, size_t len)
{
    size_t i;

    fputc(' ', out);
    if (!len) fputc('-', out);
    for (i = 0; i < len; i++) fprintf(out, "%02x", (unsigned char)text[i]);
}

/* --alloc's sites, as alloc_report keeps them. */
static void summary_dump_sites(const struct alloc_report *a, FILE *out)
{
    size_t i;

    for (i = 0; i < a->n_sites; i++) {
        const struct alloc_report_site *s = &a->sites[i];

        if (!s->klass || !s->path || !s->label) continue; /* short of memory: not shown */
        fprintf(out, "site %llu %llu", (unsigned long long)s->count, (unsigned long long)s->line);
        summary_dump_hex(out, s->klass, strlen(s->klass));
        summary_dump_hex(out, s->path, strlen(s->path));
        summary_dump_hex(out, s->label, strlen(s->label));
        fputc('\n', out);
    }
}

int format_summary_dump(const struct format *base, FILE *out)
{
    const struct format_summary *f = (const struct format_summary *)base;
    int none = f->first_ns == UINT64_MAX;
    size_t i, b;

    fprintf(out, SUMMARY_DUMP_HEADER "process %zu %llu %llu %llu %llu\n", f->calls.n_threads,
            (unsigned long long)base->lost, (unsigned long long)f->wall_origin_ns,
            (unsigned long long)(none ? 0 : f->first_ns),
            (unsigned long long)(none ? 0 : f->calls.last_time_ns));
    for (i = 0; i < f->rows_cap; i++) {
        const struct summary_row *r = &f->rows[i];
        const struct calls_name *name;

        if (!r->histogram || !r->calls) continue;
        fprintf(out, "row %llu %llu %llu %llu %llu %llu", (unsigned long long)r->calls,
                (unsigned long long)r->total_ns, (unsigned long long)r->self_ns,
                (unsigned long long)r->max_ns, (unsigned long long)r->raises,
                (unsigned long long)r->alloc);
        name = calls_name(&f->calls, r->method_id); /* never named: "-", "(unknown)" */
        summary_dump_hex(out, name ? name->text : "", name ? name->len : 0);
        for (b = 0; b < SUMMARY_BUCKETS; b++)
            if (r->histogram[b]) fprintf(out, " %zu:%llu", b, (unsigned long long)r->histogram[b]);
        fputc('\n', out);
    }
    summary_dump_sites(&f->alloc, out);
    fflush(out);
    return ferror(out) ? CLI_ERR : CLI_OK;
}

/* The id of name in the combined summary: its hash, or the next free one
 * if another name has it; made if new. */
static int summary_merged_id(struct format_summary *f, const char *name, size_t len, uint64_t *id)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const struct calls_name *known;
    size_t i;

    for (i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 0x100000001b3ULL;
    for (;; h++) { /* 0 is the unnamed methods' row */
        if (!h) continue;
        known = calls_name(&f->calls, h);
        if (!known || (known->len == len && memcmp(known->text, name, len) == 0)) break;
    }
    *id = h;
    return known ? CLI_OK : calls_set_name(&f->calls, h, name, len);
}

static int summary_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes the hex field at *p (its bytes, or "-" for none) in place (it
 * gets shorter) and NUL-ends it; *p moves to the space or newline after
 * it, untouched. The field's start, or NULL if it is not hex. (A method's
 * name may hold a NUL byte; a site's fields, escaped, may not.) */
static char *summary_unhex(char **p, size_t *len)
{
    char *hex = *p, *end = hex + strcspn(hex, " \n");
    size_t i;

    *p = end;
    if (end - hex == 1 && *hex == '-') {
        *len = 0;
    } else {
        if (end == hex || (end - hex) % 2) return NULL;
        for (i = 0; hex + 2 * i < end; i++) {
            int hi = summary_hex(hex[2 * i]), lo = summary_hex(hex[2 * i + 1]);
            if (hi < 0 || lo < 0) return NULL;
            hex[i] = (char)(hi * 16 + lo);
        }
        *len = i;
    }
    hex[*len] = '\0';
    return hex;
}

/* One "row" line of a dump (after "row "), merged into f. */
static int summary_merge_row(struct format_summary *f, char *line)
{
    unsigned long long calls, total, self, max, raises, alloc;
    char *p, *hex;
    size_t len = 0;
    uint64_t id;
    struct summary_row *r;
    int n = 0;

    if (sscanf(line, "%llu %llu %llu %llu %llu %llu %n", &calls, &total, &self, &max, &raises,
               &alloc, &n) != 6 ||
        !n)
        return format_fail(&f->base, "a process's summary has a bad row");
    p = line + n;
    if (!(hex = summary_unhex(&p, &len)))
        return format_fail(&f->base, "a process's summary has a bad name");
    if (!len) id = 0; /* every unnamed method in one "(unknown)" row */
    else if (summary_merged_id(f, hex, len, &id) != CLI_OK)
        return format_fail(&f->base, "out of memory");
    if (!(r = summary_row(f, id))) return format_fail(&f->base, "out of memory");
    r->calls += calls;
    r->total_ns += total;
    r->self_ns += self;
    r->raises += raises;
    r->alloc += alloc;
    if (max > r->max_ns) r->max_ns = max;
    for (; *p == ' ';) {
        unsigned long long b, count;
        if (sscanf(p, " %llu:%llu%n", &b, &count, &n) != 2 || b >= SUMMARY_BUCKETS)
            return format_fail(&f->base, "a process's summary has a bad histogram");
        r->histogram[b] += count;
        p += n;
    }
    return CLI_OK;
}

/* A site's field at *p (summary_unhex), then *p past the space after it
 * unless last: NULL if bad, or holding a NUL byte (escaped text has none). */
static char *summary_site_field(char **p, int last)
{
    size_t len;
    char *field = summary_unhex(p, &len);

    if (!field || strlen(field) != len) return NULL;
    if (last) return **p == '\n' || !**p ? field : NULL;
    return *(*p)++ == ' ' ? field : NULL;
}

/* One "site" line of a dump (after "site "), merged into f's sites. */
static int summary_merge_site(struct format_summary *f, char *line)
{
    unsigned long long count, lineno;
    char *p, *klass, *path, *label;
    int n = 0;

    if (sscanf(line, "%llu %llu %n", &count, &lineno, &n) != 2 || !n)
        return format_fail(&f->base, "a process's summary has a bad allocation site");
    p = line + n;
    if (!(klass = summary_site_field(&p, 0)) || !(path = summary_site_field(&p, 0)) ||
        !(label = summary_site_field(&p, 1)))
        return format_fail(&f->base, "a process's summary has a bad allocation site");
    return alloc_report_add_site(&f->alloc, count, klass, path, lineno, label) == CLI_OK
        ? CLI_OK
        : format_fail(&f->base, "out of memory");
}

/* One "process" line, merged into f. */
static int summary_merge_process(struct format_summary *f, const char *line)
{
    unsigned long long threads, lost, origin, first, last;

    if (sscanf(line, "%llu %llu %llu %llu %llu", &threads, &lost, &origin, &first, &last) != 5)
        return format_fail(&f->base, "a process's summary has a bad header");
    f->processes++;
    f->threads += threads;
    f->base.lost += lost;
    if (last > first && last - first > f->longest_ns) f->longest_ns = last - first;
    if (!first && !last) return CLI_OK; /* no event: no span */
    if (!origin) f->no_wall = 1;
    if (!f->wall_first || origin + first < f->wall_first) f->wall_first = origin + first;
    if (origin + last > f->wall_last) f->wall_last = origin + last;
    return CLI_OK;
}

int format_summary_merge(struct format *base, FILE *in)
{
    struct format_summary *f = (struct format_summary *)base;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = CLI_OK, lines = 0;

    while (rc == CLI_OK && (n = getline(&line, &cap, in)) > 0) {
        if (lines++ == 0)
            rc = strcmp(line, SUMMARY_DUMP_HEADER) == 0
                ? CLI_OK
                : format_fail(base, "a process's summary is not one");
        else if (strncmp(line, "process ", 8) == 0) rc = summary_merge_process(f, line + 8);
        else if (strncmp(line, "row ", 4) == 0) rc = summary_merge_row(f, line + 4);
        else if (strncmp(line, "site ", 5) == 0) rc = summary_merge_site(f, line + 5);
        else rc = format_fail(base, "a process's summary has a line it does not know");
    }
    free(line);
    if (rc == CLI_OK && ferror(in)) rc = format_fail(base, "could not read a process's summary");
    if (rc == CLI_OK && !lines) rc = format_fail(base, "a process's summary is empty");
    return rc;
}

struct format *format_summary_new(FILE *out, const struct format_opts *opts)
{
    struct format_summary *f = calloc(1, sizeof(*f));

    if (!f) return NULL;
    format_base_init(&f->base, &format_summary_ops, out, opts);
    calls_init(&f->calls);
    alloc_report_init(&f->alloc, opts->text.alloc_sample);
    f->first_ns = UINT64_MAX;
    return &f->base;
}
