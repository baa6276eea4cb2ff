/*
 * options.c - parses the command line into struct options.
 *
 * Table-driven: each option has a short letter, a long name, a kind and a
 * setter. Accepted spellings: -p 123, -p123, --pid 123, --pid=123; flags
 * combine (-tn). -m and -c take every following argument up to the next
 * one that starts with '-', and may repeat; their selectors add up. An optional value (-b [N], --heapdump
 * [FILE]) is the next argument only if it does not start with '-'.
 *
 * -h is help. The original rbtrace also used -h for a heap dump, so -h
 * with anything else (rbtrace -p 123 -h, -h FILE) is refused with a hint
 * instead of quietly printing the help.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "options.h"
#include "codec.h"
#include "tracers.h"

#define OPTIONS_DEFAULT_PREFIX 2
#define OPTIONS_DEFAULT_TIMEOUT 5.0
#define OPTIONS_MAX_PREFIX 64
#define OPTIONS_MAX_TIMEOUT 86400.0
/* --duration: a year at most (its milliseconds fit an int64 many times). */
#define OPTIONS_MAX_DURATION (366 * 86400.0)
#define OPTIONS_MAX_FRAMES 1000000
#define OPTIONS_DEFAULT_GVL_MS 1.0
/* --profile's samples a second: bench/profile.rb measured its cost
 * (bench/RESULTS.md, "--profile"). */
#define OPTIONS_DEFAULT_HZ 100
/* --alloc's sample: the app keeps >= 0.5x of its untraced speed on an
 * allocation-heavy loop (bench/alloc.rb, bench/RESULTS.md). */
#define OPTIONS_DEFAULT_ALLOC_SAMPLE 16
#define OPTIONS_MAX_ALLOC_SAMPLE 1000000000ul
#define OPTIONS_HEAPDUMP_HINT "-h is --help; for a heap dump use --heapdump [FILE]"

enum options_kind {
    OPTIONS_FLAG,     /* no value */
    OPTIONS_VALUE,    /* one value */
    OPTIONS_OPTIONAL, /* a value if the next argument is not an option */
    OPTIONS_LIST,     /* one or more values (-m) */
    OPTIONS_REST      /* every argument after it (--exec CMD ARG...) */
};

struct options_spec {
    char letter;      /* short name, 0 if none */
    const char *name; /* long name */
    enum options_kind kind;
    int (*set)(struct options *o, const struct options_spec *spec, const char *value);
    size_t flag; /* options_set_flag: offset of its int field */
};

#define OPTIONS_FLAG_FIELD(field) options_set_flag, offsetof(struct options, field)

static int options_fail(struct options *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int options_fail(struct options *o, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(o->errstr, sizeof(o->errstr), fmt, ap);
    va_end(ap);
    return CLI_ERR;
}

/* "-p" or "--timeout", for messages. */
static const char *options_spelling(const struct options_spec *spec, char *buf, size_t len)
{
    if (spec->letter) snprintf(buf, len, "-%c", spec->letter);
    else snprintf(buf, len, "--%s", spec->name);
    return buf;
}

static int options_bad_value(struct options *o, const struct options_spec *spec, const char *value,
                             const char *want)
{
    char name[40];

    return options_fail(o, "invalid value '%s' for %s: expected %s", value,
                        options_spelling(spec, name, sizeof(name)), want);
}

/* The option that chooses each mode, for messages. */
static const char *const options_mode_names[] = {
    [OPTIONS_MODE_NONE] = "",
    [OPTIONS_MODE_METHODS] = "-m/-c",
    [OPTIONS_MODE_FIREHOSE] = "-f",
    [OPTIONS_MODE_EVAL] = "-e",
    [OPTIONS_MODE_BACKTRACES] = "-b",
    [OPTIONS_MODE_BACKTRACE] = "--backtrace",
    [OPTIONS_MODE_MEMORY] = "--memory",
    [OPTIONS_MODE_HEAPDUMP] = "--heapdump",
    [OPTIONS_MODE_SHAPESDUMP] = "--shapesdump",
    [OPTIONS_MODE_FORK] = "--fork",
    [OPTIONS_MODE_INTERACTIVE] = "-i",
};

/* One mode per run: -m, -f, -e or one report. */
static int options_set_mode(struct options *o, enum options_mode mode)
{
    if (o->mode != OPTIONS_MODE_NONE && o->mode != mode)
        return options_fail(o, "%s and %s cannot be combined: choose one",
                            options_mode_names[o->mode], options_mode_names[mode]);
    if (o->mode == mode && mode >= OPTIONS_MODE_BACKTRACES)
        return options_fail(o, "%s may be given only once", options_mode_names[mode]);
    o->mode = mode;
    return CLI_OK;
}

/* ---- setters, one per option ---- */

static int options_set_pid(struct options *o, const struct options_spec *spec, const char *value)
{
    char *end;
    long pid;

    errno = 0;
    pid = strtol(value, &end, 10);
    if (errno || end == value || *end || pid <= 0 || pid > INT_MAX)
        return options_bad_value(o, spec, value, "a process id");
    switch (options_add_pid(o, (pid_t)pid)) {
    case 0:
        return options_fail(o, "process %ld given twice", pid);
    case CLI_ERR:
        return options_fail(o, "out of memory");
    default:
        return CLI_OK;
    }
}

int options_add_pid(struct options *o, pid_t pid)
{
    size_t i;

    for (i = 0; i < o->n_pids; i++)
        if (o->pids[i] == pid) return 0;
    if (o->n_pids == o->pids_cap) {
        size_t cap = o->pids_cap ? o->pids_cap * 2 : 8;
        pid_t *grown = realloc(o->pids, cap * sizeof(*grown));
        if (!grown) return CLI_ERR;
        o->pids = grown;
        o->pids_cap = cap;
    }
    o->pids[o->n_pids++] = pid;
    if (!o->pid) o->pid = pid;
    return 1;
}

static int options_set_ps(struct options *o, const struct options_spec *spec, const char *value)
{
    regex_t re;
    char why[128];
    int err;

    if (*value == '\0') return options_bad_value(o, spec, value, "a pattern");
    /* Compiled here too, so that a bad one is a bad command line (exit 2);
     * ps.c compiles it again to use it. */
    if ((err = regcomp(&re, value, REG_EXTENDED | REG_NOSUB)) != 0) {
        regerror(err, &re, why, sizeof(why));
        return options_fail(o,
                            "--ps: bad pattern '%s': %s: give an extended regular expression "
                            "(grep -E's), e.g. 'puma.*3000' or 'sidekiq\\('",
                            value, why);
    }
    regfree(&re);
    o->ps_pattern = value;
    return CLI_OK;
}

static int options_set_wait(struct options *o, const struct options_spec *spec, const char *value)
{
    char *end;
    double t;

    errno = 0;
    t = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(t) || t < 0 || t > OPTIONS_MAX_TIMEOUT)
        return options_bad_value(o, spec, value, "a number of seconds, 0 or more");
    o->wait_s = t;
    return CLI_OK;
}

/* --duration SECS: seconds, decimals allowed; above 0. */
static int options_set_duration(struct options *o, const struct options_spec *spec,
                                const char *value)
{
    char *end;
    double t;

    errno = 0;
    t = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(t) || t <= 0 || t > OPTIONS_MAX_DURATION)
        return options_bad_value(o, spec, value,
                                 "a number of seconds above 0 to trace for, e.g. 10 or 0.5");
    o->duration_s = t;
    return CLI_OK;
}

static int options_add_selector(struct options *o, const struct options_spec *spec,
                                const char *value)
{
    (void)spec;
    if (options_set_mode(o, OPTIONS_MODE_METHODS) != CLI_OK) return CLI_ERR;
    if (*value == '\0') return options_fail(o, "empty method selector for -m");
    if (o->n_selectors >= RBTRACE_SELECTORS_MAX)
        return options_fail(o, "too many method selectors (at most %d)", RBTRACE_SELECTORS_MAX);
    o->selectors[o->n_selectors++] = value;
    return CLI_OK;
}

/* -c NAME|FILE: the file's selectors, as if each were given to -m. */
static int options_add_tracer(struct options *o, const struct options_spec *spec, const char *value)
{
    struct tracer_file tf;
    size_t i;

    (void)spec;
    if (options_set_mode(o, OPTIONS_MODE_METHODS) != CLI_OK) return CLI_ERR;
    if (*value == '\0') return options_fail(o, "empty tracer name for -c");
    if (tracer_file_read(&tf, value, o->errstr, sizeof(o->errstr)) != CLI_OK) {
        tracer_file_free(&tf);
        return CLI_ERR;
    }
    if (tf.n_selectors > RBTRACE_SELECTORS_MAX - o->n_selectors) {
        options_fail(o, "too many method selectors (at most %d): -c %s adds %zu to %zu",
                     RBTRACE_SELECTORS_MAX, value, tf.n_selectors, o->n_selectors);
        tracer_file_free(&tf);
        return CLI_ERR;
    }
    for (i = 0; i < tf.n_selectors; i++) o->selectors[o->n_selectors++] = tf.selectors[i];
    /* The selectors point into the text: keep it until options_free. */
    o->tracer_texts[o->n_tracer_texts++] = tf.text;
    tf.text = NULL;
    tracer_file_free(&tf);
    return CLI_OK;
}

static int options_set_firehose(struct options *o, const struct options_spec *spec,
                                const char *value)
{
    (void)spec;
    (void)value;
    return options_set_mode(o, OPTIONS_MODE_FIREHOSE);
}

static int options_set_eval(struct options *o, const struct options_spec *spec, const char *value)
{
    (void)spec;
    if (o->eval_code) return options_fail(o, "-e may be given only once");
    if (options_set_mode(o, OPTIONS_MODE_EVAL) != CLI_OK) return CLI_ERR;
    o->eval_code = value;
    return CLI_OK;
}

static int options_set_interactive(struct options *o, const struct options_spec *spec,
                                   const char *value)
{
    (void)spec;
    (void)value;
    return options_set_mode(o, OPTIONS_MODE_INTERACTIVE);
}

/* --slow MS, --slowcpu MS: milliseconds, decimals allowed. */
static int options_set_slow(struct options *o, const struct options_spec *spec, const char *value)
{
    int cpu = strcmp(spec->name, "slowcpu") == 0;
    char *end;
    double ms;

    if (o->slow_ms >= 0 && o->slow_cpu != cpu)
        return options_fail(o,
                            "--slow and --slowcpu cannot be combined: choose wall time "
                            "(--slow) or CPU time (--slowcpu)");
    errno = 0;
    ms = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(ms) || ms < 0 || ms > OPTIONS_MAX_TIMEOUT * 1000)
        return options_bad_value(o, spec, value, "a number of milliseconds, 0 or more");
    o->slow_ms = ms;
    o->slow_cpu = cpu;
    return CLI_OK;
}

/* --gvl [MS]: GVL waits longer than MS milliseconds get a line (default 1). */
static int options_set_gvl(struct options *o, const struct options_spec *spec, const char *value)
{
    char *end;
    double ms;

    o->gvl_ms = OPTIONS_DEFAULT_GVL_MS;
    if (!value) return CLI_OK;
    errno = 0;
    ms = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(ms) || ms < 0 || ms > OPTIONS_MAX_TIMEOUT * 1000)
        return options_bad_value(o, spec, value, "a number of milliseconds, 0 or more");
    o->gvl_ms = ms;
    return CLI_OK;
}

/* --profile [wall|cpu]: sample every thread's stack (wall, the default). */
static int options_set_profile(struct options *o, const struct options_spec *spec,
                               const char *value)
{
    if (!value || !strcmp(value, "wall")) o->profile = 1 + RBTRACE_PROFILE_WALL;
    else if (!strcmp(value, "cpu")) o->profile = 1 + RBTRACE_PROFILE_CPU;
    else return options_bad_value(o, spec, value, "wall or cpu");
    return CLI_OK;
}

/* --hz N: samples a second for --profile. */
static int options_set_hz(struct options *o, const struct options_spec *spec, const char *value)
{
    char *end;
    unsigned long n;

    errno = 0;
    n = strtoul(value, &end, 10);
    if (errno || end == value || *end || *value == '-' || n < 1 || n > RBTRACE_PROFILE_HZ_MAX)
        return options_bad_value(o, spec, value, "a whole number of samples a second, 1 to 10000");
    o->hz = (unsigned)n;
    o->hz_given = 1;
    return CLI_OK;
}

/* --alloc-sample N: one object in N is counted, as N (implies --alloc). */
static int options_set_alloc_sample(struct options *o, const struct options_spec *spec,
                                    const char *value)
{
    char *end;
    unsigned long n;

    errno = 0;
    n = strtoul(value, &end, 10);
    if (errno || end == value || *end || *value == '-' || n < 1 || n > OPTIONS_MAX_ALLOC_SAMPLE)
        return options_bad_value(o, spec, value, "a whole number of objects, 1 to 1000000000");
    o->alloc = 1;
    o->alloc_sample = n;
    return CLI_OK;
}

static int options_add_slow_selector(struct options *o, const struct options_spec *spec,
                                     const char *value)
{
    (void)spec;
    if (*value == '\0') return options_fail(o, "empty method selector for --slow-methods");
    if (o->n_slow_selectors >= RBTRACE_SELECTORS_MAX)
        return options_fail(o, "too many --slow-methods selectors (at most %d)",
                            RBTRACE_SELECTORS_MAX);
    o->slow_selectors[o->n_slow_selectors++] = value;
    return CLI_OK;
}

static int options_set_output(struct options *o, const struct options_spec *spec, const char *value)
{
    if (*value == '\0') return options_bad_value(o, spec, value, "a file name");
    o->output_path = value;
    return CLI_OK;
}

const char *const options_format_names[] = {
    [OPTIONS_FORMAT_TEXT] = "text",         [OPTIONS_FORMAT_JSON] = "json",
    [OPTIONS_FORMAT_CHROME] = "chrome",     [OPTIONS_FORMAT_FOLDED] = "folded",
    [OPTIONS_FORMAT_SUMMARY] = "--summary", [OPTIONS_FORMAT_SPEEDSCOPE] = "speedscope",
    [OPTIONS_FORMAT_PPROF] = "pprof",
};

static int options_set_format(struct options *o, const struct options_spec *spec, const char *value)
{
    size_t i;

    for (i = 0; i <= OPTIONS_FORMAT_PPROF; i++) { /* not summary: it is --summary */
        if (i != OPTIONS_FORMAT_SUMMARY && !strcmp(value, options_format_names[i])) {
            o->format = (enum options_format)i;
            o->format_given = 1;
            return CLI_OK;
        }
    }
    return options_bad_value(o, spec, value, "text, json, chrome, folded, speedscope or pprof");
}

/* --convert FORMAT: json, chrome, folded or summary (--summary's table). */
static int options_set_convert(struct options *o, const struct options_spec *spec,
                               const char *value)
{
    size_t i;

    for (i = OPTIONS_FORMAT_JSON; i <= OPTIONS_FORMAT_FOLDED; i++) {
        if (!strcmp(value, options_format_names[i])) {
            o->format = (enum options_format)i;
            o->convert = 1;
            return CLI_OK;
        }
    }
    if (!strcmp(value, "summary")) {
        o->format = OPTIONS_FORMAT_SUMMARY;
        o->convert = 1;
        return CLI_OK;
    }
    return options_bad_value(o, spec, value, "json, chrome, folded or summary");
}

/* --convert's FILE: the one argument that is no option's. */
static int options_set_convert_path(struct options *o, const char *arg)
{
    o->convert_path = arg;
    return CLI_OK;
}

static int options_set_summary(struct options *o, const struct options_spec *spec,
                               const char *value)
{
    (void)spec;
    (void)value;
    o->summary = 1;
    return CLI_OK;
}

static int options_set_sort(struct options *o, const struct options_spec *spec, const char *value)
{
    static const char *const names[] = { "total", "calls", "self", "max" };
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!strcmp(value, names[i])) {
            o->sort = (enum options_sort)i;
            o->sort_given = 1;
            return CLI_OK;
        }
    }
    return options_bad_value(o, spec, value, "total, calls, self or max");
}

static int options_set_prefix(struct options *o, const struct options_spec *spec, const char *value)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(value, &end, 10);
    if (errno || end == value || *end || n < 0 || n > OPTIONS_MAX_PREFIX)
        return options_bad_value(o, spec, value, "a number of spaces from 0 to 64");
    o->prefix = (unsigned)n;
    return CLI_OK;
}

static int options_set_timeout(struct options *o, const struct options_spec *spec,
                               const char *value)
{
    char *end;
    double t;

    errno = 0;
    t = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(t) || t <= 0 || t > OPTIONS_MAX_TIMEOUT)
        return options_bad_value(o, spec, value, "a number of seconds above 0");
    o->timeout = t;
    o->timeout_given = 1;
    return CLI_OK;
}

/* --inject [DIR]: DIR, the lib directory of the rbtrace to load. */
static int options_set_inject(struct options *o, const struct options_spec *spec, const char *value)
{
    if (value && value[0] != '/')
        return options_bad_value(o, spec, value, "an absolute directory (the lib/ of an rbtrace)");
    o->inject = 1;
    o->inject_dir = value;
    return CLI_OK;
}

/* ---- the reports ---- */

static int options_set_frames(struct options *o, const struct options_spec *spec, const char *value)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(value, &end, 10);
    if (errno || end == value || *end || n < 1 || n > OPTIONS_MAX_FRAMES)
        return options_bad_value(o, spec, value, "a number of frames from 1 to 1000000");
    o->frames = (unsigned)n;
    return CLI_OK;
}

/* -b [N]: N frames per thread, all if N is not given. */
static int options_set_backtraces(struct options *o, const struct options_spec *spec,
                                  const char *value)
{
    if (options_set_mode(o, OPTIONS_MODE_BACKTRACES) != CLI_OK) return CLI_ERR;
    return value ? options_set_frames(o, spec, value) : CLI_OK;
}

static int options_set_backtrace(struct options *o, const struct options_spec *spec,
                                 const char *value)
{
    if (options_set_mode(o, OPTIONS_MODE_BACKTRACE) != CLI_OK) return CLI_ERR;
    return options_set_frames(o, spec, value);
}

static int options_set_memory(struct options *o, const struct options_spec *spec, const char *value)
{
    (void)spec;
    (void)value;
    return options_set_mode(o, OPTIONS_MODE_MEMORY);
}

/* --heapdump [FILE], --shapesdump [FILE] */
static int options_set_dump(struct options *o, const struct options_spec *spec, const char *value,
                            enum options_mode mode)
{
    if (options_set_mode(o, mode) != CLI_OK) return CLI_ERR;
    if (value && *value == '\0') return options_bad_value(o, spec, value, "a file name");
    o->dump_path = value;
    return CLI_OK;
}

static int options_set_heapdump(struct options *o, const struct options_spec *spec,
                                const char *value)
{
    return options_set_dump(o, spec, value, OPTIONS_MODE_HEAPDUMP);
}

static int options_set_shapesdump(struct options *o, const struct options_spec *spec,
                                  const char *value)
{
    return options_set_dump(o, spec, value, OPTIONS_MODE_SHAPESDUMP);
}

static int options_set_fork(struct options *o, const struct options_spec *spec, const char *value)
{
    (void)spec;
    (void)value;
    return options_set_mode(o, OPTIONS_MODE_FORK);
}

/* A plain on/off option: sets the int field the table names (-h also sets
 * short_help: see options_parse_short). */
static int options_set_flag(struct options *o, const struct options_spec *spec, const char *value)
{
    (void)value;
    *(int *)((char *)o + spec->flag) = 1;
    return CLI_OK;
}

/* --raise-all: --raise, with each re-raise on a line of its own. */
static int options_set_raise_all(struct options *o, const struct options_spec *spec,
                                 const char *value)
{
    (void)spec;
    (void)value;
    o->raises = o->raise_all = 1;
    return CLI_OK;
}

static const struct options_spec options_table[] = {
    { 'p', "pid", OPTIONS_LIST, options_set_pid, 0 },
    { 0, "ps", OPTIONS_VALUE, options_set_ps, 0 },
    { 0, "exec", OPTIONS_REST, NULL, 0 },
    { 0, "wait", OPTIONS_VALUE, options_set_wait, 0 },
    { 0, "inject", OPTIONS_OPTIONAL, options_set_inject, 0 },
    { 0, "duration", OPTIONS_VALUE, options_set_duration, 0 },
    { 'm', "methods", OPTIONS_LIST, options_add_selector, 0 },
    { 'c', "config", OPTIONS_LIST, options_add_tracer, 0 },
    { 'f', "firehose", OPTIONS_FLAG, options_set_firehose, 0 },
    { 'e', "eval", OPTIONS_VALUE, options_set_eval, 0 },
    { 'i', "interactive", OPTIONS_FLAG, options_set_interactive, 0 },
    { 's', "slow", OPTIONS_VALUE, options_set_slow, 0 },
    { 0, "slowcpu", OPTIONS_VALUE, options_set_slow, 0 },
    { 0, "slow-methods", OPTIONS_LIST, options_add_slow_selector, 0 },
    { 0, "gc", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(gc) },
    { 0, "raise", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(raises) },
    { 0, "raise-all", OPTIONS_FLAG, options_set_raise_all, 0 },
    { 0, "gvl", OPTIONS_OPTIONAL, options_set_gvl, 0 },
    { 0, "alloc", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(alloc) },
    { 0, "alloc-sample", OPTIONS_VALUE, options_set_alloc_sample, 0 },
    { 0, "profile", OPTIONS_OPTIONAL, options_set_profile, 0 },
    { 0, "hz", OPTIONS_VALUE, options_set_hz, 0 },
    { 0, "top", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(top) },
    { 0, "thread-names", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(thread_names) },
    { 0, "devmode", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(devmode) },
    { 'o', "output", OPTIONS_VALUE, options_set_output, 0 },
    { 'a', "append", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(append) },
    { 0, "format", OPTIONS_VALUE, options_set_format, 0 },
    { 0, "summary", OPTIONS_FLAG, options_set_summary, 0 },
    { 0, "sort", OPTIONS_VALUE, options_set_sort, 0 },
    { 0, "convert", OPTIONS_VALUE, options_set_convert, 0 },
    { 't', "start-time", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(start_time) },
    { 'n', "no-duration", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(no_duration) },
    { 0, "stats", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(stats) },
    { 'r', "prefix", OPTIONS_VALUE, options_set_prefix, 0 },
    { 0, "timeout", OPTIONS_VALUE, options_set_timeout, 0 },
    { 'b', "backtraces", OPTIONS_OPTIONAL, options_set_backtraces, 0 },
    { 0, "backtrace", OPTIONS_VALUE, options_set_backtrace, 0 },
    { 0, "memory", OPTIONS_FLAG, options_set_memory, 0 },
    { 0, "heapdump", OPTIONS_OPTIONAL, options_set_heapdump, 0 },
    { 0, "shapesdump", OPTIONS_OPTIONAL, options_set_shapesdump, 0 },
    { 0, "fork", OPTIONS_FLAG, options_set_fork, 0 },
    { 'h', "help", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(help) },
    { 0, "version", OPTIONS_FLAG, OPTIONS_FLAG_FIELD(version) },
};

#define OPTIONS_COUNT (sizeof(options_table) / sizeof(options_table[0]))

static const struct options_spec *options_find_letter(char letter)
{
    size_t i;

    for (i = 0; i < OPTIONS_COUNT; i++)
        if (options_table[i].letter == letter) return &options_table[i];
    return NULL;
}

static const struct options_spec *options_find_name(const char *name, size_t len)
{
    size_t i;

    for (i = 0; i < OPTIONS_COUNT; i++)
        if (strlen(options_table[i].name) == len && !strncmp(options_table[i].name, name, len))
            return &options_table[i];
    return NULL;
}

/*
 * Applies spec with its value: inline (may be NULL) or from argv[*i + 1...].
 * Advances *i past the arguments consumed.
 */
static int options_apply(struct options *o, const struct options_spec *spec,
                         const char *inline_value, int argc, char **argv, int *i)
{
    char name[40];
    int taken = 0;

    options_spelling(spec, name, sizeof(name));
    if (spec->kind == OPTIONS_REST) {
        /* The command and its arguments, options of its own included. */
        if (inline_value)
            return options_fail(o, "%s takes the command after it: %s CMD ARG...", name, name);
        if (*i + 1 >= argc) return options_fail(o, "%s needs a command: %s CMD ARG...", name, name);
        o->exec_argv = argv + *i + 1;
        *i = argc - 1;
        return CLI_OK;
    }
    if (spec->kind == OPTIONS_FLAG) {
        if (inline_value) return options_fail(o, "option %s takes no value", name);
        return spec->set(o, spec, NULL);
    }
    if (inline_value) {
        if (spec->set(o, spec, inline_value) != CLI_OK) return CLI_ERR;
        if (spec->kind != OPTIONS_LIST) return CLI_OK;
        taken = 1;
    } else if (spec->kind == OPTIONS_VALUE) {
        /* Takes the next argument even if it starts with '-' (-e '-1'). */
        if (*i + 1 >= argc) return options_fail(o, "option %s needs a value", name);
        return spec->set(o, spec, argv[++*i]);
    } else if (spec->kind == OPTIONS_OPTIONAL) {
        /* The next argument, unless it is the next option. A value that
         * is there but wrong (-b x) is refused by the setter, not left
         * over as a stray argument. */
        if (*i + 1 < argc && argv[*i + 1][0] != '-') return spec->set(o, spec, argv[++*i]);
        return spec->set(o, spec, NULL);
    }
    /* A list: every following argument up to the next option. */
    while (*i + 1 < argc && argv[*i + 1][0] != '-') {
        if (spec->set(o, spec, argv[++*i]) != CLI_OK) return CLI_ERR;
        taken = 1;
    }
    if (!taken) return options_fail(o, "option %s needs at least one value", name);
    return CLI_OK;
}

static int options_parse_long(struct options *o, int argc, char **argv, int *i)
{
    const char *name = argv[*i] + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct options_spec *spec = options_find_name(name, len);

    if (!spec) return options_fail(o, "unknown option --%.*s", (int)len, name);
    return options_apply(o, spec, eq ? eq + 1 : NULL, argc, argv, i);
}

/* -p123, -tn, -m Foo#bar */
static int options_parse_short(struct options *o, int argc, char **argv, int *i)
{
    const char *p = argv[*i] + 1;

    for (; *p; p++) {
        const struct options_spec *spec = options_find_letter(*p);
        if (!spec) return options_fail(o, "unknown option -%c", *p);
        if (*p == 'h') o->short_help = 1;
        if (spec->kind != OPTIONS_FLAG)
            return options_apply(o, spec, p[1] ? p + 1 : NULL, argc, argv, i);
        if (spec->set(o, spec, NULL) != CLI_OK) return CLI_ERR;
    }
    return CLI_OK;
}

int options_watches(const struct options *o)
{
    return o->slow_ms >= 0 || o->gc || o->raises || o->gvl_ms >= 0 || o->alloc || o->profile;
}

/* --format applies to traces; the formats other than text are whole
 * documents (or one object a line) that cannot be merged line by line. */
static int options_check_format(struct options *o)
{
    const char *name;

    if (o->summary && o->format_given)
        return options_fail(o,
                            "--summary is a table instead of the trace's lines: drop --format "
                            "%s (or trace twice)",
                            options_format_names[o->format]);
    if (o->summary) o->format = OPTIONS_FORMAT_SUMMARY;
    if (o->sort_given && !o->summary)
        return options_fail(o, "--sort orders the --summary table: add --summary");
    name = options_format_names[o->format];
    if (o->format == OPTIONS_FORMAT_TEXT) return CLI_OK;
    if (o->mode >= OPTIONS_MODE_EVAL)
        return options_fail(o,
                            "%s%s applies to traces (-m, -c, -f, --slow, --gc, --raise), "
                            "not to %s: drop it",
                            o->summary ? "" : "--format ", name, options_mode_names[o->mode]);
    if (o->format == OPTIONS_FORMAT_SUMMARY) return CLI_OK; /* a table of lines: merges, appends */
    if (o->n_pids > 1 && !o->output_path)
        return options_fail(o,
                            "--format %s with several processes needs -o FILE (one FILE.PID "
                            "each): their traces cannot be merged into one",
                            name);
    if (o->append)
        return options_fail(o,
                            "--format %s writes a whole document: -a would append a second "
                            "one to FILE; give a new -o FILE instead",
                            name);
    return CLI_OK;
}

/* --convert reads a file, not a process: -o, --sort and the FILE only. */
static int options_check_convert(struct options *o)
{
    if (o->n_pids || o->ps_pattern || o->exec_argv || o->mode != OPTIONS_MODE_NONE ||
        options_watches(o) || o->append || o->start_time || o->no_duration || o->stats ||
        o->duration_s > 0)
        return options_fail(o,
                            "--convert FORMAT [FILE] reads a saved trace, not a process: "
                            "it takes only -o FILE, -r N (and --sort with summary)");
    if (o->summary || o->format_given)
        return options_fail(o,
                            "--convert names the format itself: --convert json, chrome, "
                            "folded or summary");
    if (o->sort_given && o->format != OPTIONS_FORMAT_SUMMARY)
        return options_fail(o, "--sort orders the summary table: --convert summary");
    return CLI_OK;
}

static int options_check(struct options *o)
{
    /* rbtrace -p PID -h: the original's heap dump, or help? Neither. */
    if (o->short_help && (o->pid || o->mode != OPTIONS_MODE_NONE))
        return options_fail(o, OPTIONS_HEAPDUMP_HINT);
    if (o->help || o->version) return CLI_OK;
    if (o->convert) return options_check_convert(o);
    if (!!o->n_pids + !!o->ps_pattern + !!o->exec_argv > 1)
        return options_fail(o,
                            "-p, --ps and --exec cannot be combined: choose one way to "
                            "name the process");
    if (!o->n_pids && !o->ps_pattern && !o->exec_argv)
        return options_fail(o, "no process given: use -p PID, --ps PATTERN or --exec CMD");
    if (o->inject && o->exec_argv)
        return options_fail(o,
                            "--inject loads rbtrace into a running process; --exec starts one "
                            "with rbtrace loaded already: drop --inject");
    if (o->top && !o->profile)
        return options_fail(o, "--top is --profile's live view: add --profile");
    if (o->mode == OPTIONS_MODE_NONE && !options_watches(o))
        return options_fail(o,
                            "nothing to do: give -m METHODS, -c TRACER, -f, --slow MS, --gc, "
                            "--raise, --gvl, --alloc, --profile, "
                            "-e CODE, -i or a report (-b, --backtrace N, --memory, --heapdump, "
                            "--shapesdump, --fork)");
    if (o->mode >= OPTIONS_MODE_EVAL && options_watches(o))
        return options_fail(
            o,
            "%s cannot be combined with --slow, --slowcpu, --gc, --raise, --gvl or --alloc: "
            "run them one after the other",
            options_mode_names[o->mode]);
    if (o->duration_s > 0 && o->mode >= OPTIONS_MODE_EVAL)
        return options_fail(o,
                            "--duration SECS ends a trace (-m, -c, -f, --slow, --gc, --raise, "
                            "--gvl, --alloc); %s is not one, and ends by itself: drop --duration",
                            options_mode_names[o->mode]);
    if (o->mode == OPTIONS_MODE_INTERACTIVE && o->output_path)
        return options_fail(o, "-i shows its results on the terminal: -o applies to traces and -e");
    if (o->mode == OPTIONS_MODE_INTERACTIVE && (o->n_pids > 1 || o->exec_argv))
        return options_fail(o, "-i talks to one running process: give one -p PID (or --ps)");
    if (o->thread_names && o->mode >= OPTIONS_MODE_EVAL)
        return options_fail(o,
                            "--thread-names names the threads of a trace: use it with -m, -c, -f, "
                            "--slow or --raise, not %s",
                            options_mode_names[o->mode]);
    if (o->devmode && o->mode != OPTIONS_MODE_METHODS)
        return options_fail(o, "--devmode applies to -m selectors: add -m SELECTOR...");
    if (o->n_slow_selectors && o->slow_ms < 0)
        return options_fail(o, "--slow-methods needs a threshold: add --slow MS or --slowcpu MS");
    if (o->append && !o->output_path) return options_fail(o, "-a needs -o FILE");
    if (o->hz_given && !o->profile)
        return options_fail(o, "--hz sets --profile's rate: add --profile");
    if (o->top &&
        (o->mode != OPTIONS_MODE_NONE || o->slow_ms >= 0 || o->gc || o->raises || o->gvl_ms >= 0 ||
         o->alloc))
        return options_fail(o,
                            "--top shows the samples alone: leave out -m, -c, -f, --slow, --gc, "
                            "--raise, --gvl and --alloc (or --top)");
    if (o->top && (o->format != OPTIONS_FORMAT_TEXT || o->summary))
        return options_fail(o, "--top writes text: leave out --format and --summary (or --top)");
    if (o->profile && o->n_pids > 1)
        return options_fail(o, "--profile profiles one process: give one -p PID");
    if (!o->profile &&
        (o->format == OPTIONS_FORMAT_SPEEDSCOPE || o->format == OPTIONS_FORMAT_PPROF))
        return options_fail(o, "--format %s writes --profile's samples: add --profile",
                            options_format_names[o->format]);
    if (o->profile && o->format == OPTIONS_FORMAT_CHROME)
        return options_fail(o,
                            "--profile writes its samples as text (a table of methods), "
                            "--summary or --format folded, speedscope, pprof or json, not "
                            "--format %s",
                            options_format_names[o->format]);
    return options_check_format(o);
}

int options_parse(struct options *o, int argc, char **argv)
{
    int i;

    memset(o, 0, sizeof(*o));
    o->prefix = OPTIONS_DEFAULT_PREFIX;
    o->timeout = OPTIONS_DEFAULT_TIMEOUT;
    o->slow_ms = -1;
    o->gvl_ms = -1;
    o->alloc_sample = OPTIONS_DEFAULT_ALLOC_SAMPLE;
    o->hz = OPTIONS_DEFAULT_HZ;
    /* The most a command carries (the adders check); never more tracer
     * files or slow selectors than arguments. */
    o->selectors = calloc(RBTRACE_SELECTORS_MAX, sizeof(*o->selectors));
    o->tracer_texts = calloc((size_t)(argc > 0 ? argc : 1), sizeof(*o->tracer_texts));
    o->slow_selectors = calloc((size_t)(argc > 0 ? argc : 1), sizeof(*o->slow_selectors));
    if (!o->selectors || !o->tracer_texts || !o->slow_selectors)
        return options_fail(o, "out of memory");

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int rc;

        if (arg[0] == '-' && arg[1] == '-' && arg[2]) rc = options_parse_long(o, argc, argv, &i);
        else if (arg[0] == '-' && arg[1] && arg[1] != '-')
            rc = options_parse_short(o, argc, argv, &i);
        else if (o->short_help) rc = options_fail(o, OPTIONS_HEAPDUMP_HINT); /* -h FILE */
        else if (o->convert && !o->convert_path) rc = options_set_convert_path(o, arg);
        else rc = options_fail(o, "unexpected argument '%s'", arg);
        if (rc != CLI_OK) return CLI_ERR;
    }
    return options_check(o);
}

void options_free(struct options *o)
{
    size_t i;

    for (i = 0; i < o->n_tracer_texts; i++) free(o->tracer_texts[i]);
    free(o->tracer_texts);
    free(o->selectors);
    o->tracer_texts = NULL;
    o->n_tracer_texts = 0;
    o->selectors = NULL;
    o->n_selectors = 0;
    free(o->slow_selectors);
    o->slow_selectors = NULL;
    o->n_slow_selectors = 0;
    free(o->pids);
    o->pids = NULL;
    o->n_pids = o->pids_cap = 0;
}
