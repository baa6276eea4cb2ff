/*
 * options.h - the client's command line, parsed into one struct.
 *
 * The options are the original rbtrace's. To add one: a field here, a row
 * in options.c's table, a line in main.c's usage.
 */
#ifndef RBTRACE_CLI_OPTIONS_H
#define RBTRACE_CLI_OPTIONS_H

#include <stddef.h>
#include <sys/types.h>
#include "cli.h"

/* What the client asks the target to do. */
enum options_mode {
    OPTIONS_MODE_NONE = 0,
    OPTIONS_MODE_METHODS,      /* -m: trace the selected methods */
    OPTIONS_MODE_FIREHOSE,     /* -f: trace every call */
    OPTIONS_MODE_EVAL,         /* -e: run code in the target */
    OPTIONS_MODE_INTERACTIVE   /* -i: a REPL against the target (repl.c) */
};

struct options {
    pid_t pid;                 /* -p: the target; 0 when not given */
    enum options_mode mode;    /* set by -m, -f, -e or -i */
    const char **selectors;    /* -m: method selectors, pointing into argv */
    size_t n_selectors;        /* number of selectors */
    const char *eval_code;     /* -e: Ruby code, points into argv */
    double slow_ms;            /* --slow/--slowcpu: threshold; < 0 when not given */
    int slow_cpu;              /* --slowcpu: thread CPU time, not wall time */
    const char **slow_selectors; /* --slow-methods, pointing into argv */
    size_t n_slow_selectors;
    int gc;                    /* --gc: show garbage collections */
    int raises;                /* --raise: show exceptions raised */
    int devmode;               /* --devmode: -m follows reloaded classes */
    const char *output_path;   /* -o: output file, NULL for stdout */
    int append;                /* -a: append to the -o file */
    int start_time;            /* -t: show each call's start time */
    int no_duration;           /* -n: do not show durations */
    unsigned prefix;           /* -r: spaces per nesting level */
    double timeout;            /* --timeout: seconds to attach, detach, eval */
    int help;                  /* -h */
    int version;               /* --version */
    char errstr[CLI_ERRLEN];   /* why parsing failed */
};

/* Fills o from argv. CLI_OK, or CLI_ERR with a message in o->errstr.
 * Call options_free(o) either way. */
int options_parse(struct options *o, int argc, char **argv);

void options_free(struct options *o);

/* Whether --slow/--slowcpu, --gc or --raise was given. */
int options_watches(const struct options *o);

#endif
