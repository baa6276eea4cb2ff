/*
 * format_json.c - --format json: JSON Lines, one object a line.
 *
 * A call is written when it returns (so a caller's line comes after its
 * callees'), with its start, end, duration and self time; the other
 * events as they come. Every string of the app's is escaped by json.c
 * (valid JSON whatever its bytes). docs/usage.md ("--format json") lists
 * the fields of each kind.
 *
 * Per method the name is kept as its lines show it, escaped once:
 * "name":"Foo#bar","class":"Foo","method":"bar".
 *
 * With --profile, a line per sample as it comes (the samples.h's frames
 * name its stack, outermost first), one per count of samples missed, and
 * the profile's counts at the end:
 * {"kind":"sample","thread":2,"time":NS,"state":"running","weight":1,
 *  "stack":["<main>","Work#run","Work#spin"]}.
 */
#define _GNU_SOURCE /* fwrite_unlocked */
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "cli.h"
#include "escape.h"
#include "format.h"
#include "json.h"
#include "samples.h"

struct format_json {
    struct format base;
    struct calls calls;
    struct json_buf esc;  /* scratch for escaped text */
    struct json_buf name; /* scratch for a name's fields */
    struct json_buf line; /* scratch for a call's line */
    int gvl_live;         /* --gvl: the target measures GVL waits (its first GVL event came) */
    /* each thread's name as its lines write it (escaped, quoted), by its
     * index in calls: --profile's samples repeat it; NULL for none */
    char **thread_names;
    size_t n_thread_names;
};

#define JSON_UNKNOWN "\"name\":\"(unknown)\",\"class\":null,\"method\":\"(unknown)\""

#define PUT_LITERAL(f, s) fwrite_unlocked((s), 1, sizeof(s) - 1, (f)->base.out)

static void put(struct format_json *f, const char *s, size_t len)
{
    fwrite_unlocked(s, 1, len, f->base.out);
}

/* ,"key":N */
static void put_num(struct format_json *f, const char *key, size_t key_len, uint64_t v)
{
    char num[24];

    put(f, key, key_len);
    put(f, num, json_utoa(num, v));
}

#define PUT_NUM(f, key, v) put_num((f), (key), sizeof(key) - 1, (v))

/* "..." escaped, or null for no bytes when empty_null. CLI_ERR when out of memory. */
static int put_string(struct format_json *f, struct rbtrace_str s, int empty_null)
{
    size_t n;

    if (empty_null && s.len == 0) {
        PUT_LITERAL(f, "null");
        return CLI_OK;
    }
    if ((n = json_escape_buf(&f->esc, s.ptr, s.len)) == (size_t)-1)
        return format_fail(&f->base, "out of memory");
    fputc_unlocked('"', f->base.out);
    put(f, f->esc.p, n);
    fputc_unlocked('"', f->base.out);
    return CLI_OK;
}

/* ---- names ---- */

static int json_method(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    const char *name = ev->text.ptr;
    size_t class_len, method_off, n = 0;
    int ok;

    calls_split_name(name, ev->text.len, &class_len, &method_off);
    ok = json_buf_add(&f->name, &n, "\"name\":\"") == CLI_OK &&
        json_buf_add_escaped(&f->name, &n, name, ev->text.len) == CLI_OK &&
        json_buf_add(&f->name, &n, class_len ? "\",\"class\":\"" : "\",\"class\":null") == CLI_OK &&
        (!class_len ||
         (json_buf_add_escaped(&f->name, &n, name, class_len) == CLI_OK &&
          json_buf_add(&f->name, &n, "\"") == CLI_OK)) &&
        json_buf_add(&f->name, &n, ",\"method\":\"") == CLI_OK &&
        json_buf_add_escaped(&f->name, &n, name + method_off, ev->text.len - method_off) ==
            CLI_OK &&
        json_buf_add(&f->name, &n, "\"") == CLI_OK &&
        calls_set_name(&f->calls, ev->method_id, f->name.p, n) == CLI_OK;
    return ok ? CLI_OK : format_fail(&f->base, "out of memory");
}

static void put_name(struct format_json *f, uint64_t method_id)
{
    const struct calls_name *n = calls_name(&f->calls, method_id);

    if (n) put(f, n->text, n->len);
    else PUT_LITERAL(f, JSON_UNKNOWN);
}

/* ---- threads ---- */

/* A new thread's line: {"kind":"thread","thread":2,"thread_id":139872}. */
static int json_thread_line(struct format *base, const struct calls_thread *t)
{
    struct format_json *f = (struct format_json *)base;

    PUT_NUM(f, "{\"kind\":\"thread\",\"thread\":", t->ordinal);
    PUT_NUM(f, ",\"thread_id\":", t->id);
    PUT_LITERAL(f, "}\n");
    return CLI_OK;
}

/* The thread's index, its line written first if new; -1 when out of memory. */
static long json_thread(struct format_json *f, uint64_t id)
{
    return calls_walk_thread(&f->calls, &f->base, json_thread_line, id);
}

/* Keeps p[0, len) (NULL: none) as thread ti's name for its samples.
 * CLI_OK or CLI_ERR. */
static int json_keep_thread_name(struct format_json *f, size_t ti, const char *p, size_t len)
{
    char *copy = NULL;

    if (!f->base.samples) return CLI_OK; /* only --profile's samples repeat it */
    if (ti >= f->n_thread_names) {
        size_t cap = ti + 1 > f->n_thread_names * 2 ? ti + 1 : f->n_thread_names * 2;
        char **names = realloc(f->thread_names, cap * sizeof(*names));

        if (!names) return format_fail(&f->base, "out of memory");
        memset(names + f->n_thread_names, 0, (cap - f->n_thread_names) * sizeof(*names));
        f->thread_names = names;
        f->n_thread_names = cap;
    }
    if (p) {
        if (!(copy = malloc(len + 1))) return format_fail(&f->base, "out of memory");
        memcpy(copy, p, len);
        copy[len] = '\0';
    }
    free(f->thread_names[ti]);
    f->thread_names[ti] = copy;
    return CLI_OK;
}

/* THREAD_NAME (--thread-names, on by default in json): the thread's line
 * again, with its name, cut as text cuts it (render.h), or null for none:
 * {"kind":"thread","thread":2,"thread_id":139872,"name":"puma srv tp 001"}.
 * A thread seen first so gets only this line; a rename, another. */
static int json_thread_name(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    struct rbtrace_str name = ev->text;
    int added;
    long ti = calls_thread(&f->calls, ev->thread_id, &added);

    if (ti < 0) return format_fail(&f->base, "out of memory");
    name.len = (uint32_t)escape_cut(name.ptr, name.len, RENDER_THREAD_NAME_MAX);
    PUT_NUM(f, "{\"kind\":\"thread\",\"thread\":", f->calls.threads[ti].ordinal);
    PUT_NUM(f, ",\"thread_id\":", ev->thread_id);
    PUT_LITERAL(f, ",\"name\":");
    if (name.len == 0) {
        PUT_LITERAL(f, "null}\n");
        return json_keep_thread_name(f, (size_t)ti, NULL, 0);
    }
    {
        size_t n = 0;

        if (json_buf_add(&f->name, &n, "\"") != CLI_OK ||
            json_buf_add_escaped(&f->name, &n, name.ptr, name.len) != CLI_OK ||
            json_buf_add(&f->name, &n, name.len < ev->text.len ? "...\"" : "\"") != CLI_OK)
            return format_fail(&f->base, "out of memory");
        put(f, f->name.p, n);
        PUT_LITERAL(f, "}\n");
        if (json_keep_thread_name(f, (size_t)ti, f->name.p, n) != CLI_OK) return CLI_ERR;
    }
    return format_check_io(&f->base);
}

/* ---- events ---- */

/* ,"args":[{"expr":"x","value":"1"},...] kept with the call until it returns. */
static int json_args(struct format *base, struct calls_frame *frame, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    size_t n = 0;
    uint32_t i;

    if (json_buf_add(&f->name, &n, ",\"args\":[") != CLI_OK) goto oom;
    for (i = 0; i < ev->n_exprs; i++) {
        if (json_buf_add(&f->name, &n, i ? ",{\"expr\":\"" : "{\"expr\":\"") != CLI_OK ||
            json_buf_add_escaped(&f->name, &n, ev->exprs[i].ptr, ev->exprs[i].len) != CLI_OK ||
            json_buf_add(&f->name, &n, "\",\"value\":\"") != CLI_OK ||
            json_buf_add_escaped(&f->name, &n, ev->values[i].ptr, ev->values[i].len) != CLI_OK ||
            json_buf_add(&f->name, &n, "\"}") != CLI_OK)
            goto oom;
    }
    if (json_buf_add(&f->name, &n, "]") != CLI_OK) goto oom;
    frame->extra = malloc(n);
    if (!frame->extra) goto oom;
    memcpy(frame->extra, f->name.p, n);
    frame->extra_len = n;
    return CLI_OK;
oom:
    return format_fail(&f->base, "out of memory");
}

/* {"kind":K,"thread":T,"name":...,"start":S */
static void json_call_head(struct format_json *f, const char *kind, size_t kind_len,
                           unsigned ordinal, uint64_t method_id, uint64_t start_ns)
{
    PUT_LITERAL(f, "{\"kind\":\"");
    put(f, kind, kind_len);
    PUT_NUM(f, "\",\"thread\":", ordinal);
    fputc_unlocked(',', f->base.out);
    put_name(f, method_id);
    PUT_NUM(f, ",\"start\":", start_ns);
}

/* Room for a call line but its name and args. */
#define JSON_CALL_FIXED 288

/* A call's line, built whole and written at once: the hot path (one line
 * per call of a firehose). */
static int json_call_line(struct format *base, const struct calls_thread *t,
                          const struct calls_frame *frame, uint64_t dur)
{
    struct format_json *f = (struct format_json *)base;
    const struct calls_name *name = calls_name(&f->calls, frame->method_id);
    char *p;

    if (json_buf_reserve(&f->line,
                         (name ? name->len : sizeof(JSON_UNKNOWN)) + frame->extra_len +
                             JSON_CALL_FIXED) != CLI_OK)
        return format_fail(&f->base, "out of memory");
    p = JSON_PUT_LITERAL(f->line.p, "{\"kind\":\"call\",\"thread\":");
    p = json_put_u64(p, t->ordinal);
    *p++ = ',';
    p = name ? json_put(p, name->text, name->len) : JSON_PUT_LITERAL(p, JSON_UNKNOWN);
    p = JSON_PUT_LITERAL(p, ",\"start\":");
    p = json_put_u64(p, frame->start_ns);
    p = JSON_PUT_LITERAL(p, ",\"end\":");
    p = json_put_u64(p, frame->start_ns + dur);
    p = JSON_PUT_LITERAL(p, ",\"duration\":");
    p = json_put_u64(p, dur);
    p = JSON_PUT_LITERAL(p, ",\"self\":");
    p = json_put_u64(p, dur > frame->child_ns ? dur - frame->child_ns : 0);
    p = JSON_PUT_LITERAL(p, ",\"depth\":");
    p = json_put_u64(p, t->depth - 1);
    if (f->gvl_live && f->base.opts.text.gvl) {
        p = JSON_PUT_LITERAL(p, ",\"gvl\":");
        p = json_put_u64(p, frame->gvl_ns);
    }
    if (f->base.opts.text.alloc) {
        p = JSON_PUT_LITERAL(p, ",\"alloc\":");
        p = json_put_u64(p, frame->alloc);
    }
    if (frame->extra) p = json_put(p, frame->extra, frame->extra_len);
    p = JSON_PUT_LITERAL(p, "}\n");
    put(f, f->line.p, (size_t)(p - f->line.p));
    return CLI_OK;
}

static int json_slow(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    long ti = json_thread(f, ev->thread_id);

    if (ti < 0) return CLI_ERR;
    json_call_head(f, "slow", 4, f->calls.threads[ti].ordinal, ev->method_id, ev->time_ns);
    PUT_NUM(f, ",\"end\":", ev->time_ns + ev->duration_ns);
    PUT_NUM(f, ",\"duration\":", ev->duration_ns);
    PUT_NUM(f, ",\"depth\":", ev->depth);
    PUT_LITERAL(f, "}\n");
    return format_check_io(&f->base);
}

static int json_gc(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    long ti = json_thread(f, ev->thread_id);

    if (ti < 0) return CLI_ERR;
    PUT_NUM(f, "{\"kind\":\"gc\",\"thread\":", f->calls.threads[ti].ordinal);
    PUT_NUM(f, ",\"start\":", ev->time_ns);
    PUT_NUM(f, ",\"end\":", ev->time_ns + ev->duration_ns);
    PUT_NUM(f, ",\"duration\":", ev->duration_ns);
    if (ev->text.len) PUT_LITERAL(f, ",\"major\":true,\"major_by\":");
    else PUT_LITERAL(f, ",\"major\":false,\"major_by\":");
    if (put_string(f, ev->text, 1) != CLI_OK) return CLI_ERR;
    PUT_LITERAL(f, ",\"gc_by\":");
    if (put_string(f, ev->text2, 0) != CLI_OK) return CLI_ERR;
    PUT_NUM(f, ",\"mark\":", ev->mark_ns);
    PUT_NUM(f, ",\"sweep\":", ev->sweep_ns);
    PUT_LITERAL(f, "}\n");
    return format_check_io(&f->base);
}

static int json_raise(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    long ti = json_thread(f, ev->thread_id);

    if (ti < 0) return CLI_ERR;
    PUT_NUM(f, "{\"kind\":\"raise\",\"thread\":", f->calls.threads[ti].ordinal);
    PUT_NUM(f, ",\"time\":", ev->time_ns);
    PUT_LITERAL(f, ",\"exception\":");
    if (put_string(f, ev->text, 0) != CLI_OK) return CLI_ERR;
    PUT_LITERAL(f, ",\"message\":");
    if (put_string(f, ev->text2, 1) != CLI_OK) return CLI_ERR;
    PUT_LITERAL(f, ",\"at\":");
    if (put_string(f, ev->text3, 0) != CLI_OK) return CLI_ERR;
    PUT_NUM(f, ",\"reraise\":", ev->number);
    PUT_LITERAL(f, "}\n");
    return format_check_io(&f->base);
}

/* --gvl: a wait goes to the calls open on its thread ("gvl" of each call
 * line); one longer than the threshold is a line of its own. A short wait
 * of a thread never seen adds no thread. */
static int json_gvl(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    long ti = calls_thread_known(&f->calls, ev->thread_id);
    int long_wait = ev->duration_ns > f->base.opts.text.gvl_threshold_ns;

    f->gvl_live = 1;
    if (ti < 0 && !long_wait) return CLI_OK;
    if (ti < 0 && (ti = json_thread(f, ev->thread_id)) < 0) return CLI_ERR;
    calls_add_gvl(&f->calls, (size_t)ti, ev->duration_ns);
    if (!long_wait) return CLI_OK;
    PUT_NUM(f, "{\"kind\":\"gvl\",\"thread\":", f->calls.threads[ti].ordinal);
    PUT_NUM(f, ",\"start\":", ev->time_ns);
    PUT_NUM(f, ",\"end\":", ev->time_ns + ev->duration_ns);
    PUT_NUM(f, ",\"duration\":", ev->duration_ns);
    PUT_LITERAL(f, "}\n");
    return format_check_io(&f->base);
}

/* --alloc: one of the sites that allocated most (the target's, at the
 * detach), a line of its own. */
static int json_alloc_site(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;

    PUT_NUM(f, "{\"kind\":\"alloc_site\",\"count\":", ev->count);
    PUT_LITERAL(f, ",\"class\":");
    if (put_string(f, ev->text, 1) != CLI_OK) return CLI_ERR;
    PUT_LITERAL(f, ",\"path\":");
    if (put_string(f, ev->text2, 1) != CLI_OK) return CLI_ERR;
    PUT_NUM(f, ",\"line\":", ev->line);
    PUT_LITERAL(f, ",\"label\":");
    if (put_string(f, ev->text3, 1) != CLI_OK) return CLI_ERR;
    PUT_LITERAL(f, "}\n");
    return format_check_io(&f->base);
}

/* LOST carries no time: the loss is placed after the latest event seen.
 * (Calls open then may have lost their returns: the walk dropped them.) */
static int json_lost(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;

    PUT_NUM(f, "{\"kind\":\"lost\",\"time\":", f->calls.last_time_ns);
    PUT_NUM(f, ",\"count\":", ev->number);
    PUT_LITERAL(f, "}\n");
    return format_check_io(&f->base);
}

static const struct calls_emit json_emit = {
    .thread = json_thread_line,
    .method = json_method,
    .args = json_args,
    .call = json_call_line,
    .slow = json_slow,
    .gc = json_gc,
    .raise = json_raise,
    .gvl = json_gvl,
    .lost = json_lost,
    .alloc_site = json_alloc_site,
    .thread_name = json_thread_name,
};

static int json_event(struct format *base, const struct rbtrace_event *ev)
{
    return calls_walk_event(&((struct format_json *)base)->calls, base, &json_emit, ev);
}

/* ---- --profile ---- */

/* A sample's line, its stack's names escaped as they are written; or
 * {"kind":"missed","count":N} for the samples the target missed. */
static int json_profile(struct format *base, const struct rbtrace_event *ev)
{
    struct format_json *f = (struct format_json *)base;
    const uint64_t *ids;
    uint32_t n, i;
    long ti;

    if (ev->type == RBTRACE_EV_PROFILE_MISSED) {
        PUT_NUM(f, "{\"kind\":\"missed\",\"count\":", ev->number);
        PUT_LITERAL(f, "}\n");
        return format_check_io(base);
    }
    if ((ti = json_thread(f, ev->thread_id)) < 0) return CLI_ERR;
    calls_note_time(&f->calls, ev->time_ns);
    PUT_NUM(f, "{\"kind\":\"sample\",\"thread\":", f->calls.threads[ti].ordinal);
    PUT_LITERAL(f, ",\"thread_name\":");
    if ((size_t)ti < f->n_thread_names && f->thread_names[ti])
        fputs(f->thread_names[ti], base->out);
    else PUT_LITERAL(f, "null");
    PUT_NUM(f, ",\"time\":", ev->time_ns);
    PUT_LITERAL(f, ",\"state\":\"");
    fputs(samples_state_name(ev->status), base->out);
    PUT_NUM(f, "\",\"weight\":", ev->count);
    PUT_LITERAL(f, ",\"stack\":[");
    /* the list the samples took: this one's, or its thread's last */
    ids = samples_last_stack(base->samples, ev->thread_id, &n);
    for (i = n; i-- > 0;) {
        size_t len = 0;
        const char *name = samples_frame_raw(base->samples, ids[i], &len);

        if (i + 1 < n) fputc_unlocked(',', base->out);
        if (name) {
            if (put_string(f, (struct rbtrace_str){ name, (uint32_t)len }, 0) != CLI_OK)
                return CLI_ERR;
        } else {
            PUT_NUM(f, "\"(frame ", ids[i]);
            PUT_LITERAL(f, ")\"");
        }
    }
    PUT_LITERAL(f, "]}\n");
    return format_check_io(base);
}

/* The calls still open when the trace ends, innermost first:
 * {"kind":"unfinished",...,"start":S,"depth":D}; with --profile then
 * {"kind":"profile","samples":N,"missed":M}. */
static int json_finish(struct format *base)
{
    struct format_json *f = (struct format_json *)base;
    size_t i, d;

    for (i = 0; i < f->calls.n_threads; i++) {
        struct calls_thread *t = &f->calls.threads[i];

        for (d = t->depth; d > 0; d--) {
            struct calls_frame *frame = &t->frames[d - 1];

            json_call_head(f, "unfinished", 10, t->ordinal, frame->method_id, frame->start_ns);
            PUT_NUM(f, ",\"depth\":", d - 1);
            if (frame->extra) put(f, frame->extra, frame->extra_len);
            PUT_LITERAL(f, "}\n");
        }
    }
    calls_drop_all(&f->calls);
    if (base->samples) {
        PUT_NUM(f, "{\"kind\":\"profile\",\"samples\":", samples_total(base->samples));
        PUT_NUM(f, ",\"missed\":", samples_missed(base->samples));
        PUT_LITERAL(f, "}\n");
    }
    return format_check_io(base);
}

/* The first line: {"kind":"attach","pid":P,"wall_time":NS}, the wall
 * clock (ns since the epoch) at the trace's time 0. */
static void json_set_wall_origin(struct format *base, uint64_t wall_origin_ns)
{
    struct format_json *f = (struct format_json *)base;

    PUT_NUM(f,
            "{\"kind\":\"attach\",\"pid\":", (uint64_t)(base->opts.pid > 0 ? base->opts.pid : 0));
    PUT_NUM(f, ",\"wall_time\":", wall_origin_ns);
    PUT_LITERAL(f, "}\n");
}

static void json_destroy(struct format *base)
{
    struct format_json *f = (struct format_json *)base;
    size_t i;

    calls_free(&f->calls);
    for (i = 0; i < f->n_thread_names; i++) free(f->thread_names[i]);
    free(f->thread_names);
    json_buf_free(&f->esc);
    json_buf_free(&f->name);
    json_buf_free(&f->line);
    free(f);
}

static const struct format_ops format_json_ops = {
    .event = json_event,
    .profile = json_profile,
    .finish = json_finish,
    .destroy = json_destroy,
    .set_wall_origin = json_set_wall_origin,
};

struct format *format_json_new(FILE *out, const struct format_opts *opts)
{
    struct format_json *f = calloc(1, sizeof(*f));

    if (!f) return NULL;
    format_base_init(&f->base, &format_json_ops, out, opts);
    calls_init(&f->calls);
    return &f->base;
}
