/*
 * format_speedscope.c - --format speedscope (with --profile): speedscope's
 * own file format (its file-format-schema.json), written when the trace
 * ends: the frames once ("shared"), then one "sampled" profile per thread,
 * its samples in order (a run of one stack merged into one weight), each
 * a list of frame indexes, the outermost first; weights in milliseconds
 * (samples / --hz), in cpu mode of CPU time.
 *
 * With -m, --gc, --raise or --gvl, what they trace goes into the same file
 * as "evented" profiles (speedscope's O/C events), after the sampled ones:
 * one per thread, "Thread t2 worker (traced)", holding its calls of the
 * traced methods, its GVL waits longer than --gvl's threshold and its
 * raises ("raise KeyError", zero-length); and one "GC" for the process's
 * GCs ("GC minor", "GC major"). --slow's calls go into one more per thread,
 * "Thread t2 worker (slow)": beside -m's, a call both trace would show
 * twice, nested in itself (their times are two clock reads), and --slowcpu's
 * lengths are CPU time, which would cut -m's calls. Times in milliseconds
 * on the trace's clock.
 * The spans are kept until the end (32 bytes each), sorted, and nested by
 * force: a span that outlasts the one it starts in is cut at its end (a
 * GVL wait ending after its call's return); calls still open at the end
 * are closed at the latest time seen. At most SPEEDSCOPE_SPANS_MAX are
 * kept, in the order they end: the app sets the pace (millions of calls a
 * second), so past it the spans are counted, not kept, and the session
 * says how many on stderr (format.h's note), as does the file's name.
 */
#include <inttypes.h>
#include <stdlib.h>
#include "calls.h"
#include "cli.h"
#include "format.h"
#include "json.h"
#include "samples.h"

/* The evented profiles' track of the process's GCs (a thread id no
 * thread has: the target's ids are thread pointers). */
#define SPEEDSCOPE_GC_TRACK UINT64_MAX

/* The spans kept at most: 32 MB here (and 8 MB more while the file is
 * written; the client's peak 49 MB), a file of 78 MB, which speedscope
 * 1.25 opened in headless Chromium in 5 s, its tab at 1.6 GB: three times
 * as many would pass the 4 GB a tab's JavaScript heap may take
 * (speedscope's issues #347, #519: tabs lost at 65 and 375 MB of file).
 * A tight loop of a traced method gets there in about a second. */
#define SPEEDSCOPE_SPANS_MAX 1000000

/* A traced span: [start, end] on track (a thread id), named names[name];
 * --slow's go into the thread's profile of slow calls. */
struct speedscope_span {
    uint64_t track;
    uint64_t start, end;
    uint32_t name;
    uint32_t seq : 31; /* order of arrival (< SPEEDSCOPE_SPANS_MAX): qsort is not stable */
    uint32_t slow : 1;
};

struct format_speedscope {
    struct format base;
    struct json_buf buf;
    struct calls calls;
    struct speedscope_span *spans;
    size_t n_spans, spans_cap;
    uint64_t spans_left_out; /* past SPEEDSCOPE_SPANS_MAX */
    /* the spans' names, JSON-escaped, each once; found by a hash table of
     * indexes + 1 (0: free) */
    char **names;
    size_t *name_lens;
    size_t n_names, names_cap;
    uint32_t *name_index;
    size_t name_index_cap;
};

static uint64_t speedscope_hash(const char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;

    for (i = 0; i < len; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h;
}

/* The index of the name p[0, len) (JSON-escaped), added if new; -1 when
 * out of memory. */
static long speedscope_name(struct format_speedscope *f, const char *p, size_t len)
{
    size_t mask, i, k;

    if (f->n_names * 2 >= f->name_index_cap) {
        size_t cap = f->name_index_cap ? f->name_index_cap * 2 : 64;
        uint32_t *index = calloc(cap, sizeof(*index));

        if (!index) return -1;
        for (k = 0; k < f->n_names; k++) {
            i = speedscope_hash(f->names[k], f->name_lens[k]) & (cap - 1);
            while (index[i]) i = (i + 1) & (cap - 1);
            index[i] = (uint32_t)k + 1;
        }
        free(f->name_index);
        f->name_index = index;
        f->name_index_cap = cap;
    }
    mask = f->name_index_cap - 1;
    for (i = speedscope_hash(p, len) & mask; f->name_index[i]; i = (i + 1) & mask) {
        k = f->name_index[i] - 1;
        if (f->name_lens[k] == len && memcmp(f->names[k], p, len) == 0) return (long)k;
    }
    if (f->n_names == f->names_cap) {
        size_t cap = f->names_cap ? f->names_cap * 2 : 32;
        char **names = realloc(f->names, cap * sizeof(*names));
        size_t *lens;

        if (!names) return -1;
        f->names = names;
        if (!(lens = realloc(f->name_lens, cap * sizeof(*lens)))) return -1;
        f->name_lens = lens;
        f->names_cap = cap;
    }
    if (!(f->names[f->n_names] = malloc(len ? len : 1))) return -1;
    memcpy(f->names[f->n_names], p, len);
    f->name_lens[f->n_names] = len;
    f->name_index[i] = (uint32_t)f->n_names + 1;
    return (long)f->n_names++;
}

/* Keeps a span named p[0, len) (JSON-escaped), or counts it past
 * SPEEDSCOPE_SPANS_MAX (its name is not kept either). CLI_OK or CLI_ERR. */
static int speedscope_span(struct format_speedscope *f, uint64_t track, int slow, uint64_t start,
                           uint64_t end, const char *p, size_t len)
{
    long name;

    if (f->n_spans >= SPEEDSCOPE_SPANS_MAX) {
        f->spans_left_out++;
        return CLI_OK;
    }
    if ((name = speedscope_name(f, p, len)) < 0) return format_fail(&f->base, "out of memory");
    if (f->n_spans == f->spans_cap) {
        size_t cap = f->spans_cap ? f->spans_cap * 2 : 1024;
        struct speedscope_span *spans;

        if (cap > SPEEDSCOPE_SPANS_MAX) cap = SPEEDSCOPE_SPANS_MAX;
        if (!(spans = realloc(f->spans, cap * sizeof(*spans))))
            return format_fail(&f->base, "out of memory");
        f->spans = spans;
        f->spans_cap = cap;
    }
    f->spans[f->n_spans] = (struct speedscope_span){
        track, start, end < start ? start : end, (uint32_t)name, (uint32_t)f->n_spans, slow != 0
    };
    f->n_spans++;
    return CLI_OK;
}

static int speedscope_thread(struct format *base, const struct calls_thread *t)
{
    (void)base, (void)t;
    return CLI_OK;
}

static int speedscope_method(struct format *base, const struct rbtrace_event *ev)
{
    struct format_speedscope *f = (struct format_speedscope *)base;
    size_t n = json_escape_buf(&f->buf, ev->text.ptr, ev->text.len);

    if (n == (size_t)-1 || calls_set_name(&f->calls, ev->method_id, f->buf.p, n) != CLI_OK)
        return format_fail(base, "out of memory");
    return CLI_OK;
}

static int speedscope_args(struct format *base, struct calls_frame *frame,
                           const struct rbtrace_event *ev)
{
    (void)base, (void)frame, (void)ev;
    return CLI_OK; /* speedscope's frames have no arguments */
}

static int speedscope_call(struct format *base, const struct calls_thread *t,
                           const struct calls_frame *frame, uint64_t dur_ns)
{
    struct format_speedscope *f = (struct format_speedscope *)base;
    const struct calls_name *n = calls_name(&f->calls, frame->method_id);

    return speedscope_span(f, t->id, 0, frame->start_ns, frame->start_ns + dur_ns,
                           n ? n->text : "(unknown)", n ? n->len : 9);
}

static int speedscope_ignore(struct format *base, const struct rbtrace_event *ev)
{
    (void)base, (void)ev;
    return CLI_OK;
}

/* The thread of an event that is not a call is known too: a thread with
 * no sample is named by its number among them. CLI_OK or CLI_ERR. */
static int speedscope_note_thread(struct format_speedscope *f, uint64_t id)
{
    return calls_walk_thread(&f->calls, &f->base, speedscope_thread, id) < 0 ? CLI_ERR : CLI_OK;
}

/* --slow (--slowcpu): a call that took longer than the threshold, on its
 * thread's profile of slow calls (with --slowcpu its length is CPU time). */
static int speedscope_slow(struct format *base, const struct rbtrace_event *ev)
{
    struct format_speedscope *f = (struct format_speedscope *)base;
    const struct calls_name *n = calls_name(&f->calls, ev->method_id);

    if (speedscope_note_thread(f, ev->thread_id) != CLI_OK) return CLI_ERR;
    return speedscope_span(f, ev->thread_id, 1, ev->time_ns, ev->time_ns + ev->duration_ns,
                           n ? n->text : "(unknown)", n ? n->len : 9);
}

static int speedscope_gc(struct format *base, const struct rbtrace_event *ev)
{
    struct format_speedscope *f = (struct format_speedscope *)base;

    return speedscope_span(f, SPEEDSCOPE_GC_TRACK, 0, ev->time_ns, ev->time_ns + ev->duration_ns,
                           ev->text.len ? "GC major" : "GC minor", 8);
}

static int speedscope_raise(struct format *base, const struct rbtrace_event *ev)
{
    struct format_speedscope *f = (struct format_speedscope *)base;
    size_t n = 0;

    if (speedscope_note_thread(f, ev->thread_id) != CLI_OK) return CLI_ERR;
    if (json_buf_add(&f->buf, &n, ev->number ? "re-raise " : "raise ") != CLI_OK ||
        json_buf_add_escaped(&f->buf, &n, ev->text.ptr, ev->text.len) != CLI_OK)
        return format_fail(base, "out of memory");
    return speedscope_span(f, ev->thread_id, 0, ev->time_ns, ev->time_ns, f->buf.p, n);
}

static int speedscope_gvl(struct format *base, const struct rbtrace_event *ev)
{
    struct format_speedscope *f = (struct format_speedscope *)base;

    if (ev->duration_ns <= base->opts.text.gvl_threshold_ns) return CLI_OK;
    if (speedscope_note_thread(f, ev->thread_id) != CLI_OK) return CLI_ERR;
    return speedscope_span(f, ev->thread_id, 0, ev->time_ns, ev->time_ns + ev->duration_ns,
                           "GVL wait", 8);
}

static const struct calls_emit speedscope_emit = {
    .thread = speedscope_thread,
    .method = speedscope_method,
    .args = speedscope_args,
    .call = speedscope_call,
    .slow = speedscope_slow,
    .gc = speedscope_gc,
    .raise = speedscope_raise,
    .gvl = speedscope_gvl,
    .lost = speedscope_ignore,
};

/* The samples are format.c's (samples.h); the traced events, ours. */
static int speedscope_event(struct format *base, const struct rbtrace_event *ev)
{
    return calls_walk_event(&((struct format_speedscope *)base)->calls, base, &speedscope_emit, ev);
}

/* s[0, len) as a JSON string, quotes included. */
static int speedscope_string(struct format_speedscope *f, const char *s, size_t len)
{
    size_t n = json_escape_buf(&f->buf, s, len);

    if (n == (size_t)-1) return CLI_ERR;
    fputc('"', f->base.out);
    fwrite(f->buf.p, 1, n, f->base.out);
    fputc('"', f->base.out);
    return CLI_OK;
}

/* "Thread t2 worker" and suffix, as a JSON string. */
static int speedscope_thread_name(struct format_speedscope *f, const struct samples *s, size_t ti,
                                  const char *suffix)
{
    char head[32];
    const struct samples_thread *t = &s->threads[ti];
    size_t n = (size_t)snprintf(head, sizeof(head), "Thread t%zu%s", ti + 1,
                                t->name && *t->name ? " " : "");
    size_t len = t->name ? strlen(t->name) : 0, slen = strlen(suffix);
    char *all = malloc(n + len + slen + 1);
    int rc;

    if (!all) return CLI_ERR;
    memcpy(all, head, n);
    if (len) memcpy(all + n, t->name, len);
    memcpy(all + n + len, suffix, slen);
    rc = speedscope_string(f, all, n + len + slen);
    free(all);
    return rc;
}

/* The sample frames (frame id - 1), then the spans' names (n_frames - 1
 * + their index). */
static int speedscope_frames(struct format_speedscope *f, const struct samples *s)
{
    size_t id, k, n_frames = s ? s->n_frames : 1;
    FILE *out = f->base.out;

    fputs("\"shared\":{\"frames\":[", out);
    for (id = 1; id < n_frames; id++) {
        const struct samples_frame *fr = &s->frames[id];

        if (id > 1) fputc(',', out);
        fputs("{\"name\":", out);
        if (fr->raw) {
            if (speedscope_string(f, fr->raw, fr->raw_len) != CLI_OK) return CLI_ERR;
        } else fprintf(out, "\"(frame %zu)\"", id);
        if (fr->path_len) {
            fputs(",\"file\":", out);
            if (speedscope_string(f, fr->path, fr->path_len) != CLI_OK) return CLI_ERR;
            if (fr->line) fprintf(out, ",\"line\":%" PRIu64, fr->line);
        }
        fputc('}', out);
    }
    for (k = 0; k < f->n_names; k++) {
        if (n_frames > 1 || k) fputc(',', out);
        fputs("{\"name\":\"", out);
        fwrite(f->names[k], 1, f->name_lens[k], out);
        fputs("\"}", out);
    }
    fputs("]},", out);
    return CLI_OK;
}

/* One sampled profile: the thread's runs, frames outermost first. */
static int speedscope_profile(struct format_speedscope *f, struct samples *s, size_t ti)
{
    const struct samples_thread *t = &s->threads[ti];
    double ms = 1000.0 / (f->base.opts.hz ? f->base.opts.hz : 1);
    uint64_t total = 0;
    FILE *out = f->base.out;
    size_t r, n, k;

    for (r = 0; r < t->n_runs; r++) total += t->runs[r].weight;
    fputs("{\"type\":\"sampled\",\"name\":", out);
    if (speedscope_thread_name(f, s, ti, "") != CLI_OK) return CLI_ERR;
    fprintf(out, ",\"unit\":\"milliseconds\",\"startValue\":0,\"endValue\":%.3f,\"samples\":[",
            (double)total * ms);
    for (r = 0; r < t->n_runs; r++) {
        const char *sep = "";

        if (samples_path(s, t->runs[r].node, &n) != CLI_OK) return CLI_ERR;
        fputs(r ? ",[" : "[", out);
        /* path[n - 1] is the thread's root: not a frame */
        for (k = n - 1; k-- > 0;) {
            uint64_t id = s->nodes[s->path[k]].frame;

            if (id == 0 || id >= s->n_frames) continue;
            fprintf(out, "%s%" PRIu64, sep, id - 1);
            sep = ",";
        }
        fputc(']', out);
    }
    fputs("],\"weights\":[", out);
    for (r = 0; r < t->n_runs; r++)
        fprintf(out, "%s%.3f", r ? "," : "", (double)t->runs[r].weight * ms);
    fputs("]}", out);
    return CLI_OK;
}

static int speedscope_span_order(const void *pa, const void *pb)
{
    const struct speedscope_span *a = pa, *b = pb;

    if (a->track != b->track) return a->track < b->track ? -1 : 1;
    if (a->slow != b->slow) return a->slow < b->slow ? -1 : 1;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    if (a->end != b->end) return a->end > b->end ? -1 : 1; /* the outer first */
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Whether two spans (sorted) go into one evented profile. */
static int speedscope_same_profile(const struct speedscope_span *a, const struct speedscope_span *b)
{
    return a->track == b->track && a->slow == b->slow;
}

/* The index of the sampled thread id, or -1. */
static long speedscope_sampled_thread(const struct samples *s, uint64_t id)
{
    size_t ti;

    for (ti = 0; s && ti < s->n_threads; ti++)
        if (s->threads[ti].id == id) return (long)ti;
    return -1;
}

static void speedscope_at(FILE *out, const char *type, size_t frame, uint64_t ns, int *first)
{
    fprintf(out, "%s{\"type\":\"%s\",\"frame\":%zu,\"at\":%.6f}", *first ? "" : ",", type, frame,
            (double)ns / 1e6);
    *first = 0;
}

/* The evented profile of the spans [from, to) (one track, sorted; all
 * slow or none), nested: a span is cut where the one it starts in ends. */
static int speedscope_evented(struct format_speedscope *f, const struct samples *s, size_t from,
                              size_t to, size_t *stack)
{
    FILE *out = f->base.out;
    uint64_t track = f->spans[from].track, end = 0;
    size_t base = s ? s->n_frames - 1 : 0, depth = 0, i;
    long ti = speedscope_sampled_thread(s, track);
    const char *suffix = f->spans[from].slow ? " (slow)" : " (traced)";
    int first = 1;

    for (i = from; i < to; i++)
        if (f->spans[i].end > end) end = f->spans[i].end;
    fputs(",{\"type\":\"evented\",\"name\":", out);
    if (track == SPEEDSCOPE_GC_TRACK) fputs("\"GC\"", out);
    else if (ti >= 0) {
        if (speedscope_thread_name(f, s, (size_t)ti, suffix) != CLI_OK) return CLI_ERR;
    } else {
        /* a thread with no sample (it began after the profile's end) */
        const struct calls_thread *t = NULL;
        size_t k;

        for (k = 0; k < f->calls.n_threads; k++)
            if (f->calls.threads[k].id == track) t = &f->calls.threads[k];
        fprintf(out, "\"thread %u%s\"", t ? t->ordinal : 0, suffix);
    }
    fprintf(out, ",\"unit\":\"milliseconds\",\"startValue\":%.6f,\"endValue\":%.6f,\"events\":[",
            (double)f->spans[from].start / 1e6, (double)end / 1e6);
    for (i = from; i < to; i++) {
        struct speedscope_span *sp = &f->spans[i];

        while (depth && f->spans[stack[depth - 1]].end <= sp->start) {
            depth--;
            speedscope_at(out, "C", base + f->spans[stack[depth]].name, f->spans[stack[depth]].end,
                          &first);
        }
        if (depth && sp->end > f->spans[stack[depth - 1]].end)
            sp->end = f->spans[stack[depth - 1]].end;
        speedscope_at(out, "O", base + sp->name, sp->start, &first);
        stack[depth++] = i;
    }
    while (depth) {
        depth--;
        speedscope_at(out, "C", base + f->spans[stack[depth]].name, f->spans[stack[depth]].end,
                      &first);
    }
    fputs("]}", out);
    return CLI_OK;
}

/* The calls still open become spans, closed at the latest time seen (so
 * that their names join the frames, written first). CLI_OK or CLI_ERR. */
static int speedscope_close_open_calls(struct format_speedscope *f)
{
    uint64_t end = f->calls.last_time_ns;
    size_t i, d;

    for (i = 0; i < f->calls.n_threads; i++) {
        const struct calls_thread *t = &f->calls.threads[i];

        for (d = 0; d < t->depth; d++) {
            const struct calls_name *n = calls_name(&f->calls, t->frames[d].method_id);

            if (speedscope_span(f, t->id, 0, t->frames[d].start_ns, end, n ? n->text : "(unknown)",
                                n ? n->len : 9) != CLI_OK)
                return CLI_ERR;
        }
    }
    calls_drop_all(&f->calls);
    return CLI_OK;
}

/* The spans sorted by track and time; an evented profile a track. */
static int speedscope_write_evented(struct format_speedscope *f, const struct samples *s)
{
    size_t i, from;
    size_t *stack;

    if (f->n_spans == 0) return CLI_OK;
    qsort(f->spans, f->n_spans, sizeof(*f->spans), speedscope_span_order);
    if (!(stack = malloc(f->n_spans * sizeof(*stack))))
        return format_fail(&f->base, "out of memory");
    for (from = 0; from < f->n_spans; from = i) {
        for (i = from; i < f->n_spans && speedscope_same_profile(&f->spans[i], &f->spans[from]);
             i++)
            continue;
        if (speedscope_evented(f, s, from, i, stack) != CLI_OK) {
            free(stack);
            return format_fail(&f->base, "out of memory");
        }
    }
    free(stack);
    return CLI_OK;
}

static int speedscope_finish(struct format *base)
{
    struct format_speedscope *f = (struct format_speedscope *)base;
    struct samples *s = base->samples;
    FILE *out = base->out;
    size_t ti;
    int rc;

    /* first: the spans' count is final, their names all known */
    if ((rc = speedscope_close_open_calls(f)) != CLI_OK) return rc;
    fputs("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
          "\"exporter\":\"rbtrace " RBTRACE_VERSION "\",",
          out);
    fprintf(out, "\"name\":\"rbtrace --profile %s of process %d",
            base->opts.profile_mode == RBTRACE_PROFILE_CPU ? "cpu" : "wall", base->opts.pid);
    if (f->spans_left_out)
        fprintf(out, " (%" PRIu64 " traced spans left out past the first %d)", f->spans_left_out,
                SPEEDSCOPE_SPANS_MAX);
    fputs("\",\"activeProfileIndex\":0,", out);
    if (speedscope_frames(f, s) != CLI_OK) return format_fail(base, "out of memory");
    /* the sampled profiles, then the evented ones (each with a comma first) */
    fputs("\"profiles\":[", out);
    for (ti = 0; s && ti < s->n_threads; ti++) {
        if (ti) fputc(',', out);
        if (speedscope_profile(f, s, ti) != CLI_OK) return format_fail(base, "out of memory");
    }
    if (!s || s->n_threads == 0) {
        /* no sample at all: an empty sampled profile keeps the commas right */
        fprintf(out,
                "{\"type\":\"sampled\",\"name\":\"(no samples)\",\"unit\":\"milliseconds\","
                "\"startValue\":0,\"endValue\":0,\"samples\":[],\"weights\":[]}");
    }
    if ((rc = speedscope_write_evented(f, s)) != CLI_OK) return rc;
    fputs("]}\n", out);
    if (f->spans_left_out)
        snprintf(base->note, sizeof(base->note),
                 "speedscope: %" PRIu64 " traced spans (calls, slow calls, GCs, raises, GVL "
                 "waits) were left out of the file, which keeps the first %d that ended: "
                 "trace fewer methods, or for a shorter --duration",
                 f->spans_left_out, SPEEDSCOPE_SPANS_MAX);
    return format_check_io(base);
}

static void speedscope_destroy(struct format *base)
{
    struct format_speedscope *f = (struct format_speedscope *)base;
    size_t k;

    calls_free(&f->calls);
    for (k = 0; k < f->n_names; k++) free(f->names[k]);
    free(f->names);
    free(f->name_lens);
    free(f->name_index);
    free(f->spans);
    json_buf_free(&f->buf);
    free(f);
}

static const struct format_ops format_speedscope_ops = {
    .event = speedscope_event,
    .finish = speedscope_finish,
    .destroy = speedscope_destroy,
};

struct format *format_speedscope_new(FILE *out, const struct format_opts *opts)
{
    struct format_speedscope *f = calloc(1, sizeof(*f));

    if (!f) return NULL;
    format_base_init(&f->base, &format_speedscope_ops, out, opts);
    calls_init(&f->calls);
    return &f->base;
}
