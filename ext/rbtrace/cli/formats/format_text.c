/*
 * format_text.c - --format text, the default: the original rbtrace's
 * lines, written by render.c (render.h says what they look like). This
 * file only puts the renderer behind the formats' interface (format.h).
 */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "format.h"
#include "render.h"

struct format_text {
    struct format base;
    struct render render;
};

static int format_text_result(struct format *f, int rc)
{
    struct format_text *t = (struct format_text *)f;

    if (rc != CLI_OK) snprintf(f->errstr, sizeof(f->errstr), "%s", t->render.errstr);
    return rc;
}

static int format_text_event(struct format *f, const struct rbtrace_event *ev)
{
    return format_text_result(f, render_event(&((struct format_text *)f)->render, ev));
}

static int format_text_end_line(struct format *f)
{
    return format_text_result(f, render_end_line(&((struct format_text *)f)->render));
}

static int format_text_finish(struct format *f)
{
    return format_text_result(f, render_finish(&((struct format_text *)f)->render));
}

static int format_text_raise_open(const struct format *f)
{
    return render_raise_open(&((const struct format_text *)f)->render);
}

static void format_text_set_wall_origin(struct format *f, uint64_t wall_origin_ns)
{
    render_set_wall_origin(&((struct format_text *)f)->render, wall_origin_ns);
}

static void format_text_destroy(struct format *f)
{
    struct format_text *t = (struct format_text *)f;

    render_free(&t->render);
    free(t);
}

static const struct format_ops format_text_ops = {
    .event = format_text_event,
    .finish = format_text_finish,
    .destroy = format_text_destroy,
    .end_line = format_text_end_line,
    .raise_open = format_text_raise_open,
    .set_wall_origin = format_text_set_wall_origin,
};

struct format *format_text_new(FILE *out, const struct format_opts *opts)
{
    struct format_text *t = calloc(1, sizeof(*t));

    if (!t) return NULL;
    format_base_init(&t->base, &format_text_ops, out, opts);
    render_init(&t->render, out, &opts->text);
    return &t->base;
}
