/*
 * format_speedscope.c - --format speedscope (with --profile): speedscope's
 * own file format (its file-format-schema.json), written when the trace
 * ends: the frames once ("shared"), then one "sampled" profile per thread,
 * its samples in order (a run of one stack merged into one weight), each
 * a list of frame indexes, the outermost first; weights in milliseconds
 * (samples / --hz), in cpu mode of CPU time.
 */
#include <inttypes.h>
#include <stdlib.h>
#include "cli.h"
#include "format.h"
#include "json.h"
#include "samples.h"

struct format_speedscope {
    struct format base;
    struct json_buf buf;
};

static int speedscope_event(struct format *base, const struct rbtrace_event *ev)
{
    (void)base;
    (void)ev;
    return CLI_OK; /* the samples are format.c's (samples.h) */
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

static int speedscope_thread_name(struct format_speedscope *f, const struct samples *s, size_t ti)
{
    char head[32];
    const struct samples_thread *t = &s->threads[ti];
    size_t n = (size_t)snprintf(head, sizeof(head), "Thread t%zu%s", ti + 1,
                                t->name && *t->name ? " " : "");
    size_t len = t->name ? strlen(t->name) : 0;
    char *all = malloc(n + len + 1);
    int rc;

    if (!all) return CLI_ERR;
    memcpy(all, head, n);
    if (len) memcpy(all + n, t->name, len);
    rc = speedscope_string(f, all, n + len);
    free(all);
    return rc;
}

static int speedscope_frames(struct format_speedscope *f, const struct samples *s)
{
    size_t id;
    FILE *out = f->base.out;

    fputs("\"shared\":{\"frames\":[", out);
    for (id = 1; id < s->n_frames; id++) {
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
    if (speedscope_thread_name(f, s, ti) != CLI_OK) return CLI_ERR;
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

static int speedscope_finish(struct format *base)
{
    struct format_speedscope *f = (struct format_speedscope *)base;
    struct samples *s = base->samples;
    FILE *out = base->out;
    size_t ti;

    fputs("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
          "\"exporter\":\"rbtrace " RBTRACE_VERSION "\",",
          out);
    fprintf(out, "\"name\":\"rbtrace --profile %s of process %d\",\"activeProfileIndex\":0,",
            base->opts.profile_mode == RBTRACE_PROFILE_CPU ? "cpu" : "wall", base->opts.pid);
    if (!s) {
        fputs("\"shared\":{\"frames\":[]},\"profiles\":[]}\n", out);
        return format_check_io(base);
    }
    if (speedscope_frames(f, s) != CLI_OK) return format_fail(base, "out of memory");
    fputs("\"profiles\":[", out);
    for (ti = 0; ti < s->n_threads; ti++) {
        if (ti) fputc(',', out);
        if (speedscope_profile(f, s, ti) != CLI_OK) return format_fail(base, "out of memory");
    }
    fputs("]}\n", out);
    return format_check_io(base);
}

static void speedscope_destroy(struct format *base)
{
    struct format_speedscope *f = (struct format_speedscope *)base;

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
    return &f->base;
}
