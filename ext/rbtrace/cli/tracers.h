/*
 * tracers.h - tracer files (-c): selectors kept in a file, one a line.
 *
 * `-c NAME` reads a tracer shipped with rbtrace, NAME.tracer in the
 * shipped directory; `-c PATH` reads a file of the user's. An argument that
 * contains '/' or ends in ".tracer" is a path, anything else a name.
 *
 * In a file, each line is one selector, exactly as -m takes it (trace
 * expressions included). Blank lines are skipped; '#' starts a comment at
 * the start of a line or after a blank, outside the parentheses and quotes
 * of trace expressions (so `String#gsub # why` is the selector String#gsub).
 */
#ifndef RBTRACE_CLI_TRACERS_H
#define RBTRACE_CLI_TRACERS_H

#include <stddef.h>

/* The environment variable that overrides the shipped tracers' directory. */
#define TRACERS_DIR_ENV "RBTRACE_TRACERS_DIR"
/* The longest line a tracer file may have, in bytes. */
#define TRACERS_LINE_MAX 4096
/* The biggest tracer file read, in bytes. */
#define TRACERS_FILE_MAX (1024 * 1024)

/* One tracer file, read. */
struct tracer_file {
    char *text;             /* the file's bytes, each selector NUL-terminated
                                  in place; owned (malloc) */
    const char **selectors; /* the selectors in file order, into text; owned */
    size_t n_selectors;     /* at least one when tracer_file_read succeeded */
};

/*
 * Reads the tracer file that arg names (a shipped name or a path, see
 * above). CLI_OK, or CLI_ERR with a message for the user in errstr, which
 * names the file and line at fault and what to do. Call tracer_file_free
 * either way.
 */
int tracer_file_read(struct tracer_file *tf, const char *arg, char *errstr, size_t errlen);

void tracer_file_free(struct tracer_file *tf);

/*
 * The directory of the shipped tracers: $RBTRACE_TRACERS_DIR if set, else
 * tracers/ two levels above the running client (which is installed as
 * lib/rbtrace/rbtrace-client, in a checkout and in the gem). CLI_OK, or
 * CLI_ERR with a message in errstr.
 */
int tracers_dir(char *dir, size_t len, char *errstr, size_t errlen);

/*
 * Whether text (one line, comment already removed) has the shape of a
 * selector: meth, Class#meth, Class.meth, Class#, Class., each optionally
 * followed by (expressions), and optionally after a '?' (a line for other
 * versions of a library: ext/rbtrace/selector.h). Mirrors lib/rbtrace/selector.rb, which the
 * target applies; expressions are checked there.
 */
int tracers_selector_shape_ok(const char *text);

#endif
