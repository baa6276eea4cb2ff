/*
 * format.h - the trace's output formats (--format), behind one interface.
 *
 * The session decodes events (stream.h) and hands each to the format of
 * the run; the format writes it to its FILE*, now or when the trace ends.
 * A format is pure: events in, text out to one FILE*, no other I/O.
 *
 *   text    format_text.c, the original rbtrace's lines (render.c)
 *   json    format_json.c, one JSON object a line per call, slow call,
 *           GC, raise and loss (JSON Lines); with --profile, per sample
 *   chrome  format_chrome.c, the Chrome trace event format
 *   folded  format_folded.c, collapsed stacks weighted by self time,
 *           written when the trace ends
 *   summary format_summary.c (--summary), a table per method at the end
 *   speedscope format_speedscope.c, --profile's samples in speedscope's format
 *   pprof   format_pprof.c, --profile's samples as a gzipped profile.proto
 *
 * docs/usage.md ("Output formats") says what each writes, field by field.
 * A new one (a per-method summary) is a file with a struct format_ops, a
 * name in options.h's enum options_format, and a line in format.c.
 */
#ifndef RBTRACE_CLI_FORMAT_H
#define RBTRACE_CLI_FORMAT_H

#include <stdint.h>
#include <stdio.h>
#include "codec.h"
#include "options.h"
#include "render.h"

struct format_opts {
    struct render_opts text; /* -t, -n, -r, --raise-all: text's */
    int pid;                 /* the target's (chrome's process) */
    enum options_sort sort;  /* --sort: summary's */
    int profile;             /* --profile: the samples are kept (samples.h) */
    unsigned hz;             /* --profile's --hz (speedscope's and pprof's times) */
    int profile_mode;        /* enum rbtrace_profile_mode */
};

struct format;

struct format_ops {
    /* Takes METHOD, CALL, CALL_ARGS, RETURN, LOST, FORGET, SLOW, GC,
     * RAISE, GVL, ALLOC and ALLOC_SITE; ignores the others. CLI_OK or CLI_ERR with errstr set. */
    int (*event)(struct format *f, const struct rbtrace_event *ev);
    /* The trace ended (however: ^C, SIGTERM, the target gone): writes
     * what is kept for the end and closes what is open, so that the
     * output is whole. CLI_OK or CLI_ERR. */
    int (*finish)(struct format *f);
    void (*destroy)(struct format *f);
    /* Optional (NULL): --profile's PROFILE_SAMPLE and PROFILE_MISSED, once
     * the samples (samples.h) took them: json's lines. */
    int (*profile)(struct format *f, const struct rbtrace_event *ev);
    /* Optional (NULL): text only. */
    int (*end_line)(struct format *f);
    int (*raise_open)(const struct format *f);
    void (*set_wall_origin)(struct format *f, uint64_t wall_origin_ns);
};

/* What every format is: each embeds it first in a struct of its own. */
struct format {
    const struct format_ops *ops;
    FILE *out;
    struct format_opts opts;
    uint64_t received; /* events of the trace received (--stats) ... */
    uint64_t lost;     /* ... and the target's count of those it dropped */
    int finished;      /* finish was called */
    enum options_format kind;
    struct samples *samples; /* --profile's, written at the end; NULL without */
    char errstr[128];        /* why a call failed */
    /* what finish left out of the output (speedscope's spans past its cap),
     * said on stderr by the session after it; "" when nothing */
    char note[256];
};

/* Makes the format named by kind, writing to out. CLI_OK with *f set, or
 * CLI_ERR (out of memory) with *f NULL. */
int format_open(enum options_format kind, FILE *out, const struct format_opts *opts,
                struct format **f);

/* --profile's events: kept for the end (samples.h). */
int format_samples_event(struct format *f, const struct rbtrace_event *ev);

/* Counts the event (--stats) and hands it to the format. Inline: the
 * client's hot path (a CALL or RETURN takes two compares here). */
static inline int format_event(struct format *f, const struct rbtrace_event *ev)
{
    switch (ev->type) {
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_RETURN:
    case RBTRACE_EV_CALL_ARGS:
    case RBTRACE_EV_SLOW:
    case RBTRACE_EV_GC:
    case RBTRACE_EV_RAISE:
    case RBTRACE_EV_GVL:
    case RBTRACE_EV_ALLOC:
        f->received++;
        break;
    case RBTRACE_EV_LOST:
        f->lost += ev->number;
        break;
    case RBTRACE_EV_PROFILE_FRAME:
        return format_samples_event(f, ev);
    case RBTRACE_EV_PROFILE_SAMPLE:
    case RBTRACE_EV_PROFILE_MISSED:
        if (format_samples_event(f, ev) != CLI_OK) return CLI_ERR;
        return f->ops->profile && f->samples ? f->ops->profile(f, ev) : CLI_OK;
    case RBTRACE_EV_THREAD_NAME:
        if (f->samples && format_samples_event(f, ev) != CLI_OK) return CLI_ERR;
        break;
    default:
        break;
    }
    return f->ops->event(f, ev);
}

struct samples_top;
/* --top: the view of the samples since the last (samples_write_top), to
 * f's output. CLI_OK (nothing without --profile) or CLI_ERR. */
int format_top(struct format *f, const struct samples_top *how);

/* The trace ended: once, whatever the number of calls. */
int format_finish(struct format *f);

/* Ends an open line (text), before a status line on the same terminal. */
int format_end_line(struct format *f);

/* Whether the open line is a raise line waiting for re-raises (text). */
int format_raise_open(const struct format *f);

/* Where -t times come from: the ATTACHED event's wall_origin_ns. */
void format_set_wall_origin(struct format *f, uint64_t wall_origin_ns);

/* Frees f (NULL is fine). */
void format_close(struct format *f);

/* Shared by the formats: "could not write the output: ..." when out has a
 * write error (it sticks: one check per event is enough). */
int format_check_io(struct format *f);
int format_fail(struct format *f, const char *msg);

/* The constructors, one per file: NULL when out of memory. Each fills
 * its base with format_base_init. */
struct format *format_text_new(FILE *out, const struct format_opts *opts);
struct format *format_json_new(FILE *out, const struct format_opts *opts);
struct format *format_chrome_new(FILE *out, const struct format_opts *opts);
struct format *format_folded_new(FILE *out, const struct format_opts *opts);
struct format *format_summary_new(FILE *out, const struct format_opts *opts);
struct format *format_speedscope_new(FILE *out, const struct format_opts *opts);
struct format *format_pprof_new(FILE *out, const struct format_opts *opts);
/* --summary with several processes (format_summary.c): a session's rows
 * dumped whole (histograms too) to out, and a dump merged into f, made by
 * format_summary_new, which then prints the table of all processes.
 * CLI_OK or CLI_ERR (merge: with errstr set). */
int format_summary_dump(const struct format *f, FILE *out);
int format_summary_merge(struct format *f, FILE *in);
void format_base_init(struct format *f, const struct format_ops *ops, FILE *out,
                      const struct format_opts *opts);

#endif
