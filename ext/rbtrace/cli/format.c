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

int format_finish(struct format *f)
{
    if (f->finished) return CLI_OK;
    f->finished = 1;
    return f->ops->finish(f);
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
    if (f) f->ops->destroy(f);
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
