/*
 * format_chrome.c - --format chrome: the Chrome trace event format
 * ({"traceEvents": [...]}), which Perfetto, chrome://tracing and
 * speedscope open.
 *
 * One event a line: a complete ("X") event per call when it returns (its
 * start and duration, in microseconds with three decimals), per slow call
 * and per GC (on a track of its own, tid 0, named "GC"); an instant ("i")
 * event per raise, on its thread, and per loss of events, for the whole
 * process, at the latest time seen before it. Thread names come as
 * metadata ("M") events as each thread first shows. docs/usage.md
 * ("--format chrome") lists the fields.
 *
 * The file is valid JSON however the trace ends: the opening is written
 * at once, each event after it with a comma first, and finish (which the
 * session calls on ^C, SIGTERM, the target's exit or death) writes the
 * calls still open, ended at the latest time seen, and the closing.
 * Only a client killed with SIGKILL leaves it open.
 */
#define _GNU_SOURCE /* fwrite_unlocked */
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "cli.h"
#include "escape.h"
#include "format.h"
#include "json.h"

/* The GC's track. */
#define CHROME_GC_TID 0

struct format_chrome {
    struct format base;
    struct calls calls;
    struct json_buf buf;  /* scratch: names, args, escaped text */
    struct json_buf line; /* scratch: a call's event */
    int gc_named;         /* the GC track's name was written */
    char pid[24];         /* ,"pid":P */
    size_t pid_len;
};

#define PUT_LITERAL(f, s) fwrite_unlocked((s), 1, sizeof(s) - 1, (f)->base.out)

static void put(struct format_chrome *f, const char *s, size_t len)
{
    fwrite_unlocked(s, 1, len, f->base.out);
}

static void put_num(struct format_chrome *f, const char *key, size_t key_len, uint64_t v)
{
    char num[24];

    put(f, key, key_len);
    put(f, num, json_utoa(num, v));
}

#define PUT_NUM(f, key, v) put_num((f), (key), sizeof(key) - 1, (v))

/* ,"ts":12.345 (microseconds) */
static void put_us(struct format_chrome *f, const char *key, size_t key_len, uint64_t ns)
{
    char num[32];

    put(f, key, key_len);
    put(f, num, json_us(num, ns));
}

#define PUT_US(f, key, ns) put_us((f), (key), sizeof(key) - 1, (ns))

/* "..." escaped. */
static int put_string(struct format_chrome *f, struct rbtrace_str s)
{
    size_t n = json_escape_buf(&f->buf, s.ptr, s.len);

    if (n == (size_t)-1) return format_fail(&f->base, "out of memory");
    fputc_unlocked('"', f->base.out);
    put(f, f->buf.p, n);
    fputc_unlocked('"', f->base.out);
    return CLI_OK;
}

/* A thread's track name: {"ph":"M","name":"thread_name",...}. */
static void chrome_thread_name(struct format_chrome *f, uint64_t tid, const char *name,
                               size_t name_len, uint64_t id)
{
    PUT_LITERAL(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\"");
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":", tid);
    PUT_LITERAL(f, ",\"args\":{\"name\":\"");
    put(f, name, name_len);
    if (id) PUT_NUM(f, " ", tid);
    PUT_LITERAL(f, "\"}}");
    if (id) {
        /* the sort order of the tracks: as the threads first showed */
        PUT_LITERAL(f, ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\"");
        put(f, f->pid, f->pid_len);
        PUT_NUM(f, ",\"tid\":", tid);
        PUT_NUM(f, ",\"args\":{\"sort_index\":", tid);
        PUT_LITERAL(f, "}}");
    }
}

/* A new thread's track name, "thread ID". */
static int chrome_thread_track(struct format *base, const struct calls_thread *t)
{
    chrome_thread_name((struct format_chrome *)base, t->ordinal, "thread", 6, t->id);
    return CLI_OK;
}

/*
 * THREAD_NAME (--thread-names, on by default in chrome): the track's name
 * again, "puma srv tp 001 (thread 2)": the name first, what a viewer's
 * narrow column shows; the number to match the json's and text's. Cut as
 * text cuts it (render.h); "" gives back "thread 2". Viewers take a
 * track's last name: a rename renames the track for the whole trace.
 */
static int chrome_thread_named(struct format *base, const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;
    size_t cut = escape_cut(ev->text.ptr, ev->text.len, RENDER_THREAD_NAME_MAX), n;
    int added;
    long ti = calls_thread(&f->calls, ev->thread_id, &added);
    uint64_t tid;

    if (ti < 0) return format_fail(&f->base, "out of memory");
    tid = f->calls.threads[ti].ordinal;
    if ((n = json_escape_buf(&f->buf, ev->text.ptr, cut)) == (size_t)-1)
        return format_fail(&f->base, "out of memory");
    PUT_LITERAL(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\"");
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":", tid);
    PUT_LITERAL(f, ",\"args\":{\"name\":\"");
    if (cut == 0) {
        PUT_NUM(f, "thread ", tid);
    } else {
        put(f, f->buf.p, n);
        if (cut < ev->text.len) PUT_LITERAL(f, "...");
        PUT_NUM(f, " (thread ", tid);
        PUT_LITERAL(f, ")");
    }
    PUT_LITERAL(f, "\"}}");
    if (added) {
        PUT_LITERAL(f, ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\"");
        put(f, f->pid, f->pid_len);
        PUT_NUM(f, ",\"tid\":", tid);
        PUT_NUM(f, ",\"args\":{\"sort_index\":", tid);
        PUT_LITERAL(f, "}}");
    }
    return format_check_io(&f->base);
}

/* The thread's index, its track named first if new; -1 when out of memory. */
static long chrome_thread(struct format_chrome *f, uint64_t id)
{
    return calls_walk_thread(&f->calls, &f->base, chrome_thread_track, id);
}

static int chrome_method(struct format *base, const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;
    size_t n = json_escape_buf(&f->buf, ev->text.ptr, ev->text.len);

    if (n == (size_t)-1 || calls_set_name(&f->calls, ev->method_id, f->buf.p, n) != CLI_OK)
        return format_fail(&f->base, "out of memory");
    return CLI_OK;
}

/* ,\n{"ph":"X","cat":CAT,"name":"...","pid":P,"tid":T,"ts":S,"dur":D */
static void chrome_complete(struct format_chrome *f, const char *cat, size_t cat_len,
                            uint64_t method_id, uint64_t tid, uint64_t start_ns, uint64_t dur_ns)
{
    const struct calls_name *n = calls_name(&f->calls, method_id);

    PUT_LITERAL(f, ",\n{\"ph\":\"X\",\"cat\":\"");
    put(f, cat, cat_len);
    PUT_LITERAL(f, "\",\"name\":\"");
    if (n) put(f, n->text, n->len);
    else PUT_LITERAL(f, "(unknown)");
    fputc_unlocked('"', f->base.out);
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":", tid);
    PUT_US(f, ",\"ts\":", start_ns);
    PUT_US(f, ",\"dur\":", dur_ns);
}

/* ,"args":{"expr":"value",...} kept with the call until it returns. */
static int chrome_args(struct format *base, struct calls_frame *frame,
                       const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;
    size_t n = 0;
    uint32_t i;

    if (json_buf_add(&f->buf, &n, ",\"args\":{") != CLI_OK) goto oom;
    for (i = 0; i < ev->n_exprs; i++) {
        if (json_buf_add(&f->buf, &n, i ? ",\"" : "\"") != CLI_OK ||
            json_buf_add_escaped(&f->buf, &n, ev->exprs[i].ptr, ev->exprs[i].len) != CLI_OK ||
            json_buf_add(&f->buf, &n, "\":\"") != CLI_OK ||
            json_buf_add_escaped(&f->buf, &n, ev->values[i].ptr, ev->values[i].len) != CLI_OK ||
            json_buf_add(&f->buf, &n, "\"") != CLI_OK)
            goto oom;
    }
    if (json_buf_add(&f->buf, &n, "}") != CLI_OK || !(frame->extra = malloc(n))) goto oom;
    memcpy(frame->extra, f->buf.p, n);
    frame->extra_len = n;
    return CLI_OK;
oom:
    return format_fail(&f->base, "out of memory");
}

/* Room for a call's event but its name and args. */
#define CHROME_CALL_FIXED 256

/* The call's args: its expressions' values, and with --alloc its objects
 * ("alloc", callees included). At most frame->extra_len + 40 bytes. */
static char *chrome_put_args(struct format_chrome *f, char *p, const struct calls_frame *frame)
{
    if (!f->base.opts.text.alloc)
        return frame->extra ? json_put(p, frame->extra, frame->extra_len) : p;
    if (frame->extra) {
        p = json_put(p, frame->extra, frame->extra_len - 1); /* without its '}' */
        p = JSON_PUT_LITERAL(p, ",\"alloc\":");
    } else {
        p = JSON_PUT_LITERAL(p, ",\"args\":{\"alloc\":");
    }
    p = json_put_u64(p, frame->alloc);
    *p++ = '}';
    return p;
}

/* A call's complete event, built whole and written at once: the hot path. */
static int chrome_call_event(struct format *base, const struct calls_thread *t,
                             const struct calls_frame *frame, uint64_t dur)
{
    struct format_chrome *f = (struct format_chrome *)base;
    const struct calls_name *name = calls_name(&f->calls, frame->method_id);
    char *p;

    if (json_buf_reserve(
            &f->line, (name ? name->len : 9) + frame->extra_len + f->pid_len + CHROME_CALL_FIXED) !=
        CLI_OK)
        return format_fail(&f->base, "out of memory");
    p = JSON_PUT_LITERAL(f->line.p, ",\n{\"ph\":\"X\",\"cat\":\"call\",\"name\":\"");
    p = name ? json_put(p, name->text, name->len) : JSON_PUT_LITERAL(p, "(unknown)");
    *p++ = '"';
    p = json_put(p, f->pid, f->pid_len);
    p = JSON_PUT_LITERAL(p, ",\"tid\":");
    p = json_put_u64(p, t->ordinal);
    p = JSON_PUT_LITERAL(p, ",\"ts\":");
    p += json_us(p, frame->start_ns);
    p = JSON_PUT_LITERAL(p, ",\"dur\":");
    p += json_us(p, dur);
    p = chrome_put_args(f, p, frame);
    *p++ = '}';
    put(f, f->line.p, (size_t)(p - f->line.p));
    return CLI_OK;
}

static int chrome_slow(struct format *base, const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;
    long ti = chrome_thread(f, ev->thread_id);

    if (ti < 0) return CLI_ERR;
    chrome_complete(f, "slow", 4, ev->method_id, f->calls.threads[ti].ordinal, ev->time_ns,
                    ev->duration_ns);
    PUT_NUM(f, ",\"args\":{\"depth\":", ev->depth);
    PUT_LITERAL(f, "}}");
    return format_check_io(&f->base);
}

/* GC, on its own track: "GC minor" or "GC major", why, mark and sweep. */
static int chrome_gc(struct format *base, const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;

    if (!f->gc_named) {
        chrome_thread_name(f, CHROME_GC_TID, "GC", 2, 0);
        f->gc_named = 1;
    }
    PUT_LITERAL(f, ",\n{\"ph\":\"X\",\"cat\":\"gc\",\"name\":");
    if (ev->text.len) PUT_LITERAL(f, "\"GC major\"");
    else PUT_LITERAL(f, "\"GC minor\"");
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":", CHROME_GC_TID);
    PUT_US(f, ",\"ts\":", ev->time_ns);
    PUT_US(f, ",\"dur\":", ev->duration_ns);
    PUT_LITERAL(f, ",\"args\":{\"major_by\":");
    if (ev->text.len) {
        if (put_string(f, ev->text) != CLI_OK) return CLI_ERR;
    } else {
        PUT_LITERAL(f, "null");
    }
    PUT_LITERAL(f, ",\"gc_by\":");
    if (put_string(f, ev->text2) != CLI_OK) return CLI_ERR;
    PUT_US(f, ",\"mark_us\":", ev->mark_ns);
    PUT_US(f, ",\"sweep_us\":", ev->sweep_ns);
    PUT_LITERAL(f, "}}");
    return format_check_io(&f->base);
}

/* A raise: an instant event on its thread, "raise ArgumentError". */
static int chrome_raise(struct format *base, const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;
    long ti = chrome_thread(f, ev->thread_id);
    size_t n;

    if (ti < 0) return CLI_ERR;
    if ((n = json_escape_buf(&f->buf, ev->text.ptr, ev->text.len)) == (size_t)-1)
        return format_fail(&f->base, "out of memory");
    PUT_LITERAL(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"raise\",\"name\":\"");
    if (ev->number) PUT_LITERAL(f, "re-");
    PUT_LITERAL(f, "raise ");
    put(f, f->buf.p, n);
    fputc_unlocked('"', f->base.out);
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":", f->calls.threads[ti].ordinal);
    PUT_US(f, ",\"ts\":", ev->time_ns);
    PUT_LITERAL(f, ",\"args\":{\"message\":");
    if (ev->text2.len) {
        if (put_string(f, ev->text2) != CLI_OK) return CLI_ERR;
    } else {
        PUT_LITERAL(f, "null");
    }
    PUT_LITERAL(f, ",\"at\":");
    if (put_string(f, ev->text3) != CLI_OK) return CLI_ERR;
    PUT_NUM(f, ",\"reraise\":", ev->number);
    PUT_LITERAL(f, "}}");
    return format_check_io(&f->base);
}

/* --gvl: a wait longer than the threshold, a slice "GVL wait" on its
 * thread's track (inside the calls open there). */
static int chrome_gvl(struct format *base, const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;
    long ti;

    if (ev->duration_ns <= f->base.opts.text.gvl_threshold_ns) return CLI_OK;
    if ((ti = chrome_thread(f, ev->thread_id)) < 0) return CLI_ERR;
    PUT_LITERAL(f, ",\n{\"ph\":\"X\",\"cat\":\"gvl\",\"name\":\"GVL wait\"");
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":", f->calls.threads[ti].ordinal);
    PUT_US(f, ",\"ts\":", ev->time_ns);
    PUT_US(f, ",\"dur\":", ev->duration_ns);
    PUT_LITERAL(f, "}");
    return format_check_io(&f->base);
}

/* A loss: an instant event for the process, after the latest event seen.
 * (The open calls may have lost their returns: the walk dropped them.) */
static int chrome_lost(struct format *base, const struct rbtrace_event *ev)
{
    struct format_chrome *f = (struct format_chrome *)base;

    PUT_NUM(f, ",\n{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"lost\",\"name\":\"", ev->number);
    PUT_LITERAL(f, " events lost\"");
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":", CHROME_GC_TID);
    PUT_US(f, ",\"ts\":", f->calls.last_time_ns);
    PUT_NUM(f, ",\"args\":{\"count\":", ev->number);
    PUT_LITERAL(f, "}}");
    return format_check_io(&f->base);
}

static const struct calls_emit chrome_emit = {
    .thread = chrome_thread_track,
    .method = chrome_method,
    .args = chrome_args,
    .call = chrome_call_event,
    .slow = chrome_slow,
    .gc = chrome_gc,
    .raise = chrome_raise,
    .gvl = chrome_gvl,
    .lost = chrome_lost,
    .thread_name = chrome_thread_named,
};

static int chrome_event(struct format *base, const struct rbtrace_event *ev)
{
    return calls_walk_event(&((struct format_chrome *)base)->calls, base, &chrome_emit, ev);
}

/* The calls still open, ended at the latest time seen, in the category
 * "call,unfinished", then the closing of the file. */
static int chrome_finish(struct format *base)
{
    struct format_chrome *f = (struct format_chrome *)base;
    uint64_t end = f->calls.last_time_ns;
    size_t i, d;

    for (i = 0; i < f->calls.n_threads; i++) {
        struct calls_thread *t = &f->calls.threads[i];

        for (d = t->depth; d > 0; d--) {
            struct calls_frame *frame = &t->frames[d - 1];

            /* Marked by its category, not args: speedscope names an event
             * by its name and args together, and would list the method
             * twice (spec/viewer/viewer_spec.rb). */
            chrome_complete(f, "call,unfinished", 15, frame->method_id, t->ordinal, frame->start_ns,
                            end > frame->start_ns ? end - frame->start_ns : 0);
            PUT_LITERAL(f, "}");
        }
    }
    calls_drop_all(&f->calls);
    PUT_LITERAL(
        f,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"rbtrace " RBTRACE_VERSION
        "\"}}\n");
    return format_check_io(base);
}

static void chrome_destroy(struct format *base)
{
    struct format_chrome *f = (struct format_chrome *)base;

    calls_free(&f->calls);
    json_buf_free(&f->buf);
    json_buf_free(&f->line);
    free(f);
}

static const struct format_ops format_chrome_ops = {
    .event = chrome_event,
    .finish = chrome_finish,
    .destroy = chrome_destroy,
};

/* The opening, and the process's name, written at once. */
struct format *format_chrome_new(FILE *out, const struct format_opts *opts)
{
    struct format_chrome *f = calloc(1, sizeof(*f));
    uint64_t pid;

    if (!f) return NULL;
    format_base_init(&f->base, &format_chrome_ops, out, opts);
    calls_init(&f->calls);
    pid = opts->pid > 0 ? (uint64_t)opts->pid : 0;
    memcpy(f->pid, ",\"pid\":", 7);
    f->pid_len = 7 + json_utoa(f->pid + 7, pid);
    PUT_LITERAL(f, "{\"traceEvents\":[\n{\"ph\":\"M\",\"name\":\"process_name\"");
    put(f, f->pid, f->pid_len);
    PUT_NUM(f, ",\"tid\":0,\"args\":{\"name\":\"ruby ", pid);
    PUT_LITERAL(f, "\"}}");
    return &f->base;
}
