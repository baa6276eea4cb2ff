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
    OPTIONS_MODE_METHODS,      /* -m, -c: trace the selected methods */
    OPTIONS_MODE_FIREHOSE,     /* -f: trace every call */
    OPTIONS_MODE_EVAL          /* -e: run code in the target */
};

struct options {
    pid_t pid;                 /* -p: the target; 0 when not given */
    enum options_mode mode;    /* set by -m, -c, -f or -e */
    const char **selectors;    /* -m, -c: method selectors, pointing into argv
                                  or into tracer_texts */
    size_t n_selectors;        /* number of selectors */
    char **tracer_texts;       /* -c: the tracer files read, owned */
    size_t n_tracer_texts;     /* number of tracer files read */
    const char *eval_code;     /* -e: Ruby code, points into argv */
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

#endif
