/*
 * convert.h - reads a saved text trace back into events (--convert).
 *
 * Pure: text lines in, events (codec.h's struct rbtrace_event) out to a
 * callback, no I/O. The client hands the events to a format (format.h),
 * so a converted trace obeys every rule of the format it becomes.
 *
 * The lines are those render.c writes (and the original rbtrace gem
 * wrote): "[PID] " and "[tN] " prefixes, -t start times
 * ("HH:MM:SS.uuuuuu "), indentation, then one of
 *
 *   Foo#bar(x=1)              a call, open (its return comes later)
 *   Foo#bar <0.000012>        a whole call, or the return of an open one
 *   [d57] Foo#bar <0.1>       a --slow call deeper than 40 levels
 *   GC minor by newobj <...> (mark ..., sweep ...)
 *   raise E: msg at f.rb:1    (or re-raise ...)
 *   *** 12 events lost        (other "*** ..." lines are notices: skipped)
 *   garbage_collect <0.0012>  the original gem's GC line
 *
 * What the text lacks is derived (docs/usage.md, "Converting a saved
 * trace: --convert"): without -t, a call starts where its previous
 * sibling ended, or where its caller started.
 */
#ifndef RBTRACE_CLI_CONVERT_H
#define RBTRACE_CLI_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include "codec.h"
#include "id_index.h"

/* Spaces per nesting level unless told (-r's default). */
#define CONVERT_UNIT_DEFAULT 2

/* Longest line read; a longer one is not a trace of ours. */
#define CONVERT_LINE_MAX (1024 * 1024)

/* Gets each event; CLI_OK, or CLI_ERR to stop (the converter then fails). */
typedef int (*convert_emit_fn)(void *ctx, const struct rbtrace_event *ev);

struct convert_frame {
    uint64_t method_id;
    uint64_t start_ns;
    size_t indent; /* its line's, in spaces */
};

struct convert_thread {
    uint64_t pid, ordinal; /* the [PID] and [tN] it came from */
    uint64_t key;          /* its events' thread_id: PID << 20 | N where that
                              fits (PID < 2^43, N < 2^20), else 2^63 | its index */
    struct convert_frame *frames;
    size_t depth, cap;
    uint64_t cursor_ns;  /* without -t: where the next call starts */
    uint64_t *slow_next; /* --slow without -t: where the next slow call
                                  at each depth starts */
    size_t slow_cap;
    uint64_t last_open_line; /* the line of the last open call (its own
                                  return is never on the next line) */
};

struct convert_name {
    char *text; /* NULL for a free slot */
    size_t len;
    uint64_t id;
};

struct convert {
    convert_emit_fn emit;
    void *ctx;
    struct rbtrace_event *ev; /* the event being built (~2 KiB: on the heap) */
    struct convert_name *names;
    size_t names_cap, names_count;
    struct convert_thread *threads;
    size_t n_threads, threads_cap;
    struct id_index thread_index; /* ([PID], [tN]) -> its index in threads */
    uint64_t line_no;             /* of the line being read, 1-based */
    int timed;                    /* a -t time was seen: lines without one have
                                  16 blanks in its place */
    int slow;                     /* a --slow trace (calls printed at their end) */
    size_t unit;                  /* spaces per nesting level: the trace's -r
                                  (CONVERT_UNIT_DEFAULT; set after init) */
    uint64_t day_ns;              /* -t: days passed (the clock wrapped at midnight) */
    uint64_t origin_ns;           /* -t: the first time of the trace */
    uint64_t last_wall_ns;        /* -t: the last time of day read */
    int have_origin;
    uint64_t calls;   /* calls read (whole, opened or slow) */
    char errstr[256]; /* "line N: what was expected" */
};

/* CLI_OK, or CLI_ERR (out of memory); convert_free either way. */
int convert_init(struct convert *c, convert_emit_fn emit, void *ctx);
void convert_free(struct convert *c);

/* Reads one line (without its newline). CLI_OK, or CLI_ERR with errstr
 * saying which line and what was expected there (empty when the callback
 * failed: its own error says why); the events of the lines before it have
 * been emitted. */
int convert_line(struct convert *c, const char *line, size_t len);

#endif
