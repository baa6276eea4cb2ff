/*
 * render.c - the original rbtrace's text output, from events.
 *
 * State: the method names, one stack of open calls per thread, whether the
 * last line printed is still open (waiting for its call's duration) and
 * which call it shows, and the deepest nesting seen (which decides whether
 * a blank line follows each outermost return, as in the original).
 *
 * Every byte of the target's (names, values, GC and raise text) is
 * escaped (escape.h): the app must not write to the client's terminal.
 *
 * This is the client's hot path (millions of events a second): no printf,
 * only unlocked writes of text built here; the FILE* is the session's, and
 * only the session's thread uses it.
 */
#define _GNU_SOURCE /* fwrite_unlocked, ferror_unlocked */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "escape.h"
#include "render.h"

#define RENDER_NAMES_MIN 64
#define RENDER_FRAMES_MIN 16
#define RENDER_THREADS_MIN 4
#define RENDER_UNKNOWN "(unknown)"
/* Width of "HH:MM:SS.uuuuuu ", the -t column. */
#define RENDER_TIME_WIDTH 16
/* Longest run of spaces written at once. */
#define RENDER_SPACES 64

static const char render_spaces_text[RENDER_SPACES + 1] =
    "                                                                ";

static int render_fail(struct render *r, const char *msg)
{
    snprintf(r->errstr, sizeof(r->errstr), "%s", msg);
    return CLI_ERR;
}

/* Write errors stick to the FILE*: one check per event is enough. */
static int render_check_io(struct render *r)
{
    if (!ferror_unlocked(r->out)) return CLI_OK;
    snprintf(r->errstr, sizeof(r->errstr), "could not write the output: %s", strerror(errno));
    return CLI_ERR;
}

void render_init(struct render *r, FILE *out, const struct render_opts *opts)
{
    memset(r, 0, sizeof(*r));
    r->out = out;
    r->opts = *opts;
    r->hms_secs = -1;
    alloc_report_init(&r->alloc, opts->alloc_sample);
}

void render_free(struct render *r)
{
    size_t i;

    for (i = 0; i < r->names_cap; i++) free(r->names[i].name);
    free(r->names);
    for (i = 0; i < r->n_threads; i++) {
        free(r->threads[i].frames);
        free(r->threads[i].held.text);
        free(r->threads[i].held.last_at);
        free(r->threads[i].name);
    }
    free(r->threads);
    alloc_report_free(&r->alloc);
    r->n_held = 0;
    r->names = NULL;
    r->threads = NULL;
    r->names_cap = r->names_count = r->n_threads = r->threads_cap = r->last_thread = 0;
}

void render_set_wall_origin(struct render *r, uint64_t wall_origin_ns)
{
    r->wall_origin_ns = wall_origin_ns;
}

/* ---- method names ---- */

static size_t render_names_slot(const struct render_name *names, size_t cap, uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ULL;
    size_t i = (size_t)(h ^ (h >> 32)) & (cap - 1);

    while (names[i].name && names[i].id != id) i = (i + 1) & (cap - 1);
    return i;
}

/* Places every name again in a table of cap slots. */
static int render_names_rehash(struct render *r, size_t cap)
{
    struct render_name *names = calloc(cap, sizeof(*names));
    size_t i;

    if (!names) return render_fail(r, "out of memory");
    for (i = 0; i < r->names_cap; i++) {
        if (r->names[i].name) names[render_names_slot(names, cap, r->names[i].id)] = r->names[i];
    }
    free(r->names);
    r->names = names;
    r->names_cap = cap;
    return CLI_OK;
}

static int render_names_grow(struct render *r)
{
    return render_names_rehash(r, r->names_cap ? r->names_cap * 2 : RENDER_NAMES_MIN);
}

static int render_method(struct render *r, const struct rbtrace_event *ev)
{
    struct render_name *slot;
    char *name;
    size_t len;

    if ((r->names_count + 1) * 2 > r->names_cap && render_names_grow(r) != CLI_OK) return CLI_ERR;
    /* Stored escaped (escape.h), once: every call prints it. */
    name = malloc((size_t)ev->text.len * ESCAPE_MAX_PER_BYTE + 1);
    if (!name) return render_fail(r, "out of memory");
    len = escape_text(name, ev->text.ptr, ev->text.len, 0);
    name[len] = '\0';

    slot = &r->names[render_names_slot(r->names, r->names_cap, ev->method_id)];
    if (slot->name) free(slot->name); /* renamed: keep the latest */
    else r->names_count++;
    slot->id = ev->method_id;
    slot->name = name;
    slot->len = len;
    return CLI_OK;
}

/* ---- text out ---- */

static void render_put(struct render *r, const char *s, size_t len)
{
    fwrite_unlocked(s, 1, len, r->out);
}

static void render_putc(struct render *r, char c)
{
    putc_unlocked(c, r->out);
}

static void render_spaces(struct render *r, size_t n)
{
    while (n > RENDER_SPACES) {
        render_put(r, render_spaces_text, RENDER_SPACES);
        n -= RENDER_SPACES;
    }
    if (n) render_put(r, render_spaces_text, n);
}

/* v in decimal at out (room for 20 digits); returns the length. */
static size_t render_utoa(char *out, uint64_t v)
{
    char digits[20];
    size_t n = 0, len = 0;

    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) out[len++] = digits[--n];
    return len;
}

/* The method's name, or "(unknown)". */
static void render_name(struct render *r, uint64_t id)
{
    const struct render_name *n;

    if (r->names_cap) {
        n = &r->names[render_names_slot(r->names, r->names_cap, id)];
        if (n->name) {
            render_put(r, n->name, n->len);
            return;
        }
    }
    render_put(r, RENDER_UNKNOWN, sizeof(RENDER_UNKNOWN) - 1);
}

/* ---- threads and their stacks ---- */

/* The index of thread id in r->threads, added if new; -1 when out of memory. */
static long render_thread_index(struct render *r, uint64_t id)
{
    struct render_thread *t;
    size_t i;

    /* Few threads, and runs of events from one: a scan behind a cache. */
    if (r->n_threads && r->threads[r->last_thread].id == id) return (long)r->last_thread;
    for (i = 0; i < r->n_threads; i++) {
        if (r->threads[i].id == id) {
            r->last_thread = i;
            return (long)i;
        }
    }
    if (r->n_threads == r->threads_cap) {
        size_t cap = r->threads_cap ? r->threads_cap * 2 : RENDER_THREADS_MIN;
        t = realloc(r->threads, cap * sizeof(*t));
        if (!t) return render_fail(r, "out of memory");
        r->threads = t;
        r->threads_cap = cap;
    }
    t = &r->threads[r->n_threads];
    memset(t, 0, sizeof(*t));
    t->id = id;
    t->ordinal = (unsigned)r->n_threads + 1;
    r->last_thread = r->n_threads;
    return (long)r->n_threads++;
}

static int render_push(struct render *r, struct render_thread *t, uint64_t method_id,
                       uint64_t start_ns)
{
    if (t->depth == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : RENDER_FRAMES_MIN;
        struct render_frame *frames = realloc(t->frames, cap * sizeof(*frames));
        if (!frames) return render_fail(r, "out of memory");
        t->frames = frames;
        t->cap = cap;
    }
    t->frames[t->depth].method_id = method_id;
    t->frames[t->depth].start_ns = start_ns;
    t->frames[t->depth].gvl_ns = 0;
    t->frames[t->depth].alloc = 0;
    t->depth++;
    return CLI_OK;
}

/* ---- output ---- */

#define RENDER_PUT_LITERAL(r, s) render_put((r), (s), sizeof(s) - 1)

/* Ends the open call line, if any, before another line. */
static int render_close_line(struct render *r)
{
    if (r->line_open) {
        render_putc(r, '\n');
        r->line_open = 0;
    }
    return render_check_io(r);
}

int render_raise_open(const struct render *r)
{
    return r->n_held > 0;
}

/* "HH:MM:SS.uuuuuu ": localtime only when the second changes. */
static void render_time(struct render *r, uint64_t time_ns)
{
    uint64_t wall = r->wall_origin_ns + time_ns;
    time_t secs = (time_t)(wall / 1000000000ULL);
    unsigned usec = (unsigned)(wall % 1000000000ULL / 1000);
    char text[8];
    struct tm tm;
    int i;

    if ((int64_t)secs != r->hms_secs) {
        if (!localtime_r(&secs, &tm) || !strftime(r->hms, sizeof(r->hms), "%H:%M:%S", &tm))
            snprintf(r->hms, sizeof(r->hms), "??:??:??");
        r->hms_secs = (int64_t)secs;
    }
    text[0] = '.';
    for (i = 6; i >= 1; i--, usec /= 10) text[i] = (char)('0' + usec % 10);
    text[7] = ' ';
    render_put(r, r->hms, strlen(r->hms));
    render_put(r, text, sizeof(text));
}

/*
 * The start of a line: the thread, the start time (time_ns) or blanks of
 * its width (time_ns NULL), the indent for depth.
 */
static void render_line_start(struct render *r, const struct render_thread *t,
                              const uint64_t *time_ns, size_t depth)
{
    char text[32];
    size_t n;

    if (r->n_threads > 1 || t->name_len) {
        text[0] = '[';
        text[1] = 't';
        n = 2 + render_utoa(text + 2, t->ordinal);
        if (t->name_len) {
            text[n++] = ' ';
            render_put(r, text, n);
            render_put(r, t->name, t->name_len);
            n = 0;
        }
        text[n++] = ']';
        text[n++] = ' ';
        render_put(r, text, n);
    }
    if (r->opts.start_time) {
        if (time_ns) render_time(r, *time_ns);
        else render_spaces(r, RENDER_TIME_WIDTH);
    }
    render_spaces(r, depth * r->opts.prefix);
}

/* Text of the target's, on one line: escaped (escape.h). */
static void render_text(struct render *r, struct rbtrace_str s)
{
    escape_fwrite(r->out, s.ptr, s.len, 0);
}

static void render_args(struct render *r, const struct rbtrace_event *ev)
{
    uint32_t i;

    if (ev->type != RBTRACE_EV_CALL_ARGS || ev->n_exprs == 0) return;
    render_putc(r, '(');
    for (i = 0; i < ev->n_exprs; i++) {
        if (i) render_put(r, ", ", 2);
        render_text(r, ev->exprs[i]);
        render_putc(r, '=');
        render_text(r, ev->values[i]);
    }
    render_putc(r, ')');
}

/*
 * The microseconds printf("%.6f", d) shows for d = (double)ns / 1e9: d's
 * exact binary value rounded to the nearest microsecond, an exact tie to
 * the even one (glibc's rounding), found with integers. d = mant * 2^-shift;
 * for 1 <= ns < 2^64, 18 <= shift <= 82, and mant * 10^6 < 2^73.
 *
 * Mostly d need not be looked at: below 2^52 ns, d < 2^23 s is within 2^-30
 * s (half its ulp) of ns / 1e9 s, which unless ns ends in 500 is at least
 * 1 ns from a tie (k + 1/2) us: d then rounds as ns does.
 */
static uint64_t render_round_us(uint64_t ns)
{
    uint64_t rem = ns % 1000, bits, mant, us;
    unsigned __int128 scaled, frac, half;
    double d;
    int shift;

    if (ns < (1ULL << 52) && rem != 500) return ns / 1000 + (rem > 500);
    d = (double)ns / 1e9;
    memcpy(&bits, &d, sizeof(bits));
    mant = (bits & ((1ULL << 52) - 1)) | (1ULL << 52);
    shift = 1075 - (int)(bits >> 52);
    scaled = (unsigned __int128)mant * 1000000;
    us = (uint64_t)(scaled >> shift);
    frac = scaled & (((unsigned __int128)1 << shift) - 1);
    half = (unsigned __int128)1 << (shift - 1);
    if (frac > half || (frac == half && (us & 1))) us++;
    return us;
}

size_t render_format_seconds(char *out, uint64_t ns)
{
    uint64_t us = render_round_us(ns);
    unsigned frac = (unsigned)(us % 1000000);
    size_t n = render_utoa(out, us / 1000000);
    int i;

    out[n] = '.';
    for (i = 6; i >= 1; i--, frac /= 10) out[n + (size_t)i] = (char)('0' + frac % 10);
    return n + 7;
}

/* " <seconds>", as the original's " <%.6f>". */
static void render_duration(struct render *r, uint64_t start_ns, uint64_t end_ns)
{
    char text[RENDER_SECONDS_MAX + 3];
    size_t n;

    if (r->opts.no_duration) return;
    text[0] = ' ';
    text[1] = '<';
    n = 2 + render_format_seconds(text + 2, end_ns > start_ns ? end_ns - start_ns : 0);
    text[n++] = '>';
    render_put(r, text, n);
}

/* --gvl: " gvl <seconds>", the GVL waits inside a call. */
static void render_gvl_total(struct render *r, uint64_t gvl_ns)
{
    char text[RENDER_SECONDS_MAX + 7];
    size_t n = sizeof(" gvl <") - 1;

    if (!r->opts.gvl || !r->gvl_live || r->opts.no_duration) return;
    memcpy(text, " gvl <", n);
    n += render_format_seconds(text + n, gvl_ns);
    text[n++] = '>';
    render_put(r, text, n);
}

/* --alloc: " alloc N", the objects allocated inside a call. */
static void render_alloc_total(struct render *r, uint64_t count)
{
    char text[sizeof(" alloc ") + 20];
    size_t n = sizeof(" alloc ") - 1;

    if (!r->opts.alloc) return;
    memcpy(text, " alloc ", n);
    n += render_utoa(text + n, count);
    render_put(r, text, n);
}

/* --alloc: a call's objects into the report, by the name it is shown by. */
static int render_alloc_note(struct render *r, uint64_t method_id, uint64_t count)
{
    const struct render_name *n;

    if (!r->opts.alloc || !r->names_cap) return CLI_OK;
    n = &r->names[render_names_slot(r->names, r->names_cap, method_id)];
    if (!n->name || alloc_report_method(&r->alloc, n->name, n->len, count) == CLI_OK) return CLI_OK;
    snprintf(r->errstr, sizeof(r->errstr), "out of memory");
    return CLI_ERR;
}

/* CALL, CALL_ARGS: the name, left open for the duration. */
static int render_call(struct render *r, const struct rbtrace_event *ev)
{
    long ti = render_thread_index(r, ev->thread_id);
    struct render_thread *t;

    if (ti < 0) return CLI_ERR;
    t = &r->threads[ti];
    if (render_close_line(r) != CLI_OK) return CLI_ERR;
    render_line_start(r, t, &ev->time_ns, t->depth);
    render_name(r, ev->method_id);
    render_args(r, ev);
    if (render_push(r, t, ev->method_id, ev->time_ns) != CLI_OK) return CLI_ERR;
    r->line_open = 1;
    r->open_thread = (size_t)ti;
    r->open_depth = t->depth;
    if (t->depth > r->max_nesting) r->max_nesting = t->depth;
    return render_check_io(r);
}

/* The depth (1-based) of the innermost open call of method_id; 0 if none. */
static size_t render_find_frame(const struct render_thread *t, uint64_t method_id)
{
    size_t d;

    for (d = t->depth; d > 0; d--)
        if (t->frames[d - 1].method_id == method_id) return d;
    return 0;
}

/*
 * RETURN: the duration on the call's open line, or on a line of its own.
 * A return with no matching open call (we attached mid-call, or events were
 * lost) prints nothing; calls above the matching one lost their returns and
 * are dropped.
 */
static int render_return(struct render *r, const struct rbtrace_event *ev)
{
    long ti = render_thread_index(r, ev->thread_id);
    struct render_thread *t;
    size_t d, i;
    uint64_t start_ns, gvl_ns, alloc;

    if (ti < 0) return CLI_ERR;
    t = &r->threads[ti];
    d = render_find_frame(t, ev->method_id);
    if (d == 0) return CLI_OK;
    start_ns = t->frames[d - 1].start_ns;
    /* The calls above it lost their returns: their GVL waits were in it. */
    for (i = d; i < t->depth; i++) t->frames[d - 1].gvl_ns += t->frames[i].gvl_ns;
    for (i = d; i < t->depth; i++) t->frames[d - 1].alloc += t->frames[i].alloc;
    gvl_ns = t->frames[d - 1].gvl_ns;
    alloc = t->frames[d - 1].alloc;

    if (r->line_open && r->open_thread == (size_t)ti && r->open_depth == d && t->depth == d) {
        render_duration(r, start_ns, ev->time_ns);
    } else {
        if (render_close_line(r) != CLI_OK) return CLI_ERR;
        render_line_start(r, t, NULL, d - 1);
        render_name(r, ev->method_id);
        render_duration(r, start_ns, ev->time_ns);
    }
    render_gvl_total(r, gvl_ns);
    render_alloc_total(r, alloc);
    render_putc(r, '\n');
    r->line_open = 0;
    t->depth = d - 1;
    if (d > 1) t->frames[d - 2].gvl_ns += gvl_ns; /* inside its caller too */
    if (d > 1) t->frames[d - 2].alloc += alloc;
    if (render_alloc_note(r, ev->method_id, alloc) != CLI_OK) return CLI_ERR;
    if (t->depth == 0 && r->max_nesting > 1) render_putc(r, '\n');
    return render_check_io(r);
}

/*
 * LOST: the dropped events may include returns, which would leave calls
 * open for good and indent everything after them deeper and deeper. Start
 * every stack afresh; returns of calls open before the loss print nothing.
 */
static int render_lost(struct render *r, const struct rbtrace_event *ev)
{
    size_t i;

    for (i = 0; i < r->n_threads; i++) r->threads[i].depth = 0;
    if (render_end_line(r) != CLI_OK) return CLI_ERR;
    fprintf(r->out, "*** %llu events lost\n", (unsigned long long)ev->number);
    return render_check_io(r);
}

/*
 * FORGET: the target started its method table afresh; the names below the
 * given id will not be used again, so they go (a long firehose over many
 * methods would otherwise pile them up). Open calls carry the old ids,
 * which later RETURNs no longer match: the stacks start afresh, as after
 * a loss, without a message.
 */
static int render_forget(struct render *r, const struct rbtrace_event *ev)
{
    size_t i;

    for (i = 0; i < r->names_cap; i++) {
        if (r->names[i].name && r->names[i].id < ev->number) {
            free(r->names[i].name);
            r->names[i].name = NULL;
            r->names_count--;
        }
    }
    /* Open addressing: what stayed is placed again, in a table as large. */
    if (r->names_count && render_names_rehash(r, r->names_cap) != CLI_OK) return CLI_ERR;
    for (i = 0; i < r->n_threads; i++) r->threads[i].depth = 0;
    return render_end_line(r);
}

/*
 * SLOW: "name <seconds>", indented by its depth among the watched calls;
 * a Rails request's slow calls nest 100 deep and more, which would push
 * the names off the screen: past RENDER_SLOW_INDENT_MAX levels the line is
 * indented that much and says its depth, "[d57] name <seconds>".
 */
static int render_slow(struct render *r, const struct rbtrace_event *ev)
{
    long ti = render_thread_index(r, ev->thread_id);
    int deep = ev->depth > RENDER_SLOW_INDENT_MAX;
    char text[24];
    size_t n;

    if (ti < 0) return CLI_ERR;
    if (render_close_line(r) != CLI_OK) return CLI_ERR;
    render_line_start(r, &r->threads[ti], &ev->time_ns,
                      deep ? RENDER_SLOW_INDENT_MAX : (size_t)ev->depth);
    if (deep) {
        text[0] = '[';
        text[1] = 'd';
        n = 2 + render_utoa(text + 2, ev->depth);
        text[n++] = ']';
        text[n++] = ' ';
        render_put(r, text, n);
    }
    render_name(r, ev->method_id);
    render_duration(r, 0, ev->duration_ns);
    render_putc(r, '\n');
    return render_check_io(r);
}

/*
 * GC, inline at the depth of the thread it ran on:
 *   GC major (oldgen) by newobj <0.012000> (mark 0.010000, sweep 0.002000)
 *   GC minor by newobj <0.000800> (mark 0.000600, sweep 0.000200)
 */
static int render_gc(struct render *r, const struct rbtrace_event *ev)
{
    long ti = render_thread_index(r, ev->thread_id);
    char num[RENDER_SECONDS_MAX];

    if (ti < 0) return CLI_ERR;
    if (render_close_line(r) != CLI_OK) return CLI_ERR;
    render_line_start(r, &r->threads[ti], &ev->time_ns, r->threads[ti].depth);
    if (ev->text.len) {
        RENDER_PUT_LITERAL(r, "GC major (");
        render_text(r, ev->text);
        RENDER_PUT_LITERAL(r, ") by ");
    } else {
        RENDER_PUT_LITERAL(r, "GC minor by ");
    }
    render_text(r, ev->text2);
    if (!r->opts.no_duration) {
        render_duration(r, 0, ev->duration_ns);
        RENDER_PUT_LITERAL(r, " (mark ");
        render_put(r, num, render_format_seconds(num, ev->mark_ns));
        RENDER_PUT_LITERAL(r, ", sweep ");
        render_put(r, num, render_format_seconds(num, ev->sweep_ns));
        render_putc(r, ')');
    }
    render_putc(r, '\n');
    return render_check_io(r);
}

/* A re-raise folded into its thread's held raise line: counted, and its
 * location kept (escaped) for when the line is printed. */
static int render_fold_reraise(struct render *r, struct render_held *h, struct rbtrace_str where)
{
    size_t need = (size_t)where.len * ESCAPE_MAX_PER_BYTE;

    if (need > h->last_at_cap) {
        char *at = realloc(h->last_at, need);
        if (!at) return render_fail(r, "out of memory");
        h->last_at = at;
        h->last_at_cap = need;
    }
    h->last_at_len = escape_text(h->last_at, where.ptr, where.len, 0);
    h->reraises++;
    return CLI_OK;
}

/* "raise Class: message at where", or "re-raise ...", without the newline. */
static void render_raise_text(struct render *r, int reraise, struct rbtrace_str klass,
                              struct rbtrace_str message, struct rbtrace_str where)
{
    if (reraise) RENDER_PUT_LITERAL(r, "re-");
    RENDER_PUT_LITERAL(r, "raise ");
    render_text(r, klass);
    if (message.len > 0) { /* none: the target could not read one without the app's code */
        RENDER_PUT_LITERAL(r, ": ");
        render_text(r, message);
    }
    RENDER_PUT_LITERAL(r, " at ");
    render_text(r, where);
}

/* What a held raise line says of its re-raises:
 * " (re-raised at mw.rb:9)" or " (re-raised 4 times, last at mw.rb:9)". */
static void render_reraises(struct render *r, const struct render_held *h)
{
    char num[20];

    if (h->reraises == 0) return;
    if (h->reraises == 1) {
        RENDER_PUT_LITERAL(r, " (re-raised at ");
    } else {
        RENDER_PUT_LITERAL(r, " (re-raised ");
        render_put(r, num, render_utoa(num, h->reraises));
        RENDER_PUT_LITERAL(r, " times, last at ");
    }
    render_put(r, h->last_at, h->last_at_len);
    render_putc(r, ')');
}

/* Prints thread ti's held raise line, if any, with its re-raises. */
static int render_print_held(struct render *r, size_t ti)
{
    struct render_thread *t = &r->threads[ti];
    struct render_held *h = &t->held;
    struct rbtrace_str klass, message, where;

    /* A thread that never held one has no text (NULL): no offsets into it. */
    if (!t->holding) return CLI_OK;
    klass = (struct rbtrace_str){ h->text, h->class_len };
    message = (struct rbtrace_str){ h->text + h->class_len, h->message_len };
    where = (struct rbtrace_str){ h->text + h->class_len + h->message_len, h->where_len };
    if (render_close_line(r) != CLI_OK) return CLI_ERR;
    render_line_start(r, t, &h->time_ns, h->depth);
    render_raise_text(r, h->reraise, klass, message, where);
    render_reraises(r, h);
    render_putc(r, '\n');
    t->holding = 0;
    r->n_held--;
    return render_check_io(r);
}

/* Prints the held raise lines raised before before_ns, oldest first (all
 * of them for UINT64_MAX). */
static int render_print_held_before(struct render *r, uint64_t before_ns)
{
    while (r->n_held) {
        size_t i, oldest = r->n_threads;

        for (i = 0; i < r->n_threads; i++) {
            if (r->threads[i].holding && r->threads[i].held.time_ns < before_ns &&
                (oldest == r->n_threads ||
                 r->threads[i].held.time_ns < r->threads[oldest].held.time_ns))
                oldest = i;
        }
        if (oldest == r->n_threads) return CLI_OK;
        if (render_print_held(r, oldest) != CLI_OK) return CLI_ERR;
    }
    return CLI_OK;
}

int render_end_line(struct render *r)
{
    if (render_print_held_before(r, UINT64_MAX) != CLI_OK) return CLI_ERR;
    return render_close_line(r);
}

/* Holds ev, a raise, as thread ti's raise line, for its re-raises. */
static int render_hold(struct render *r, size_t ti, const struct rbtrace_event *ev)
{
    struct render_held *h = &r->threads[ti].held;
    size_t need = (size_t)ev->text.len + ev->text2.len + ev->text3.len;

    if (need > h->text_cap) {
        char *text = realloc(h->text, need);
        if (!text) return render_fail(r, "out of memory");
        h->text = text;
        h->text_cap = need;
    }
    /* memcpy of 0 bytes from a NULL text: not allowed, so each only if any */
    if (ev->text.len) memcpy(h->text, ev->text.ptr, ev->text.len);
    if (ev->text2.len) memcpy(h->text + ev->text.len, ev->text2.ptr, ev->text2.len);
    if (ev->text3.len) memcpy(h->text + ev->text.len + ev->text2.len, ev->text3.ptr, ev->text3.len);
    h->class_len = ev->text.len;
    h->message_len = ev->text2.len;
    h->where_len = ev->text3.len;
    h->time_ns = ev->time_ns;
    h->depth = r->threads[ti].depth;
    h->reraise = ev->number > 0;
    h->reraises = 0;
    r->threads[ti].holding = 1;
    r->n_held++;
    return CLI_OK;
}

/* RAISE, inline at the raising thread's depth:
 *   raise ArgumentError: bad value at app.rb:12
 * held for its re-raises to fold into (render.h), unless raise_all. */
static int render_raise(struct render *r, const struct rbtrace_event *ev)
{
    long ti = render_thread_index(r, ev->thread_id);
    struct render_thread *t;

    if (ti < 0) return CLI_ERR;
    t = &r->threads[ti];
    if (r->opts.raise_all) {
        if (render_close_line(r) != CLI_OK) return CLI_ERR;
        render_line_start(r, t, &ev->time_ns, t->depth);
        render_raise_text(r, ev->number > 0, ev->text, ev->text2, ev->text3);
        render_putc(r, '\n');
        return render_check_io(r);
    }
    if (ev->number > 0 && t->holding) return render_fold_reraise(r, &t->held, ev->text3);
    if (render_print_held(r, (size_t)ti) != CLI_OK) return CLI_ERR;
    return render_hold(r, (size_t)ti, ev);
}

/*
 * Before an event, the held raise lines it ends: its own thread's, for an
 * event of another kind (a raise sees to its own), and those raised
 * RENDER_HOLD_NS or more before it.
 */
static int render_release_held(struct render *r, const struct rbtrace_event *ev)
{
    long ti;

    switch (ev->type) {
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_CALL_ARGS:
    case RBTRACE_EV_RETURN:
    case RBTRACE_EV_SLOW:
    case RBTRACE_EV_GC:
        ti = render_thread_index(r, ev->thread_id);
        if (ti < 0) return CLI_ERR;
        if (render_print_held(r, (size_t)ti) != CLI_OK) return CLI_ERR;
        break;
    case RBTRACE_EV_RAISE:
        break;
    default:
        return CLI_OK;
    }
    if (ev->time_ns <= RENDER_HOLD_NS) return CLI_OK;
    return render_print_held_before(r, ev->time_ns - RENDER_HOLD_NS + 1);
}

/* The index of thread id in r->threads, or -1 if it was never seen. */
static long render_thread_known(struct render *r, uint64_t id)
{
    size_t i;

    for (i = 0; i < r->n_threads; i++)
        if (r->threads[i].id == id) return (long)i;
    return -1;
}

/*
 * GVL (--gvl): the wait goes to the innermost open call of its thread
 * (and from there to its callers as they return); one longer than the
 * threshold prints a line at the thread's depth:
 *   GVL wait <0.012345>
 * A short wait of a thread never seen makes no thread of it (no [tN]);
 * the target's first, of wait 0, says that waits are measured from then.
 */
static int render_gvl(struct render *r, const struct rbtrace_event *ev)
{
    long ti = render_thread_known(r, ev->thread_id);
    struct render_thread *t;

    r->gvl_live = 1;
    if (ti < 0 && ev->duration_ns <= r->opts.gvl_threshold_ns) return CLI_OK;
    if (ti < 0 && (ti = render_thread_index(r, ev->thread_id)) < 0) return CLI_ERR;
    t = &r->threads[ti];
    if (t->depth) t->frames[t->depth - 1].gvl_ns += ev->duration_ns;
    if (ev->duration_ns <= r->opts.gvl_threshold_ns) return CLI_OK;
    if (render_end_line(r) != CLI_OK) return CLI_ERR;
    render_line_start(r, t, &ev->time_ns, t->depth);
    RENDER_PUT_LITERAL(r, "GVL wait");
    render_duration(r, 0, ev->duration_ns);
    render_putc(r, '\n');
    return render_check_io(r);
}

/*
 * ALLOC (--alloc): the objects go to the innermost open call of their
 * thread (and from there to its callers as they return). Those of a
 * thread with no open call are no traced call's: not shown.
 */
static int render_alloc(struct render *r, const struct rbtrace_event *ev)
{
    long ti = render_thread_known(r, ev->thread_id);
    struct render_thread *t;

    r->alloc.total += ev->count;
    if (ti < 0) return CLI_OK;
    t = &r->threads[ti];
    if (t->depth) t->frames[t->depth - 1].alloc += ev->count;
    return CLI_OK;
}

/* ALLOC_SITE (--alloc): kept for the report at the end. */
static int render_alloc_site(struct render *r, const struct rbtrace_event *ev)
{
    if (alloc_report_site(&r->alloc, ev) == CLI_OK) return CLI_OK;
    snprintf(r->errstr, sizeof(r->errstr), "out of memory");
    return CLI_ERR;
}

int render_finish(struct render *r)
{
    if (render_end_line(r) != CLI_OK) return CLI_ERR;
    alloc_report_write(&r->alloc, r->out);
    return render_check_io(r);
}

/*
 * THREAD_NAME (--thread-names): the thread's name, kept for its lines
 * escaped and cut (render.h); "" takes it away. Its ']' are escaped too:
 * the prefix ends at the first ']'.
 */
static int render_thread_name(struct render *r, const struct rbtrace_event *ev)
{
    size_t cut = escape_cut(ev->text.ptr, ev->text.len, RENDER_THREAD_NAME_MAX);
    size_t i = 0, n = 0;
    long ti;
    char *name;

    if (!r->opts.thread_names) return CLI_OK;
    if ((ti = render_thread_index(r, ev->thread_id)) < 0) return CLI_ERR;
    free(r->threads[ti].name);
    r->threads[ti].name = NULL;
    r->threads[ti].name_len = 0;
    if (cut == 0) return CLI_OK;
    name = malloc(cut * ESCAPE_MAX_PER_BYTE + 3);
    if (!name) return render_fail(r, "out of memory");
    while (i < cut) {
        const char *bracket = memchr(ev->text.ptr + i, ']', cut - i);
        size_t part = bracket ? (size_t)(bracket - ev->text.ptr) - i : cut - i;

        n += escape_text(name + n, ev->text.ptr + i, part, 0);
        i += part;
        if (bracket) {
            memcpy(name + n, "\\x5d", 4);
            n += 4;
            i++;
        }
    }
    if (cut < ev->text.len) {
        memcpy(name + n, "...", 3);
        n += 3;
    }
    r->threads[ti].name = name;
    r->threads[ti].name_len = n;
    return CLI_OK;
}

/* The events a trace is made of, which the target counts when it drops one. */
static void render_count(struct render *r, const struct rbtrace_event *ev)
{
    switch (ev->type) {
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_CALL_ARGS:
    case RBTRACE_EV_RETURN:
    case RBTRACE_EV_SLOW:
    case RBTRACE_EV_GC:
    case RBTRACE_EV_RAISE:
    case RBTRACE_EV_GVL:
    case RBTRACE_EV_ALLOC:
        r->received++;
        break;
    case RBTRACE_EV_LOST:
        r->lost += ev->number;
        break;
    default:
        break;
    }
}

int render_event(struct render *r, const struct rbtrace_event *ev)
{
    render_count(r, ev);
    /* Not the app's lines: a held raise line stays held. */
    if (ev->type == RBTRACE_EV_ALLOC) return render_alloc(r, ev);
    if (ev->type == RBTRACE_EV_ALLOC_SITE) return render_alloc_site(r, ev);
    if (r->n_held && render_release_held(r, ev) != CLI_OK) return CLI_ERR;
    switch (ev->type) {
    case RBTRACE_EV_METHOD:
        return render_method(r, ev);
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_CALL_ARGS:
        return render_call(r, ev);
    case RBTRACE_EV_RETURN:
        return render_return(r, ev);
    case RBTRACE_EV_LOST:
        return render_lost(r, ev);
    case RBTRACE_EV_FORGET:
        return render_forget(r, ev);
    case RBTRACE_EV_SLOW:
        return render_slow(r, ev);
    case RBTRACE_EV_GC:
        return render_gc(r, ev);
    case RBTRACE_EV_RAISE:
        return render_raise(r, ev);
    case RBTRACE_EV_GVL:
        return render_gvl(r, ev);
    case RBTRACE_EV_THREAD_NAME:
        return render_thread_name(r, ev);
    default:
        return CLI_OK;
    }
}
