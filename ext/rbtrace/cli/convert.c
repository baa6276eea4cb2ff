/*
 * convert.c - a saved text trace back into events (convert.h).
 *
 * One line at a time, in the order render.c wrote them: a prefix or two
 * ([PID], [tN]), a -t time, the indentation, then the line's kind, told
 * by how it starts and ends. The state is what the text renderer kept:
 * per thread the open calls (with their indentation, which tells a
 * return line from a nested call of the same method), and the names,
 * each given an id (a METHOD event) when first read.
 *
 * Times: with -t, each call's start is its time of day, counted from the
 * first; without, they are laid out from the durations (convert.h). The
 * durations are the text's, to the microsecond.
 */
#define _GNU_SOURCE /* memmem, memrchr */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "convert.h"

#define CONVERT_NAMES_MIN 64
#define CONVERT_FRAMES_MIN 16
#define CONVERT_THREADS_MIN 4
/* Width of "HH:MM:SS.uuuuuu ", the -t column. */
#define CONVERT_TIME_WIDTH 16
/* The deepest --slow depth given a start of its own (deeper share it). */
#define CONVERT_SLOW_DEPTH_MAX 4096
#define CONVERT_DAY_NS (86400ULL * 1000000000ULL)
#define CONVERT_UNKNOWN "(unknown)"

/* A line's text left to read. */
struct convert_span {
    const char *p;
    size_t len;
};

static int convert_fail(struct convert *c, const char *expected)
{
    snprintf(c->errstr, sizeof(c->errstr), "line %llu: expected %s", (unsigned long long)c->line_no,
             expected);
    return CLI_ERR;
}

static int convert_oom(struct convert *c)
{
    snprintf(c->errstr, sizeof(c->errstr), "line %llu: out of memory",
             (unsigned long long)c->line_no);
    return CLI_ERR;
}

/* The format refused an event: its own error says why (errstr empty). */
static int convert_output_failed(struct convert *c)
{
    c->errstr[0] = '\0';
    return CLI_ERR;
}

/* Where lit first is in p[0, len), or NULL. */
static const char *convert_find(const char *p, size_t len, const char *lit)
{
    return memmem(p, len, lit, strlen(lit));
}

int convert_init(struct convert *c, convert_emit_fn emit, void *ctx)
{
    memset(c, 0, sizeof(*c));
    c->emit = emit;
    c->ctx = ctx;
    c->unit = CONVERT_UNIT_DEFAULT;
    c->ev = calloc(1, sizeof(*c->ev));
    return c->ev ? CLI_OK : CLI_ERR;
}

void convert_free(struct convert *c)
{
    size_t i;

    for (i = 0; i < c->names_cap; i++) free(c->names[i].text);
    free(c->names);
    for (i = 0; i < c->n_threads; i++) {
        free(c->threads[i].frames);
        free(c->threads[i].slow_next);
    }
    free(c->threads);
    id_index_free(&c->thread_index);
    free(c->ev);
    memset(c, 0, sizeof(*c));
}

/* ---- small readers ---- */

static int convert_starts(const struct convert_span *s, const char *lit)
{
    size_t n = strlen(lit);
    return s->len >= n && !memcmp(s->p, lit, n);
}

static void convert_skip(struct convert_span *s, size_t n)
{
    s->p += n;
    s->len -= n;
}

/* Decimal digits at the start of s: their count (0: none), *v their value;
 * more than 18 digits is no number of a trace's. */
static size_t convert_number(const struct convert_span *s, uint64_t *v)
{
    size_t n = 0;

    *v = 0;
    while (n < s->len && n < 19 && s->p[n] >= '0' && s->p[n] <= '9')
        *v = *v * 10 + (uint64_t)(s->p[n++] - '0');
    return n == 19 ? 0 : n;
}

/* "[" number "] " with the letter (0: none) after '[': *v, and s past it.
 * A thread's may carry its name: "[t2 puma srv tp 001] " (render.h). */
static int convert_bracket(struct convert_span *s, char letter, uint64_t *v)
{
    struct convert_span t = *s;
    size_t n;

    if (!convert_starts(&t, "[")) return 0;
    convert_skip(&t, 1);
    if (letter) {
        if (!t.len || t.p[0] != letter) return 0;
        convert_skip(&t, 1);
    }
    if (!(n = convert_number(&t, v))) return 0;
    convert_skip(&t, n);
    if (letter == 't' && convert_starts(&t, " ")) {
        /* --thread-names: "[tN name] ", the name's own ']' escaped */
        const char *end = memchr(t.p, ']', t.len);

        if (!end) return 0;
        convert_skip(&t, (size_t)(end - t.p));
    }
    if (!convert_starts(&t, "] ")) return 0;
    convert_skip(&t, 2);
    *s = t;
    return 1;
}

/* "S.uuuuuu" (render_format_seconds) at p[0, len) whole: ns, or -1. */
static int convert_seconds(const char *p, size_t len, uint64_t *ns)
{
    struct convert_span s = { p, len };
    uint64_t secs, us;
    size_t n = convert_number(&s, &secs);

    if (!n || n + 7 != len || p[n] != '.') return -1;
    convert_skip(&s, n + 1);
    if (convert_number(&s, &us) != 6) return -1;
    if (secs > UINT64_MAX / 1000000000ULL - 1) return -1;
    *ns = secs * 1000000000ULL + us * 1000ULL;
    return 0;
}

/* " <S.uuuuuu>" at the end of s: the duration, s shortened; 0 if none,
 * -1 if it is there but no duration. */
static int convert_duration(struct convert_span *s, uint64_t *ns)
{
    const char *lt;

    if (!s->len || s->p[s->len - 1] != '>') return 0;
    lt = memrchr(s->p, '<', s->len);
    if (!lt || lt == s->p || lt[-1] != ' ') return 0;
    /* "#<Class:0x1>" ends in '>' too: only digits make a duration. */
    if (lt[1] < '0' || lt[1] > '9') return 0;
    if (convert_seconds(lt + 1, (size_t)(s->p + s->len - 1 - (lt + 1)), ns) != 0) return -1;
    s->len = (size_t)(lt - 1 - s->p);
    return 1;
}

/* -t's "HH:MM:SS.uuuuuu " at the start of s: the time of day in ns. */
static int convert_time_of_day(struct convert_span *s, uint64_t *ns)
{
    const char *p = s->p;
    uint64_t h, m, sec, us = 0;
    int i;

    if (s->len < CONVERT_TIME_WIDTH || p[2] != ':' || p[5] != ':' || p[8] != '.' || p[15] != ' ')
        return 0;
    for (i = 0; i < 15; i++) {
        if (i == 2 || i == 5 || i == 8) continue;
        if (p[i] < '0' || p[i] > '9') return 0;
    }
    h = (uint64_t)((p[0] - '0') * 10 + (p[1] - '0'));
    m = (uint64_t)((p[3] - '0') * 10 + (p[4] - '0'));
    sec = (uint64_t)((p[6] - '0') * 10 + (p[7] - '0'));
    for (i = 9; i < 15; i++) us = us * 10 + (uint64_t)(p[i] - '0');
    if (h > 23 || m > 59 || sec > 60) return 0;
    *ns = ((h * 3600 + m * 60 + sec) * 1000000ULL + us) * 1000ULL;
    convert_skip(s, CONVERT_TIME_WIDTH);
    return 1;
}

/* The time of day as ns since the trace's first, across midnights. */
static uint64_t convert_trace_time(struct convert *c, uint64_t wall_ns)
{
    if (!c->have_origin) {
        c->origin_ns = wall_ns;
        c->have_origin = 1;
    } else if (wall_ns + CONVERT_DAY_NS / 2 < c->last_wall_ns) {
        c->day_ns += CONVERT_DAY_NS; /* 23:59:59 then 00:00:00 */
    }
    c->last_wall_ns = wall_ns;
    return c->day_ns + wall_ns >= c->origin_ns ? c->day_ns + wall_ns - c->origin_ns : 0;
}

/* ---- names and threads ---- */

static uint64_t convert_hash(const char *p, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    size_t i;

    for (i = 0; i < len; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static size_t convert_name_slot(const struct convert_name *names, size_t cap, const char *p,
                                size_t len)
{
    size_t i = (size_t)convert_hash(p, len) & (cap - 1);

    while (names[i].text && (names[i].len != len || memcmp(names[i].text, p, len)))
        i = (i + 1) & (cap - 1);
    return i;
}

static int convert_names_grow(struct convert *c)
{
    size_t cap = c->names_cap ? c->names_cap * 2 : CONVERT_NAMES_MIN, i;
    struct convert_name *names = calloc(cap, sizeof(*names));

    if (!names) return convert_oom(c);
    for (i = 0; i < c->names_cap; i++) {
        if (c->names[i].text)
            names[convert_name_slot(names, cap, c->names[i].text, c->names[i].len)] = c->names[i];
    }
    free(c->names);
    c->names = names;
    c->names_cap = cap;
    return CLI_OK;
}

/* The id of the method named p[0, len), a METHOD event when new. */
static int convert_method(struct convert *c, const char *p, size_t len, uint64_t *id)
{
    struct convert_name *slot;

    if ((c->names_count + 1) * 2 > c->names_cap && convert_names_grow(c) != CLI_OK) return CLI_ERR;
    slot = &c->names[convert_name_slot(c->names, c->names_cap, p, len)];
    if (!slot->text) {
        if (!(slot->text = malloc(len + 1))) return convert_oom(c);
        memcpy(slot->text, p, len);
        slot->text[len] = '\0';
        slot->len = len;
        slot->id = ++c->names_count;
        memset(c->ev, 0, sizeof(*c->ev));
        c->ev->type = RBTRACE_EV_METHOD;
        c->ev->method_id = slot->id;
        c->ev->text.ptr = slot->text;
        c->ev->text.len = (uint32_t)len;
        if (c->emit(c->ctx, c->ev) != CLI_OK) return convert_output_failed(c);
    }
    *id = slot->id;
    return CLI_OK;
}

/* The thread [PID] [tN], added if new; NULL when out of memory. Found by
 * a hash (a trace of many threads: a lookup per line). */
static struct convert_thread *convert_thread(struct convert *c, uint64_t pid, uint64_t ordinal)
{
    struct convert_thread *t;
    long found = id_index_get(&c->thread_index, pid, ordinal);

    if (found >= 0) return &c->threads[found];
    if (c->n_threads == c->threads_cap) {
        size_t cap = c->threads_cap ? c->threads_cap * 2 : CONVERT_THREADS_MIN;
        if (!(t = realloc(c->threads, cap * sizeof(*t)))) return NULL;
        c->threads = t;
        c->threads_cap = cap;
    }
    if (id_index_put(&c->thread_index, pid, ordinal, c->n_threads) != CLI_OK) return NULL;
    t = &c->threads[c->n_threads];
    memset(t, 0, sizeof(*t));
    t->pid = pid;
    t->ordinal = ordinal;
    /* The id the formats key the thread by: PID << 20 | N as before where
     * it is exact, else one of a space no such id reaches (bit 63). */
    t->key = pid < (1ULL << 43) && ordinal < (1ULL << 20) ? pid << 20 | ordinal
                                                          : 1ULL << 63 | c->n_threads;
    c->n_threads++;
    return t;
}

static int convert_push(struct convert *c, struct convert_thread *t, uint64_t id, uint64_t start,
                        size_t indent)
{
    if (t->depth == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : CONVERT_FRAMES_MIN;
        struct convert_frame *f = realloc(t->frames, cap * sizeof(*f));
        if (!f) return convert_oom(c);
        t->frames = f;
        t->cap = cap;
    }
    t->frames[t->depth].method_id = id;
    t->frames[t->depth].start_ns = start;
    t->frames[t->depth].indent = indent;
    t->depth++;
    return CLI_OK;
}

/* ---- events out ---- */

static int convert_emit(struct convert *c)
{
    return c->emit(c->ctx, c->ev) == CLI_OK ? CLI_OK : convert_output_failed(c);
}

static int convert_emit_call(struct convert *c, enum rbtrace_event_type type, uint64_t thread,
                             uint64_t time_ns, uint64_t id)
{
    c->ev->type = type;
    c->ev->thread_id = thread;
    c->ev->time_ns = time_ns;
    c->ev->method_id = id;
    return convert_emit(c);
}

/* The expressions of "(a=1, b=2)": pairs split at ", " before a '=' (a
 * value holding ", x=" splits wrongly: the text cannot tell). */
static void convert_exprs(struct convert *c, struct convert_span args)
{
    struct rbtrace_event *ev = c->ev;
    size_t i = 0, start = 0;

    ev->n_exprs = 0;
    while (i <= args.len) {
        int end = i == args.len;
        if (end ||
            (i + 1 < args.len && args.p[i] == ',' && args.p[i + 1] == ' ' &&
             memchr(args.p + i + 2, '=', args.len - i - 2) &&
             memchr(args.p + start, '=', i - start))) {
            const char *seg = args.p + start, *eq = memchr(seg, '=', i - start);
            if (eq && ev->n_exprs < RBTRACE_EXPRS_MAX) {
                ev->exprs[ev->n_exprs].ptr = seg;
                ev->exprs[ev->n_exprs].len = (uint32_t)(eq - seg);
                ev->values[ev->n_exprs].ptr = eq + 1;
                ev->values[ev->n_exprs].len = (uint32_t)(args.p + i - eq - 1);
                ev->n_exprs++;
            }
            if (end) break;
            start = i + 2;
            i += 2;
            continue;
        }
        i++;
    }
}

/* ---- the kinds of line ---- */

/* "*** 12 events lost", or a notice (skipped). */
static int convert_notice(struct convert *c, struct convert_span s)
{
    uint64_t n;
    size_t digits;

    convert_skip(&s, 4);
    digits = convert_number(&s, &n);
    if (!digits || s.len != digits + 12 || memcmp(s.p + digits, " events lost", 12)) return CLI_OK;
    memset(c->ev, 0, sizeof(*c->ev));
    c->ev->type = RBTRACE_EV_LOST;
    c->ev->number = n;
    return convert_emit(c);
}

/* "GC minor by X <d> (mark m, sweep s)" or "GC major (Y) by X <d> ...". */
static int convert_gc(struct convert *c, struct convert_thread *t, struct convert_span s,
                      uint64_t start)
{
    static const char expected[] = "a GC line: \"GC minor by WHY <S.uuuuuu> (mark S.uuuuuu, "
                                   "sweep S.uuuuuu)\" or \"GC major (WHY) by WHY ...\"";
    struct rbtrace_event *ev = c->ev;
    const char *mark, *comma, *close;
    struct convert_span rest;

    memset(ev, 0, sizeof(*ev));
    ev->type = RBTRACE_EV_GC;
    ev->thread_id = t->key;
    if (convert_starts(&s, "GC major (")) {
        convert_skip(&s, 10);
        if (!(close = memchr(s.p, ')', s.len)) || (size_t)(close - s.p) + 5 > s.len ||
            memcmp(close, ") by ", 5))
            return convert_fail(c, expected);
        ev->text.ptr = s.p;
        ev->text.len = (uint32_t)(close - s.p);
        convert_skip(&s, (size_t)(close - s.p) + 5);
    } else if (convert_starts(&s, "GC minor by ")) {
        convert_skip(&s, 12);
    } else {
        return convert_fail(c, expected);
    }
    /* "X <d> (mark m, sweep s)": the parenthesis first, then the duration. */
    if (!(mark = convert_find(s.p, s.len, " (mark "))) return convert_fail(c, expected);
    rest.p = mark + 7;
    rest.len = s.len - (size_t)(rest.p - s.p);
    if (!rest.len || rest.p[rest.len - 1] != ')' || !(comma = memchr(rest.p, ',', rest.len)) ||
        convert_seconds(rest.p, (size_t)(comma - rest.p), &ev->mark_ns) != 0 ||
        (size_t)(rest.p + rest.len - comma) < 8 || memcmp(comma, ", sweep ", 8) ||
        convert_seconds(comma + 8, (size_t)(rest.p + rest.len - 1 - (comma + 8)), &ev->sweep_ns) !=
            0)
        return convert_fail(c, expected);
    s.len = (size_t)(mark - s.p);
    if (convert_duration(&s, &ev->duration_ns) != 1) return convert_fail(c, expected);
    ev->text2.ptr = s.p;
    ev->text2.len = (uint32_t)s.len;
    ev->time_ns = start;
    if (!c->timed) t->cursor_ns = start + ev->duration_ns;
    return convert_emit(c);
}

/* The original gem's "garbage_collect", with " <d>" when it had the end. */
static int convert_old_gc(struct convert *c, struct convert_thread *t, struct convert_span s,
                          uint64_t start)
{
    struct rbtrace_event *ev = c->ev;

    memset(ev, 0, sizeof(*ev));
    ev->type = RBTRACE_EV_GC;
    ev->thread_id = t->key;
    ev->time_ns = start;
    if (convert_duration(&s, &ev->duration_ns) < 0 || s.len != 15)
        return convert_fail(c, "the original gem's GC line: \"garbage_collect <S.uuuuuu>\"");
    if (!c->timed) t->cursor_ns = start + ev->duration_ns;
    return convert_emit(c);
}

/* "raise E: message at where", "re-raise ...", with " (re-raised ...)". */
static int convert_raise(struct convert *c, struct convert_thread *t, struct convert_span s,
                         uint64_t start)
{
    struct rbtrace_event *ev = c->ev;
    const char *at = NULL, *colon, *p;

    memset(ev, 0, sizeof(*ev));
    ev->type = RBTRACE_EV_RAISE;
    ev->thread_id = t->key;
    ev->time_ns = start;
    if (convert_starts(&s, "re-")) {
        ev->number = 1;
        convert_skip(&s, 3);
    }
    convert_skip(&s, 6); /* "raise " */
    /* " (re-raised ...)" folded into the line: the first raise is the event. */
    if (s.len && s.p[s.len - 1] == ')') {
        const char *fold = convert_find(s.p, s.len, " (re-raised ");
        if (fold) s.len = (size_t)(fold - s.p);
    }
    for (p = s.p; (p = convert_find(p, s.len - (size_t)(p - s.p), " at ")); p += 4) at = p;
    if (!at) return convert_fail(c, "a raise line: \"raise Class: message at FILE:LINE\"");
    ev->text3.ptr = at + 4;
    ev->text3.len = (uint32_t)(s.p + s.len - at - 4);
    colon = convert_find(s.p, (size_t)(at - s.p), ": ");
    ev->text.ptr = s.p;
    ev->text.len = (uint32_t)((colon ? colon : at) - s.p);
    if (colon) {
        ev->text2.ptr = colon + 2;
        ev->text2.len = (uint32_t)(at - colon - 2);
    }
    return convert_emit(c);
}

/* Whether p[0, len) can be a method's name as the text shows it:
 * "Class#method", "Class.method", "(unknown)", or (the original gem's, for
 * a method of no class it knew) a bare "method"; escaped, so no space or
 * control byte. */
static int convert_valid_name(const char *p, size_t len)
{
    size_t i;

    if (!len) return 0;
    for (i = 0; i < len; i++)
        if (p[i] == ' ' || (unsigned char)p[i] < 0x20 || p[i] == 0x7f) return 0;
    return 1;
}

/* --slow's line: a whole call printed at its end, at its depth. */
static int convert_slow(struct convert *c, struct convert_thread *t, uint64_t id, uint64_t depth,
                        const uint64_t *time_ns, uint64_t duration)
{
    size_t d = depth < CONVERT_SLOW_DEPTH_MAX ? (size_t)depth : CONVERT_SLOW_DEPTH_MAX - 1, k;
    uint64_t start;

    if (d >= t->slow_cap) {
        size_t cap = d + 1 > 2 * t->slow_cap ? d + 1 : 2 * t->slow_cap;
        uint64_t *next = realloc(t->slow_next, cap * sizeof(*next));

        if (!next) return convert_oom(c);
        for (k = t->slow_cap; k < cap; k++) next[k] = t->slow_cap ? next[t->slow_cap - 1] : 0;
        t->slow_next = next;
        t->slow_cap = cap;
    }
    /* Deeper calls come first (printed when they end) and start where
     * their caller will; a caller's end is where what follows starts. */
    start = time_ns ? *time_ns : t->slow_next[d];
    for (k = d; k < t->slow_cap; k++) t->slow_next[k] = start + duration;
    memset(c->ev, 0, sizeof(*c->ev));
    c->ev->type = RBTRACE_EV_SLOW;
    c->ev->thread_id = t->key;
    c->ev->time_ns = start;
    c->ev->method_id = id;
    c->ev->duration_ns = duration;
    c->ev->depth = depth;
    c->calls++;
    return convert_emit(c);
}

/* The open call this line returns from: same name, same indentation, and
 * not opened on the line just before (its return would be on its line). */
static long convert_returning(const struct convert *c, const struct convert_thread *t, uint64_t id,
                              size_t indent)
{
    size_t d;

    for (d = t->depth; d > 0; d--) {
        const struct convert_frame *f = &t->frames[d - 1];
        if (f->indent < indent) return -1;
        if (f->method_id == id && f->indent == indent)
            return d == t->depth && t->last_open_line + 1 == c->line_no ? -1 : (long)(d - 1);
    }
    return -1;
}

/* A call line: "name(args)", "name <d>", "name(args) <d>". */
static int convert_call(struct convert *c, struct convert_thread *t, struct convert_span s,
                        size_t indent, const uint64_t *time_ns)
{
    struct convert_span name = s, args = { NULL, 0 };
    uint64_t id, duration = 0, start, depth;
    const char *paren;
    int has_duration = convert_duration(&s, &duration);
    long ret;

    if (has_duration < 0)
        return convert_fail(c, "a duration \"<S.uuuuuu>\" at the end of the line");
    name = s;
    if (s.len && s.p[s.len - 1] == ')' && (paren = memchr(s.p, '(', s.len)) && paren != s.p &&
        !(s.len == sizeof(CONVERT_UNKNOWN) - 1 && !memcmp(s.p, CONVERT_UNKNOWN, s.len))) {
        name.len = (size_t)(paren - s.p);
        args.p = paren + 1;
        args.len = s.len - name.len - 2;
    }
    if (!convert_valid_name(name.p, name.len))
        return convert_fail(
            c,
            "a call (\"Class#method\", \"Class.method\", with \"(expr=value, ...)\" "
            "and \" <S.uuuuuu>\"), a GC or raise line, or \"*** ...\"");
    if (convert_method(c, name.p, name.len, &id) != CLI_OK) return CLI_ERR;

    if (has_duration && !args.p && (ret = convert_returning(c, t, id, indent)) >= 0) {
        uint64_t end = t->frames[ret].start_ns + duration;
        t->depth = (size_t)ret; /* the calls above it lost their returns */
        if (!c->timed && end > t->cursor_ns) t->cursor_ns = end;
        return convert_emit_call(c, RBTRACE_EV_RETURN, t->key, end, id);
    }
    if (!has_duration && convert_returning(c, t, id, indent) >= 0)
        return convert_fail(c,
                            "a return with its duration, \"name <S.uuuuuu>\" (a trace written "
                            "with -n has none, and --convert needs them)");
    /* A whole call with nothing open, indented: a --slow trace. */
    if (has_duration && !t->depth && indent > 0) c->slow = 1;
    if (has_duration && c->slow) {
        depth = c->unit ? indent / c->unit : 0;
        return convert_slow(c, t, id, depth, time_ns, duration);
    }
    start = time_ns ? *time_ns : t->cursor_ns;
    memset(c->ev, 0, sizeof(*c->ev));
    if (args.p) convert_exprs(c, args);
    c->calls++;
    if (convert_emit_call(c, args.p ? RBTRACE_EV_CALL_ARGS : RBTRACE_EV_CALL, t->key, start, id) !=
        CLI_OK)
        return CLI_ERR;
    if (has_duration) {
        if (!c->timed) t->cursor_ns = start + duration;
        memset(c->ev, 0, sizeof(*c->ev));
        return convert_emit_call(c, RBTRACE_EV_RETURN, t->key, start + duration, id);
    }
    if (!c->timed) t->cursor_ns = start;
    t->last_open_line = c->line_no;
    return convert_push(c, t, id, start, indent);
}

int convert_line(struct convert *c, const char *line, size_t len)
{
    struct convert_span s = { line, len };
    struct convert_thread *t;
    uint64_t pid = 0, ordinal = 1, wall, time_ns = 0, depth;
    int timed;
    size_t indent = 0, i;

    c->line_no++;
    if (len && line[len - 1] == '\r') s.len--;
    if (memchr(s.p, '\0', s.len)) return convert_fail(c, "text, not a NUL byte");
    convert_bracket(&s, 0, &pid);
    convert_bracket(&s, 't', &ordinal);
    if (!s.len) return CLI_OK; /* the blank line after an outermost call */
    if (convert_starts(&s, "*** ")) return convert_notice(c, s);
    if (!(t = convert_thread(c, pid, ordinal))) return convert_oom(c);

    timed = convert_time_of_day(&s, &wall);
    if (timed) {
        c->timed = 1;
        time_ns = convert_trace_time(c, wall);
    } else if (c->timed && s.len >= CONVERT_TIME_WIDTH) {
        convert_skip(&s, CONVERT_TIME_WIDTH); /* a return line's blank time */
    }
    while (indent < s.len && s.p[indent] == ' ') indent++;
    convert_skip(&s, indent);
    if (!s.len) return convert_fail(c, "something after the indentation");
    if (convert_starts(&s, "GC ")) return convert_gc(c, t, s, timed ? time_ns : t->cursor_ns);
    if (convert_starts(&s, "garbage_collect") && (s.len == 15 || s.p[15] == ' '))
        return convert_old_gc(c, t, s, timed ? time_ns : t->cursor_ns);
    if (convert_starts(&s, "raise ") || convert_starts(&s, "re-raise "))
        return convert_raise(c, t, s, timed ? time_ns : t->cursor_ns);
    if (convert_bracket(&s, 'd', &depth)) { /* "[d57] name <d>": --slow, deep */
        uint64_t id, duration;
        c->slow = 1;
        i = s.len;
        if (convert_duration(&s, &duration) != 1 || s.len == i)
            return convert_fail(c, "a slow call \"[dN] name <S.uuuuuu>\"");
        if (!convert_valid_name(s.p, s.len))
            return convert_fail(c, "a method's name after \"[dN] \"");
        if (convert_method(c, s.p, s.len, &id) != CLI_OK) return CLI_ERR;
        return convert_slow(c, t, id, depth, timed ? &time_ns : NULL, duration);
    }
    return convert_call(c, t, s, indent, timed ? &time_ns : NULL);
}
