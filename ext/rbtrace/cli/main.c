/*
 * main.c - the rbtrace client's entry point: parse the options, run a
 * session, and make sure everything written to stdout reached it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "convert.h"
#include "format.h"
#include "options.h"
#include "exec.h"
#include "multi.h"
#include "ps.h"
#include "repl.h"
#include "session.h"

/* The gem's version (lib/rbtrace/version.rb), from extconf.rb. */
#ifndef RBTRACE_VERSION
#error \
    "RBTRACE_VERSION is not defined: build with extconf.rb (rake compile), which passes lib/rbtrace/version.rb's"
#endif

static void usage(FILE *f)
{
    fputs("Usage: rbtrace (-p PID... | --ps PATTERN | --exec CMD ARG...)\n"
          "       (-m SELECTOR... | -c TRACER... | -f | --slow MS | --gc | --raise |\n"
          "        --gvl [MS] | --alloc | --profile [wall|cpu] |\n"
          "        -e CODE | -i | REPORT) [options]\n"
          "       rbtrace --convert FORMAT [FILE] [-o OUT]\n"
          "\n"
          "Trace the method calls of a running Ruby process that loaded rbtrace\n"
          "(require 'rbtrace', or RUBYOPT=-rrbtrace), or load it with --inject.\n"
          "\n"
          "  -p, --pid PID...       the process to trace; several: each line starts\n"
          "                         with [PID] (with -o FILE: one FILE.PID each)\n"
          "      --ps PATTERN       the process whose command line matches PATTERN (a\n"
          "                         regular expression); asks which if several do\n"
          "      --exec CMD ARG...  start CMD with rbtrace loaded and trace it from its\n"
          "                         start (every argument after --exec is CMD's)\n"
          "      --inject[=DIR]     load rbtrace into a process that never required it\n"
          "                         (as root or with CAP_SYS_PTRACE; glibc, x86-64): the\n"
          "                         rbtrace beside this client, or the lib/ DIR of one\n"
          "                         built for the process's Ruby; later attaches need\n"
          "                         no --inject\n"
          "      --wait SECS        wait SECS seconds before attaching\n"
          "      --duration SECS    trace for SECS seconds (10, 0.5) from the attach,\n"
          "                         then detach and end as at ^C (with --exec, the\n"
          "                         program goes on untraced)\n"
          "  -m, --methods SEL...   trace these methods: Class#method, Class.method,\n"
          "                         with expressions: \"String#gsub(self, @x)\"\n"
          "  -c, --config TRACER... trace the selectors of a tracer file, one a line:\n"
          "                         a shipped one by name (io, net_http, activerecord,\n"
          "                         pg, mysql2, redis, sidekiq, puma, rack), or your own\n"
          "                         by path (./app.tracer); combines with -m\n"
          "  -f, --firehose         trace every method call\n"
          "  -s, --slow MS          show the calls that took MS milliseconds or more,\n"
          "                         indented by their nesting (combines with -m, -f);\n"
          "                         past 40 levels, indented 40 and marked [dN]\n"
          "      --slowcpu MS       the same in the thread's CPU time\n"
          "      --slow-methods SEL...  watch only these methods for --slow/--slowcpu\n"
          "      --gc               show each garbage collection: minor or major, why,\n"
          "                         time in all, marking and sweeping\n"
          "      --raise            show each exception raised: class, message, where;\n"
          "                         an exception raised again (rescue => e; raise) is\n"
          "                         folded into its first line: (re-raised N times, last\n"
          "                         at FILE:LINE)\n"
          "      --raise-all        --raise, with each re-raise on a line of its own\n"
          "      --gvl [MS]         show each thread's waits for the GVL longer than MS\n"
          "                         milliseconds (default 1), and on each traced call's\n"
          "                         line the GVL wait inside it (Ruby 3.2+)\n"
          "      --alloc            on each traced call's line the objects allocated inside\n"
          "                         it (callees included: alloc N), and at the end the\n"
          "                         traced methods and the sites (FILE:LINE, class) that\n"
          "                         allocated most\n"
          "      --alloc-sample N   --alloc, seeing one object in N (at random) and counting\n"
          "                         it as N (default 16; 1: every object, slower)\n"
          "      --profile [MODE]   sample every Ruby thread's stack: wall (the default:\n"
          "                         every thread, running or not, with its state) or cpu\n"
          "                         (threads by the CPU time they use); at the end a\n"
          "                         table of the methods by self and total samples, or\n"
          "                         --format folded's stacks, speedscope or pprof\n"
          "      --hz N             --profile's samples a second (default 100)\n"
          "      --top              with --profile, a live view each second: the methods\n"
          "                         by self and total samples of the last second, and\n"
          "                         each thread's states (a terminal is redrawn; else a\n"
          "                         block of lines a second); the table at the end\n"
          "      --thread-names     each thread's name (Thread#name) after its number:\n"
          "                         [t2 puma srv tp 001] (on in --format json, chrome)\n"
          "      --devmode          -m selectors follow their classes by name: a class\n"
          "                         reloaded or defined later is traced too\n"
          "  -e, --eval CODE        run Ruby code in the process and print the result\n"
          "  -i, --interactive      a Ruby prompt in the process: each entry runs there\n"
          "                         and its result is shown; Ctrl-D leaves\n"
          "\n"
          "REPORT, one of:\n"
          "  -b, --backtraces [N]   every thread's backtrace (N frames each; all by default)\n"
          "      --backtrace N      the current thread's N frames: the app threads that\n"
          "                         are running (status run), or the main thread if none\n"
          "      --memory           GC.stat, objects and memory by type, the RSS\n"
          "      --heapdump [FILE]  ObjectSpace.dump_all into FILE (a new file; default\n"
          "                         $TMPDIR/rbtrace-heapdump-PID-TIME.json), written by a\n"
          "                         forked child: the app pauses only for the fork\n"
          "      --shapesdump [FILE] ObjectSpace.dump_shapes likewise (Ruby 3.3+)\n"
          "      --fork             fork an idle copy of the process, for gdb\n"
          "\n"
          "  -o, --output FILE      write the trace to FILE instead of stdout\n"
          "  -a, --append           append to the -o FILE\n"
          "      --format FORMAT    how a trace is written: text (the default), json\n"
          "                         (one JSON object a line), chrome (the Chrome trace\n"
          "                         event format, for Perfetto, chrome://tracing,\n"
          "                         speedscope) or folded (collapsed stacks for flame\n"
          "                         graphs, written at the end); with --profile also\n"
          "                         speedscope (its JSON) or pprof (gzipped\n"
          "                         profile.proto), and json has a line per sample;\n"
          "                         docs/usage.md has their fields\n"
          "      --summary          instead of the trace's lines, a table per method when\n"
          "                         the trace ends: calls, total, self, mean, p50, p99\n"
          "                         and max time, raises (with --raise)\n"
          "      --sort KEY         --summary's order: total (the default), calls, self\n"
          "                         or max\n"
          "      --convert FORMAT [FILE]  turn a saved text trace (FILE, or stdin) into\n"
          "                         json, chrome, folded or summary (--summary's table);\n"
          "                         with -o FILE, --sort, -r N (the trace's); docs/usage.md\n"
          "                         says what the text lacks and how it is filled in\n"
          "  -t, --start-time       show each call's start time\n"
          "  -n, --no-duration      do not show call durations\n"
          "      --stats            at the end, say how many events came and how many\n"
          "                         the process dropped (a client that reads too slowly)\n"
          "  -r, --prefix N         indent nested calls by N spaces (default 2)\n"
          "      --timeout SECS     to attach, detach and eval (default 5; the dumps\n"
          "                         wait 300 s unless it is given)\n"
          "  -h, --help             show this help (a heap dump is --heapdump)\n"
          "      --version          show the version\n",
          f);
    fprintf(f, "\n-i: %s.\n", repl_line_editing());
}

static enum cli_exit main_convert(const struct options *opts);

/* --wait SECS: before attaching; ^C cuts it short and stops. */
static int main_wait(double secs)
{
    struct timespec ts = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };

    while (nanosleep(&ts, &ts) != 0) {
        if (errno != EINTR) {
            fprintf(stderr, "rbtrace: --wait: %s\n", strerror(errno));
            return CLI_ERR;
        }
    }
    return CLI_OK;
}

/* Finds the targets (--ps, --exec), waits (--wait), runs the sessions. */
static enum cli_exit main_run(struct options *opts)
{
    pid_t child = 0;
    enum cli_exit rc;

    if (opts->convert) return main_convert(opts);
    if (opts->ps_pattern && ps_choose(opts, stdin) != CLI_OK) return CLI_EXIT_FAIL;
    if (opts->wait_s > 0 && main_wait(opts->wait_s) != CLI_OK) return CLI_EXIT_FAIL;
    if (opts->exec_argv) {
        if (exec_start(opts, &child) != CLI_OK) return CLI_EXIT_FAIL;
        return exec_finish(child, session_run(opts));
    }
    if (opts->mode == OPTIONS_MODE_INTERACTIVE) return repl_run(opts);
    if (opts->n_pids > 1) return multi_run(opts);
    rc = session_run(opts);
    return rc;
}

/* --convert: each converted event goes to the format. */
static int main_convert_emit(void *ctx, const struct rbtrace_event *ev)
{
    return format_event(ctx, ev);
}

/* Feeds the lines of in to the converter until the end or the first bad
 * one; the format then finishes what it has, so that nothing converted
 * is lost (a chrome file is still whole). */
static int main_convert_lines(FILE *in, const char *name, struct convert *c, struct format *f)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = CLI_OK;

    while ((n = getline(&line, &cap, in)) >= 0) {
        size_t len = (size_t)n;

        if (len && line[len - 1] == '\n') len--;
        if (len > CONVERT_LINE_MAX) {
            fprintf(stderr,
                    "rbtrace: %s: line %llu: expected a line of a trace, not %zu bytes "
                    "long (is it a text trace of rbtrace's?)\n",
                    name, (unsigned long long)c->line_no + 1, len);
            rc = CLI_ERR;
            break;
        }
        if (convert_line(c, line, len) != CLI_OK) {
            fprintf(stderr, "rbtrace: %s: %s\n", name, c->errstr[0] ? c->errstr : f->errstr);
            rc = CLI_ERR;
            break;
        }
    }
    if (rc == CLI_OK && ferror(in)) {
        fprintf(stderr, "rbtrace: could not read %s: %s\n", name, strerror(errno));
        rc = CLI_ERR;
    }
    free(line);
    return rc;
}

/* rbtrace --convert FORMAT [FILE] [-o OUT]. */
static enum cli_exit main_convert(const struct options *opts)
{
    const char *name = opts->convert_path ? opts->convert_path : "stdin";
    struct format_opts fopts;
    struct format *f = NULL;
    struct convert c;
    FILE *in = stdin, *out = stdout;
    char errstr[CLI_ERRLEN];
    int rc = CLI_ERR;

    if (opts->convert_path && !(in = fopen(opts->convert_path, "re"))) {
        fprintf(stderr, "rbtrace: could not open %s: %s: give a saved text trace\n", name,
                strerror(errno));
        return CLI_EXIT_FAIL;
    }
    if (opts->output_path &&
        !(out = cli_open_output(opts->output_path, 0, errstr, sizeof(errstr)))) {
        fprintf(stderr, "rbtrace: %s\n", errstr);
        if (in != stdin) fclose(in);
        return CLI_EXIT_FAIL;
    }
    memset(&fopts, 0, sizeof(fopts));
    fopts.text.prefix = opts->prefix;
    fopts.sort = opts->sort;
    if (format_open(opts->format, out, &fopts, &f) != CLI_OK) {
        fprintf(stderr, "rbtrace: out of memory\n");
    } else if (convert_init(&c, main_convert_emit, f) != CLI_OK) {
        fprintf(stderr, "rbtrace: out of memory\n");
        convert_free(&c);
    } else {
        c.unit = opts->prefix; /* -r: the indentation the trace was written with */
        rc = main_convert_lines(in, name, &c, f);
        convert_free(&c);
        if (format_finish(f) != CLI_OK) {
            fprintf(stderr, "rbtrace: %s\n", f->errstr);
            rc = CLI_ERR;
        }
    }
    format_close(f);
    if (in != stdin) fclose(in);
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "rbtrace: could not write %s: %s\n", opts->output_path, strerror(errno));
        rc = CLI_ERR;
    }
    return rc == CLI_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

/* A write error on stdout (full disk, closed pipe) is a failure. */
static int main_close_stdout(void)
{
    if (fclose(stdout) == 0) return CLI_OK;
    fprintf(stderr, "rbtrace: could not write to stdout: %s\n", strerror(errno));
    return CLI_ERR;
}

int main(int argc, char **argv)
{
    struct options opts;
    enum cli_exit rc;

    if (options_parse(&opts, argc, argv) != CLI_OK) {
        fprintf(stderr, "rbtrace: %s\ntry rbtrace --help\n", opts.errstr);
        rc = CLI_EXIT_USAGE;
    } else if (opts.help) {
        usage(stdout);
        rc = CLI_EXIT_OK;
    } else if (opts.version) {
        printf("rbtrace %s\n", RBTRACE_VERSION);
        rc = CLI_EXIT_OK;
    } else {
        rc = main_run(&opts);
    }
    options_free(&opts);
    if (main_close_stdout() != CLI_OK && rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    return rc;
}
