/*
 * options.h - the client's command line, parsed into one struct.
 *
 * The options are the original rbtrace's. To add one: a field here, a row
 * in options.c's table, a line in main.c's usage.
 */
#ifndef RBTRACE_CLI_OPTIONS_H
#define RBTRACE_CLI_OPTIONS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include "cli.h"

/* What the client asks the target to do. */
enum options_mode {
    OPTIONS_MODE_NONE = 0,
    OPTIONS_MODE_METHODS,  /* -m, -c: trace the selected methods */
    OPTIONS_MODE_FIREHOSE, /* -f: trace every call */
    OPTIONS_MODE_EVAL,     /* -e: run code in the target */
    /* The reports: one eval of RBTrace::Reports each, printed as text. */
    OPTIONS_MODE_BACKTRACES, /* -b [N]: every thread's backtrace */
    OPTIONS_MODE_BACKTRACE,  /* --backtrace N: the current thread's */
    OPTIONS_MODE_MEMORY,     /* --memory: GC, objects, RSS */
    OPTIONS_MODE_HEAPDUMP,   /* --heapdump [FILE] */
    OPTIONS_MODE_SHAPESDUMP, /* --shapesdump [FILE] */
    OPTIONS_MODE_FORK,       /* --fork: an idle copy for a debugger */
    OPTIONS_MODE_INTERACTIVE /* -i: a REPL against the target (repl.c) */
};

/* --format: how a trace is written (format.h). */
enum options_format {
    OPTIONS_FORMAT_TEXT = 0,   /* the original rbtrace's lines (the default) */
    OPTIONS_FORMAT_JSON,       /* JSON Lines */
    OPTIONS_FORMAT_CHROME,     /* the Chrome trace event format */
    OPTIONS_FORMAT_FOLDED,     /* collapsed stacks, at the end */
    OPTIONS_FORMAT_SUMMARY,    /* --summary: a table per method, at the end */
    OPTIONS_FORMAT_SPEEDSCOPE, /* --profile's samples, speedscope's format */
    OPTIONS_FORMAT_PPROF       /* --profile's samples, gzipped profile.proto */
};

/* --sort: the order of --summary's rows. */
enum options_sort {
    OPTIONS_SORT_TOTAL = 0,
    OPTIONS_SORT_CALLS,
    OPTIONS_SORT_SELF,
    OPTIONS_SORT_MAX
};

/* The names --format takes, by enum options_format. */
extern const char *const options_format_names[];

struct options {
    pid_t pid;   /* the target (the first -p); 0 when none yet */
    pid_t *pids; /* -p PID...: every target given (options_add_pid) */
    size_t n_pids, pids_cap;
    const char *ps_pattern;      /* --ps: find the targets by command line */
    char **exec_argv;            /* --exec CMD ARG...: start the target; NULL-ended, in argv */
    double wait_s;               /* --wait: seconds to wait before attaching */
    int inject;                  /* --inject: load rbtrace into a process without it */
    const char *inject_dir;      /* --inject=DIR: the rbtrace to load; NULL: ours */
    double duration_s;           /* --duration: seconds to trace from the attach; 0: until ^C */
    int resume;                  /* set by exec.c: the target waits for RESUME */
    enum options_mode mode;      /* set by -m, -c, -f, -e, -i or a report */
    const char **selectors;      /* -m, -c: method selectors, pointing into argv
                                  or into tracer_texts */
    size_t n_selectors;          /* number of selectors */
    char **tracer_texts;         /* -c: the tracer files read, owned */
    size_t n_tracer_texts;       /* number of tracer files read */
    const char *eval_code;       /* -e: Ruby code, points into argv */
    double slow_ms;              /* --slow/--slowcpu: threshold; < 0 when not given */
    int slow_cpu;                /* --slowcpu: thread CPU time, not wall time */
    const char **slow_selectors; /* --slow-methods, pointing into argv */
    size_t n_slow_selectors;
    int gc;                     /* --gc: show garbage collections */
    int raises;                 /* --raise: show exceptions raised */
    int raise_all;              /* --raise-all: also each re-raise, on its own line */
    double gvl_ms;              /* --gvl [MS]: show GVL waits longer than MS, and each
                                  traced call's; < 0 when not given */
    int alloc;                  /* --alloc: objects allocated, per call and per site */
    unsigned long alloc_sample; /* --alloc-sample N: one object in N counts, as N */
    int profile;                /* --profile [wall|cpu]: 0 none, else 1 + the mode
                                   (enum rbtrace_profile_mode) */
    unsigned hz;                /* --hz N: samples a second (--profile) */
    int hz_given;               /* --hz was given */
    int top;                    /* --top: --profile's live view, each second */
    int thread_names;           /* --thread-names: each thread's name after its [tN] */
    int devmode;                /* --devmode: -m follows reloaded classes */
    const char *output_path;    /* -o: output file, NULL for stdout */
    enum options_format format; /* --format, or --summary */
    int format_given;           /* --format was given */
    enum options_sort sort;     /* --sort */
    int sort_given;             /* --sort was given */
    int summary;                /* --summary */
    int convert;                /* --convert FORMAT: a saved text trace into format */
    const char *convert_path;   /* --convert's FILE; NULL: stdin */
    int append;                 /* -a: append to the -o file */
    int start_time;             /* -t: show each call's start time */
    int no_duration;            /* -n: do not show durations */
    int stats;               /* --stats: say at the end how many events came, how many were lost */
    unsigned prefix;         /* -r: spaces per nesting level */
    double timeout;          /* --timeout: seconds to attach, detach, eval */
    int timeout_given;       /* --timeout was given (the dumps wait longer if not) */
    unsigned frames;         /* -b, --backtrace: frames per thread, 0 for all */
    const char *dump_path;   /* --heapdump, --shapesdump: FILE, NULL for the default */
    int help;                /* -h or --help */
    int short_help;          /* -h itself: an old habit for a heap dump (see options.c) */
    int version;             /* --version */
    char errstr[CLI_ERRLEN]; /* why parsing failed */
    FILE *summary_dump;      /* not an option: multi.c's session also dumps its
                                  --summary here, for the combined table */
};

/* Fills o from argv. CLI_OK, or CLI_ERR with a message in o->errstr.
 * Call options_free(o) either way. */
int options_parse(struct options *o, int argc, char **argv);

void options_free(struct options *o);

/* Adds a target (-p, --ps): 1, 0 if it is there already, CLI_ERR when out
 * of memory. The first becomes o->pid. */
int options_add_pid(struct options *o, pid_t pid);

/* Whether --slow/--slowcpu, --gc, --raise, --gvl, --alloc or --profile was given. */
int options_watches(const struct options *o);

#endif
