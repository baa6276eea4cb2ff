/*
 * render.h - turns events into the original rbtrace's text output.
 *
 * Pure: events in, text out to one FILE*, no other I/O. The session feeds
 * it METHOD, CALL, CALL_ARGS, RETURN and LOST events; status lines
 * ("*** attached ...") are the session's business, on stderr.
 *
 * Output, per call: the caller's name when the call starts, left open; the
 * duration on the same line if nothing was printed before the return,
 * otherwise the name again with the duration on a line of its own:
 *
 *   Dir.chdir
 *     Dir.pwd <0.000023>
 *   Dir.chdir <0.499025>
 *
 * Nesting is tracked per thread; once two threads have been seen, every
 * line starts with "[tN] ", N the thread's ordinal. LOST events (the target
 * dropped some) print "*** N events lost" and empty every stack.
 *
 * SLOW events print "name <seconds>" indented by their own depth, up to
 * RENDER_SLOW_INDENT_MAX levels; deeper ones are indented that much and
 * say their depth: "[d57] name <seconds>". GC and RAISE events print one
 * line each at the current depth of their thread:
 *
 *   GC minor by newobj <0.000812> (mark 0.000600, sweep 0.000212)
 *   raise ArgumentError: bad value at app.rb:12
 *
 * A raise line is held, per thread, for the re-raises of its exception
 * (the target says which RAISE re-raises the exception its thread raised
 * last): they print nothing at once, and the line, when it is printed,
 * says how many times and where last, as
 *
 *   raise ArgumentError: bad value at app.rb:12 (re-raised 4 times, last at mw.rb:9)
 *
 * Other threads' output does not end it (a Puma worker's other threads go
 * on serving while Rails' middleware re-raises a request's exception): it
 * is printed before its thread's next event of another kind, once events
 * come RENDER_HOLD_NS (in the target's clock) after it, or when the
 * session ends the output (render_end_line: the target is quiet, a status
 * line, the end). A re-raise after that, or every re-raise under raise_all
 * (--raise-all, which holds nothing), prints a line of its own:
 *
 *   re-raise ArgumentError: bad value at mw.rb:9
 *
 * With --gvl (opts.gvl), once the target has said that it measures GVL
 * waits (its first GVL event), each traced call's duration is followed by
 * the time its thread waited for the GVL inside it (GVL events, which the
 * target sends before the thread's next call event), and a wait longer
 * than opts.gvl_threshold_ns prints a line at its thread's depth:
 *
 *   Worker#crunch <0.210000> gvl <0.180000>
 *   GVL wait <0.012345>
 *
 * With --alloc (opts.alloc), each traced call's line ends with the objects
 * its thread allocated between its call and its return (ALLOC events;
 * callees included), and the end of the trace adds the report of
 * alloc_report.h (render_finish):
 *
 *   Foo#bar <0.001234> alloc 1600
 *
 * With --thread-names (opts.thread_names), a thread the target named
 * (THREAD_NAME events) shows its name after its number, on every line,
 * even while it is the only thread seen; one without a name shows the
 * number alone, as without the option:
 *
 *   [t2 puma srv tp 001] Foo#bar <0.000012>
 *
 * The name is cut to RENDER_THREAD_NAME_MAX bytes ("..." then follows),
 * escaped, and its ']' written "\x5d", so that the prefix ends at the
 * first ']' (--convert reads it so).
 *
 * Names, expression values and GC and raise text are the app's bytes: they
 * are printed escaped (escape.h).
 */
#ifndef RBTRACE_CLI_RENDER_H
#define RBTRACE_CLI_RENDER_H

#include <stdint.h>
#include <stdio.h>
#include "alloc_report.h"
#include "codec.h"

struct render_opts {
    int start_time;             /* -t: "HH:MM:SS.uuuuuu " before each call */
    int no_duration;            /* -n: no " <seconds>" */
    unsigned prefix;            /* -r: spaces per nesting level */
    int raise_all;              /* --raise-all: every re-raise on its own line */
    int gvl;                    /* --gvl: " gvl <seconds>" after each call's duration */
    uint64_t gvl_threshold_ns;  /* --gvl MS: longer waits get a line of their own */
    int alloc;                  /* --alloc: " alloc N" after each call's duration */
    unsigned long alloc_sample; /* --alloc-sample, for the report */
    int thread_names;           /* --thread-names: "[tN name]" (THREAD_NAME events) */
};

/* The most bytes of a thread's name shown (before escaping), then "...". */
#define RENDER_THREAD_NAME_MAX 48

/* The deepest a SLOW line is indented, in levels; deeper ones say "[dN]". */
#define RENDER_SLOW_INDENT_MAX 40

/* Longest a raise line is held for its re-raises while the target runs. */
#define RENDER_HOLD_NS 1000000000ULL

/* A raise line held for its re-raises (above): the target's text, raw. */
struct render_held {
    char *text; /* class, message, location, back to back */
    size_t text_cap;
    uint32_t class_len, message_len, where_len;
    uint64_t time_ns;  /* when raised */
    size_t depth;      /* its thread's depth then */
    int reraise;       /* itself a re-raise ("re-raise ...") */
    uint64_t reraises; /* folded into it, */
    char *last_at;     /* the last one's location, escaped (not NUL-ended) */
    size_t last_at_len, last_at_cap;
};

/* One open call on a thread's stack. */
struct render_frame {
    uint64_t method_id;
    uint64_t start_ns;
    uint64_t gvl_ns; /* --gvl: its thread's GVL waits inside it, so far */
    uint64_t alloc;  /* --alloc: objects its thread allocated inside it, so far */
};

struct render_thread {
    uint64_t id;      /* the target's thread id */
    unsigned ordinal; /* 1-based, in order of first appearance */
    struct render_frame *frames;
    size_t depth; /* open calls */
    size_t cap;   /* room in frames */
    char *name;   /* --thread-names: its name, escaped and cut, or NULL */
    size_t name_len;
    int holding; /* held is a raise line not yet printed */
    struct render_held held;
};

/* Method names by id: open addressing, linear probing. */
struct render_name {
    uint64_t id;
    char *name; /* NUL-terminated copy; NULL for a free slot */
    size_t len; /* strlen(name) */
};

struct render {
    FILE *out;
    struct render_opts opts;
    uint64_t wall_origin_ns; /* CLOCK_REALTIME at the target's clock origin */
    struct render_name *names;
    size_t names_cap; /* a power of two, or 0 */
    size_t names_count;
    struct render_thread *threads;
    size_t n_threads;
    size_t threads_cap;
    size_t last_thread;        /* index of the thread of the last event: a
                                  trace's events mostly come from one thread */
    int64_t hms_secs;          /* -t: the second hms shows, or -1 */
    char hms[16];              /* "HH:MM:SS" of hms_secs */
    int line_open;             /* the last line printed is not yet ended */
    size_t open_thread;        /* which thread's call it shows (index) ... */
    size_t open_depth;         /* ... and that call's depth (1-based) */
    size_t max_nesting;        /* deepest stack seen on any thread; never reset */
    int gvl_live;              /* a GVL event came: the target measures waits (the
                                  " gvl <...>" of calls is shown from then on) */
    size_t n_held;             /* threads holding a raise line */
    struct alloc_report alloc; /* --alloc: the methods' totals and the sites, for the end */
    uint64_t received;         /* events of the trace received (--stats) ... */
    uint64_t lost;             /* ... and the target's count of those it dropped */
    char errstr[128];          /* why a call failed */
};

void render_init(struct render *r, FILE *out, const struct render_opts *opts);
void render_free(struct render *r);

/* The trace ended: ends an open line, then --alloc's report. CLI_OK or
 * CLI_ERR (write error). */
int render_finish(struct render *r);

/* Where -t times come from: the ATTACHED event's wall_origin_ns. */
void render_set_wall_origin(struct render *r, uint64_t wall_origin_ns);

/* Renders METHOD, CALL, CALL_ARGS, RETURN, LOST, SLOW, GC, RAISE or GVL;
 * ignores other events.
 * CLI_OK, or CLI_ERR (out of memory, write error) with r->errstr set. */
int render_event(struct render *r, const struct rbtrace_event *ev);

/* Prints the raise lines held, oldest first, and ends the open line, if
 * any: call before printing anything else on the same terminal, and once
 * the target is quiet. CLI_OK or CLI_ERR as above. */
int render_end_line(struct render *r);

/* Whether a raise line is held, waiting for re-raises to fold: the session
 * prints it (render_end_line) once the target is quiet. */
int render_raise_open(const struct render *r);

/* Room for render_format_seconds' text: 20 digits, '.', 6 digits. */
#define RENDER_SECONDS_MAX 28

/* Writes ns nanoseconds as seconds, exactly as printf's "%.6f" writes
 * ns / 1e9 (a double), but with integer arithmetic. Returns the length;
 * out is not NUL-terminated. */
size_t render_format_seconds(char *out, uint64_t ns);

#endif
