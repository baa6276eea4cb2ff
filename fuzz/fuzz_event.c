/*
 * fuzz_event.c - libFuzzer harness for the client's event decoder: the
 * bytes a target sends on the socket, split into events by the client's
 * own decoder, ext/rbtrace/cli/stream.c (stream_next, as the session calls
 * it), each event then rendered by ext/rbtrace/cli/render.c as the
 * trace's text.
 *
 * Input: byte 0 picks the render options (-t, -n, -r) and how the stream
 * is cut into reads; the rest is the stream.
 *
 * Besides ASan, UBSan and LeakSanitizer, every run checks:
 * - every event the stream hands out is what the generic path alone
 *   (rbtrace_msgpack_scan, msgpack_unpack, rbtrace_event_decode) makes of
 *   its bytes: the fast path agrees with it on every CALL and RETURN it
 *   takes (same fields, same length), and the stream says "incomplete"
 *   only where the generic path does too;
 * - the stream read in small pieces gives the same events, in the same
 *   order, as the stream read at once (no event lost or doubled at a read
 *   boundary), and stops at the same place;
 * - a decoded event encodes again with the codec's own encoders into bytes
 *   that decode to the same event; the hot path's encoders
 *   (rbtrace_event_encode_call, _lost) give the packer's bytes;
 * - the renderer takes every event without an error, and its durations are
 *   printf's "%.6f" of the seconds;
 * - CALL_NEXT and RETURN_NEXT are resolved against the call chain (one
 *   that cannot be stops the stream with a message), and only resolved
 *   events reach the renderer;
 * - the json, chrome, folded and summary formats (format.h) take every
 *   event and the trace's end without an error.
 *
 * Build and run: rake test:fuzz (short, CI), rake fuzz:long (fuzz/RESULTS.md).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "codec.h"
#include "format.h"
#include "render.h"
#include "stream.h"

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz_event: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort(); \
        } \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What one pass over the stream saw: a running hash of every event's
 * fields, how many events, and where it stopped. */
struct digest {
    uint64_t hash;
    size_t events;
    size_t consumed;
    int broken; /* stopped at bytes the client refuses */
};

static void hash_bytes(struct digest *d, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++) d->hash = (d->hash ^ b[i]) * 0x100000001b3ULL;
}

static void hash_u64(struct digest *d, uint64_t v)
{
    hash_bytes(d, &v, sizeof(v));
}

static void hash_str(struct digest *d, struct rbtrace_str s)
{
    hash_u64(d, s.len);
    if (s.len) hash_bytes(d, s.ptr, s.len);
}

static void hash_event(struct digest *d, const struct rbtrace_event *ev)
{
    uint32_t i;

    d->events++;
    hash_u64(d, ev->type);
    hash_u64(d, ev->thread_id);
    hash_u64(d, ev->time_ns);
    hash_u64(d, ev->method_id);
    if (ev->type == RBTRACE_EV_CALL || ev->type == RBTRACE_EV_RETURN)
        return; /* fast path: no more */
    hash_u64(d, ev->number);
    hash_u64(d, ev->pid);
    hash_u64(d, ev->clock_origin_ns);
    hash_u64(d, ev->wall_origin_ns);
    hash_u64(d, ev->duration_ns);
    hash_u64(d, ev->depth);
    hash_u64(d, ev->mark_ns);
    hash_u64(d, ev->sweep_ns);
    hash_u64(d, ev->status);
    hash_str(d, ev->text);
    hash_str(d, ev->text2);
    hash_str(d, ev->text3);
    hash_u64(d, ev->n_exprs);
    for (i = 0; i < ev->n_exprs; i++) {
        hash_str(d, ev->exprs[i]);
        hash_str(d, ev->values[i]);
    }
}

static int str_same(struct rbtrace_str a, struct rbtrace_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* Every field rbtrace_event_decode sets (it zeroes the others). */
static int event_same(const struct rbtrace_event *a, const struct rbtrace_event *b)
{
    uint32_t i;

    if (a->type != b->type || a->thread_id != b->thread_id || a->time_ns != b->time_ns ||
        a->method_id != b->method_id || a->number != b->number || a->pid != b->pid ||
        a->clock_origin_ns != b->clock_origin_ns || a->wall_origin_ns != b->wall_origin_ns ||
        a->duration_ns != b->duration_ns || a->depth != b->depth || a->mark_ns != b->mark_ns ||
        a->sweep_ns != b->sweep_ns || a->status != b->status || !str_same(a->text, b->text) ||
        !str_same(a->text2, b->text2) || !str_same(a->text3, b->text3) ||
        a->n_exprs != b->n_exprs || a->line != b->line || a->count != b->count)
        return 0;
    /* the frames are not cleared between events (codec.h): a sample's only */
    if (a->type == RBTRACE_EV_PROFILE_SAMPLE && a->n_frames != b->n_frames) return 0;
    for (i = 0; a->type == RBTRACE_EV_PROFILE_SAMPLE && i < a->n_frames; i++)
        if (a->frames[i] != b->frames[i]) return 0;
    for (i = 0; i < a->n_exprs; i++)
        if (!str_same(a->exprs[i], b->exprs[i]) || !str_same(a->values[i], b->values[i])) return 0;
    return 1;
}

/* ---- encode again ---- */

/* A NUL-terminated copy for the encoders that take C strings; NULL if the
 * string holds a NUL (those encoders cannot carry it: skip the check). */
static char *cstr(struct rbtrace_str s)
{
    char *c;

    if (s.len && memchr(s.ptr, '\0', s.len)) return NULL;
    c = malloc((size_t)s.len + 1);
    if (!c) abort();
    if (s.len) memcpy(c, s.ptr, s.len);
    c[s.len] = '\0';
    return c;
}

/* Packs ev with the codec's encoder for its type. 0 if that encoder cannot
 * express it (a field wider than the encoder's parameter, a NUL in a C
 * string); 1 if packed. */
static int event_pack(msgpack_packer *pk, const struct rbtrace_event *ev)
{
    char *a = NULL, *b = NULL;
    uint32_t i;
    int ok = 1;

    switch (ev->type) {
    case RBTRACE_EV_ATTACHED:
        if (ev->number != RBTRACE_PROTOCOL_VERSION || ev->pid > UINT32_MAX || !(a = cstr(ev->text)))
            return 0;
        if (ev->features)
            rbtrace_event_pack_attached_features(pk, (uint32_t)ev->pid, a, ev->clock_origin_ns,
                                                 ev->wall_origin_ns, ev->features);
        else
            rbtrace_event_pack_attached(pk, (uint32_t)ev->pid, a, ev->clock_origin_ns,
                                        ev->wall_origin_ns);
        break;
    case RBTRACE_EV_REFUSED:
        if (ev->number > UINT32_MAX || ev->pid > UINT32_MAX || !(a = cstr(ev->text))) return 0;
        rbtrace_event_pack_refused(pk, (enum rbtrace_refusal)ev->number, (uint32_t)ev->pid, a);
        break;
    case RBTRACE_EV_DETACHED:
        rbtrace_event_pack_detached(pk);
        break;
    case RBTRACE_EV_SYNCED:
        if (ev->number > UINT32_MAX) return 0;
        rbtrace_event_pack_synced(pk, (uint32_t)ev->number);
        break;
    case RBTRACE_EV_METHOD:
        rbtrace_event_pack_method(pk, ev->method_id, ev->text.ptr, ev->text.len);
        break;
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_RETURN:
        rbtrace_event_pack_call(pk, ev->type, ev->thread_id, ev->time_ns, ev->method_id);
        break;
    case RBTRACE_EV_CALL_NEXT:
    case RBTRACE_EV_RETURN_NEXT:
        rbtrace_event_pack_call_next(pk, ev->type, ev->time_ns, ev->method_id);
        break;
    case RBTRACE_EV_CALL_ARGS:
        rbtrace_event_pack_call_args(pk, ev->thread_id, ev->time_ns, ev->method_id, ev->n_exprs);
        for (i = 0; i < ev->n_exprs; i++)
            rbtrace_event_pack_expr(pk, ev->exprs[i].ptr, ev->exprs[i].len, ev->values[i].ptr,
                                    ev->values[i].len);
        break;
    case RBTRACE_EV_LOST:
        rbtrace_event_pack_lost(pk, ev->number);
        break;
    case RBTRACE_EV_FORGET:
        rbtrace_event_pack_forget(pk, ev->number);
        break;
    case RBTRACE_EV_EVAL_RESULT:
        if (ev->number > UINT32_MAX) return 0;
        rbtrace_event_pack_eval_result(pk, (uint32_t)ev->number,
                                       (enum rbtrace_eval_status)ev->status, ev->text.ptr,
                                       ev->text.len);
        break;
    case RBTRACE_EV_ERROR:
    case RBTRACE_EV_NOTICE:
        rbtrace_event_pack_message(pk, ev->type, ev->text.ptr, ev->text.len);
        break;
    case RBTRACE_EV_SLOW:
        rbtrace_event_pack_slow(pk, ev->thread_id, ev->time_ns, ev->method_id, ev->duration_ns,
                                ev->depth);
        break;
    case RBTRACE_EV_GC:
        if (!(a = cstr(ev->text)) || !(b = cstr(ev->text2))) {
            ok = 0;
            break;
        }
        rbtrace_event_pack_gc(pk, ev->thread_id, ev->time_ns, ev->duration_ns, ev->mark_ns,
                              ev->sweep_ns, a, b);
        break;
    case RBTRACE_EV_RAISE:
        rbtrace_event_pack_raise(pk, ev->thread_id, ev->time_ns, ev->text.ptr, ev->text.len,
                                 ev->text2.ptr, ev->text2.len, ev->text3.ptr, ev->text3.len,
                                 ev->number);
        break;
    case RBTRACE_EV_GVL:
        rbtrace_event_pack_gvl(pk, ev->thread_id, ev->time_ns, ev->duration_ns);
        break;
    case RBTRACE_EV_ALLOC:
        rbtrace_event_pack_alloc(pk, ev->thread_id, ev->count);
        break;
    case RBTRACE_EV_ALLOC_SITE:
        rbtrace_event_pack_alloc_site(pk, ev->count, ev->text.ptr, ev->text.len, ev->text2.ptr,
                                      ev->text2.len, ev->line, ev->text3.ptr, ev->text3.len);
        break;
    case RBTRACE_EV_THREAD_NAME:
        rbtrace_event_pack_thread_name(pk, ev->thread_id, ev->text.ptr, ev->text.len);
        break;
    case RBTRACE_EV_PROFILE_FRAME:
        rbtrace_event_pack_profile_frame(pk, ev->method_id, ev->text.ptr, ev->text.len,
                                         ev->text2.ptr, ev->text2.len, ev->line);
        break;
    case RBTRACE_EV_PROFILE_SAMPLE:
        rbtrace_event_pack_profile_sample(pk, ev->thread_id, ev->time_ns, ev->status, ev->count,
                                          ev->frames, ev->n_frames);
        break;
    case RBTRACE_EV_PROFILE_MISSED:
        rbtrace_event_pack_profile_missed(pk, ev->number);
        break;
    default:
        FUZZ_CHECK(!"rbtrace_event_decode accepted an unknown event");
    }
    free(a);
    free(b);
    return ok;
}

/* ev (decoded) encodes into bytes that decode to the same event. */
static void check_round_trip(const struct rbtrace_event *ev)
{
    static struct rbtrace_event again;
    char err[RBTRACE_ERRLEN], fast[RBTRACE_CALL_EVENT_MAX];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_zone zone;
    msgpack_object obj;
    size_t off = 0, n;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (!event_pack(&pk, ev)) {
        msgpack_sbuffer_destroy(&sb);
        return;
    }
    if (!msgpack_zone_init(&zone, 1024)) abort();
    FUZZ_CHECK(msgpack_unpack(sb.data, sb.size, &off, &zone, &obj) == MSGPACK_UNPACK_SUCCESS);
    if (rbtrace_event_decode(&obj, &again, err) != RBTRACE_OK) {
        fprintf(stderr, "fuzz_event: re-encoded event %u refused: %s\n", (unsigned)ev->type, err);
        abort();
    }
    if (ev->type == RBTRACE_EV_CALL || ev->type == RBTRACE_EV_RETURN) {
        /* the fast path sets these four only (cli/session.c reuses the struct) */
        FUZZ_CHECK(again.type == ev->type && again.thread_id == ev->thread_id &&
                   again.time_ns == ev->time_ns && again.method_id == ev->method_id);
        n = rbtrace_event_encode_call(fast, ev->type, ev->thread_id, ev->time_ns, ev->method_id);
        FUZZ_CHECK(n == sb.size && memcmp(fast, sb.data, n) == 0);
    } else if (ev->type == RBTRACE_EV_CALL_NEXT || ev->type == RBTRACE_EV_RETURN_NEXT) {
        FUZZ_CHECK(again.type == ev->type && again.thread_id == 0 && again.time_ns == ev->time_ns &&
                   again.method_id == ev->method_id);
        n = rbtrace_event_encode_call_next(fast, ev->type, ev->time_ns, ev->method_id);
        FUZZ_CHECK(n == sb.size && memcmp(fast, sb.data, n) == 0);
    } else {
        FUZZ_CHECK(event_same(ev, &again));
    }
    if (ev->type == RBTRACE_EV_LOST) {
        n = rbtrace_event_encode_lost(fast, ev->number);
        FUZZ_CHECK(n <= RBTRACE_LOST_EVENT_MAX && n == sb.size && memcmp(fast, sb.data, n) == 0);
    }
    msgpack_zone_destroy(&zone);
    msgpack_sbuffer_destroy(&sb);
}

/* render_format_seconds against printf. */
static void check_seconds(uint64_t ns)
{
    char mine[RENDER_SECONDS_MAX + 1], theirs[64];
    size_t n = render_format_seconds(mine, ns);

    mine[n] = '\0';
    snprintf(theirs, sizeof(theirs), "%.6f", (double)ns / 1e9);
    if (strcmp(mine, theirs) != 0) {
        fprintf(stderr, "fuzz_event: %llu ns: render says %s, printf %s\n", (unsigned long long)ns,
                mine, theirs);
        abort();
    }
}

/* ---- the stream, through the client's own decoder (stream.c) ---- */

/* The formats besides text (format.h), each fed every event too; from
 * FUZZ_PROFILE_FROM on, as --profile opens them (samples kept: speedscope's
 * spans and samples, json's sample lines). */
#define FUZZ_FORMATS 6
#define FUZZ_PROFILE_FROM 4

struct pass {
    struct render *render;   /* NULL: decode only */
    struct format **formats; /* FUZZ_FORMATS of them, or NULL */
    int *refused;            /* per format: it refused an event (the session would end) */
    struct digest d;
    struct stream stream; /* the decoder under test */
    msgpack_zone zone;    /* the oracle's objects */
    int checks;           /* the cross-checks, on one pass only */
};

/*
 * The oracle: the event's bytes p[0, used) decoded again by the generic
 * path alone (scan, msgpack_unpack, rbtrace_event_decode), into *raw, as
 * the target encoded it (a _NEXT unresolved). The fast path, when the
 * stream took it, must agree with it; the raw event must encode again
 * into bytes that decode to it; the stream's (resolved) event must be it.
 */
static void check_event(struct pass *ps, const char *p, size_t avail, size_t used)
{
    static struct rbtrace_event raw;
    const struct rbtrace_event *ev = ps->stream.ev;
    char err[RBTRACE_ERRLEN];
    msgpack_object obj;
    size_t end = 0, off = 0;

    FUZZ_CHECK(rbtrace_msgpack_scan(p, avail, STREAM_EVENT_MAX, &end) == RBTRACE_SCAN_WHOLE);
    FUZZ_CHECK(end == used);
    msgpack_zone_clear(&ps->zone);
    FUZZ_CHECK(msgpack_unpack(p, used, &off, &ps->zone, &obj) == MSGPACK_UNPACK_SUCCESS);
    FUZZ_CHECK(off == used);
    FUZZ_CHECK(rbtrace_event_decode(&obj, &raw, err) == RBTRACE_OK);
    check_round_trip(&raw);
    if (raw.type == RBTRACE_EV_CALL_NEXT || raw.type == RBTRACE_EV_RETURN_NEXT) {
        FUZZ_CHECK(ev->type ==
                   (raw.type == RBTRACE_EV_CALL_NEXT ? RBTRACE_EV_CALL : RBTRACE_EV_RETURN));
        FUZZ_CHECK(ev->method_id == raw.method_id);
    } else if (ps->stream.fast) {
        FUZZ_CHECK(raw.type == ev->type && raw.thread_id == ev->thread_id &&
                   raw.time_ns == ev->time_ns && raw.method_id == ev->method_id);
    } else {
        FUZZ_CHECK(event_same(&raw, ev));
    }
}

/* A decoded event: checked, hashed, rendered. */
static void handle(struct pass *ps)
{
    const struct rbtrace_event *ev = ps->stream.ev;
    int i;

    FUZZ_CHECK(ev->type != RBTRACE_EV_CALL_NEXT && ev->type != RBTRACE_EV_RETURN_NEXT);
    if (ps->checks && (ev->type == RBTRACE_EV_SLOW || ev->type == RBTRACE_EV_GC))
        check_seconds(ev->duration_ns);
    hash_event(&ps->d, ev);
    if (ps->render && render_event(ps->render, ev) != CLI_OK) {
        fprintf(stderr, "fuzz_event: render_event failed: %s\n", ps->render->errstr);
        abort();
    }
    for (i = 0; ps->formats && i < FUZZ_FORMATS; i++) {
        if (ps->refused[i]) continue;
        if (format_event(ps->formats[i], ev) != CLI_OK) {
            /* the samples refuse what no target sends (a frame id out of
             * range), and the session then ends: so does this format's feed */
            if (i >= FUZZ_PROFILE_FROM && strcmp(ps->formats[i]->errstr, "out of memory") != 0) {
                ps->refused[i] = 1;
                continue;
            }
            fprintf(stderr, "fuzz_event: format %d failed: %s\n", i, ps->formats[i]->errstr);
            abort();
        }
    }
}

/*
 * Decodes every whole event in buf[*head, tail) with stream_next, as the
 * session does. Returns 0 to go on reading, 1 when the client would stop
 * (bytes it refuses, or an event it cannot decode or resolve).
 */
static int decode_some(struct pass *ps, const char *buf, size_t *head, size_t tail)
{
    while (*head < tail) {
        const char *p = buf + *head;
        size_t avail = tail - *head, used = 0, end = 0;

        switch (stream_next(&ps->stream, p, avail, &used)) {
        case STREAM_PARTIAL:
            FUZZ_CHECK(used == 0);
            if (ps->checks)
                FUZZ_CHECK(rbtrace_msgpack_scan(p, avail, STREAM_EVENT_MAX, &end) ==
                           RBTRACE_SCAN_PARTIAL);
            return 0;
        case STREAM_BROKEN:
            FUZZ_CHECK(used == 0);
            /* fall through */
        case STREAM_BAD_EVENT:
            FUZZ_CHECK(ps->stream.errstr[0] != '\0' &&
                       memchr(ps->stream.errstr, '\0', sizeof(ps->stream.errstr)) != NULL);
            return 1;
        case STREAM_EVENT:
            FUZZ_CHECK(used > 0 && used <= avail);
            if (ps->stream.fast) FUZZ_CHECK(used <= RBTRACE_CALL_EVENT_MAX);
            if (ps->checks) check_event(ps, p, avail, used);
            handle(ps);
            *head += used;
            break;
        }
    }
    return 0;
}

/* The stream fed in reads of chunk bytes (all at once if 0). */
static void run(struct pass *ps, const char *stream, size_t len, size_t chunk)
{
    char *buf = malloc(len ? len : 1);
    size_t head = 0, tail = 0;

    if (!buf) abort();
    if (!msgpack_zone_init(&ps->zone, 4096)) abort();
    if (stream_init(&ps->stream) != CLI_OK) abort();
    ps->d.hash = 0xcbf29ce484222325ULL;
    while (tail < len) {
        size_t n = chunk && chunk < len - tail ? chunk : len - tail;
        memcpy(buf + tail, stream + tail, n);
        tail += n;
        if (decode_some(ps, buf, &head, tail)) {
            ps->d.broken = 1;
            break;
        }
    }
    ps->d.consumed = head;
    stream_free(&ps->stream);
    msgpack_zone_destroy(&ps->zone);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct pass whole, pieces;
    static const size_t chunks[] = { 1, 2, 3, 5, 7, 16, 29, 64 };
    static FILE *devnull;
    static const enum options_format kinds[FUZZ_FORMATS] = {
        OPTIONS_FORMAT_JSON,    OPTIONS_FORMAT_CHROME,     OPTIONS_FORMAT_FOLDED,
        OPTIONS_FORMAT_SUMMARY, OPTIONS_FORMAT_SPEEDSCOPE, OPTIONS_FORMAT_JSON
    };
    struct format *formats[FUZZ_FORMATS];
    int refused[FUZZ_FORMATS] = { 0 };
    struct format_opts fopts, profile_fopts;
    struct render_opts opts;
    struct render r;
    int i;
    const char *stream = (const char *)data + 1;
    size_t len;

    if (size == 0) return 0;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    len = size - 1;
    memset(&opts, 0, sizeof(opts));
    opts.start_time = data[0] & 1;
    opts.no_duration = (data[0] >> 1) & 1;
    opts.prefix = (data[0] >> 2) & 3;
    opts.raise_all = (data[0] >> 4) & 1;
    render_init(&r, devnull, &opts);
    memset(&fopts, 0, sizeof(fopts));
    fopts.text = opts;
    fopts.pid = 4242;
    profile_fopts = fopts;
    profile_fopts.profile = 1;
    profile_fopts.hz = 100;
    for (i = 0; i < FUZZ_FORMATS; i++)
        if (format_open(kinds[i], devnull, i >= FUZZ_PROFILE_FROM ? &profile_fopts : &fopts,
                        &formats[i]) != CLI_OK)
            abort();
    render_set_wall_origin(&r, 1700000000ULL * 1000000000ULL);

    memset(&whole.d, 0, sizeof(whole.d));
    whole.render = &r;
    whole.formats = formats;
    whole.refused = refused;
    whole.checks = 1;
    run(&whole, stream, len, 0);

    memset(&pieces.d, 0, sizeof(pieces.d));
    pieces.render = NULL;
    pieces.formats = NULL;
    pieces.checks = 0;
    run(&pieces, stream, len, chunks[(data[0] >> 4) & 7]);

    /* The whole stream and the pieces: the same events, the same end. */
    FUZZ_CHECK(whole.d.events == pieces.d.events);
    FUZZ_CHECK(whole.d.hash == pieces.d.hash);
    FUZZ_CHECK(whole.d.consumed == pieces.d.consumed);
    FUZZ_CHECK(whole.d.broken == pieces.d.broken);

    render_free(&r);
    for (i = 0; i < FUZZ_FORMATS; i++) {
        /* the trace's end: every format closes what it holds */
        if (format_finish(formats[i]) != CLI_OK && !refused[i]) abort();
        format_close(formats[i]);
    }
    return 0;
}
