/*
 * format.c - the formats' common part (format.h): which one to make,
 * the counts --stats prints, the optional operations.
 */
#define _GNU_SOURCE /* ferror_unlocked */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "format.h"
#include "samples.h"

int format_open(enum options_format kind, FILE *out, const struct format_opts *opts,
                struct format **fp)
{
    struct format *f = NULL;

    switch (kind) {
    case OPTIONS_FORMAT_TEXT:
        f = format_text_new(out, opts);
        break;
    case OPTIONS_FORMAT_JSON:
        f = format_json_new(out, opts);
        break;
    case OPTIONS_FORMAT_CHROME:
        f = format_chrome_new(out, opts);
        break;
    case OPTIONS_FORMAT_FOLDED:
        f = format_folded_new(out, opts);
        break;
    case OPTIONS_FORMAT_SUMMARY:
        f = format_summary_new(out, opts);
        break;
    case OPTIONS_FORMAT_SPEEDSCOPE:
        f = format_speedscope_new(out, opts);
        break;
    case OPTIONS_FORMAT_PPROF:
        f = format_pprof_new(out, opts);
        break;
    }
    if (f) f->kind = kind;
    if (f && opts->profile && !(f->samples = samples_new())) {
        format_close(f);
        f = NULL;
    }
    *fp = f;
    return f ? CLI_OK : CLI_ERR;
}

void format_base_init(struct format *f, const struct format_ops *ops, FILE *out,
                      const struct format_opts *opts)
{
    f->ops = ops;
    f->out = out;
    f->opts = *opts;
}

int format_top(struct format *f, const struct samples_top *how)
{
    if (!f->samples) return CLI_OK;
    if (samples_write_top(f->samples, f->out, how) != CLI_OK)
        return format_fail(f, "out of memory");
    return format_check_io(f);
}

int format_samples_event(struct format *f, const struct rbtrace_event *ev)
{
    char err[RBTRACE_ERRLEN];

    if (!f->samples) return CLI_OK;
    if (samples_event(f->samples, ev, err) == CLI_OK) return CLI_OK;
    snprintf(f->errstr, sizeof(f->errstr), "%.100s", err);
    return CLI_ERR;
}

/* --profile's part of the output: folded's lines are the samples' stacks
 * (weights in samples: the calls' stacks, in microseconds, would not add
 * up with them); text and summary end with the table of methods. */
static int format_finish_samples(struct format *f)
{
    int rc = CLI_OK;

    switch (f->kind) {
    case OPTIONS_FORMAT_FOLDED:
        rc = samples_write_folded(f->samples, f->out);
        break;
    case OPTIONS_FORMAT_TEXT:
    case OPTIONS_FORMAT_SUMMARY:
        if (format_end_line(f) != CLI_OK) return CLI_ERR;
        rc = samples_write_table(f->samples, f->out);
        break;
    default:
        break;
    }
    if (rc != CLI_OK) return format_fail(f, "out of memory");
    return format_check_io(f);
}

int format_finish(struct format *f)
{
    if (f->finished) return CLI_OK;
    f->finished = 1;
    if (f->samples && f->kind == OPTIONS_FORMAT_FOLDED) return format_finish_samples(f);
    if (f->ops->finish(f) != CLI_OK) return CLI_ERR;
    return f->samples ? format_finish_samples(f) : CLI_OK;
}

int format_end_line(struct format *f)
{
    return f->ops->end_line ? f->ops->end_line(f) : CLI_OK;
}

int format_raise_open(const struct format *f)
{
    return f->ops->raise_open ? f->ops->raise_open(f) : 0;
}

void format_set_wall_origin(struct format *f, uint64_t wall_origin_ns)
{
    if (f->ops->set_wall_origin) f->ops->set_wall_origin(f, wall_origin_ns);
}

void format_close(struct format *f)
{
    if (!f) return;
    samples_free(f->samples);
    f->ops->destroy(f);
}

int format_fail(struct format *f, const char *msg)
{
    snprintf(f->errstr, sizeof(f->errstr), "%s", msg);
    return CLI_ERR;
}

int format_check_io(struct format *f)
{
    if (!ferror_unlocked(f->out)) return CLI_OK;
    snprintf(f->errstr, sizeof(f->errstr), "could not write the output: %s", strerror(errno));
    return CLI_ERR;
}
