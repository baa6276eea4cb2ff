/*
 * main.c - the rbtrace client's entry point: parse the options, run a
 * session, and make sure everything written to stdout reached it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "options.h"
#include "session.h"

static void usage(FILE *f)
{
    fputs("Usage: rbtrace -p PID (-m SELECTOR... | -c TRACER... | -f | -e CODE) [options]\n"
          "\n"
          "Trace the method calls of a running Ruby process that loaded rbtrace\n"
          "(require 'rbtrace', or RUBYOPT=-rrbtrace).\n"
          "\n"
          "  -p, --pid PID          the process to trace\n"
          "  -m, --methods SEL...   trace these methods: Class#method, Class.method,\n"
          "                         with expressions: \"String#gsub(self, @x)\"\n"
          "  -c, --config TRACER... trace the selectors of a tracer file, one a line:\n"
          "                         a shipped one by name (io, net_http, activerecord,\n"
          "                         pg, mysql2, redis, sidekiq, puma, rack), or your own\n"
          "                         by path (./app.tracer); combines with -m\n"
          "  -f, --firehose         trace every method call\n"
          "  -e, --eval CODE        run Ruby code in the process and print the result\n"
          "  -o, --output FILE      write the trace to FILE instead of stdout\n"
          "  -a, --append           append to the -o FILE\n"
          "  -t, --start-time       show each call's start time\n"
          "  -n, --no-duration      do not show call durations\n"
          "  -r, --prefix N         indent nested calls by N spaces (default 2)\n"
          "      --timeout SECS     to attach, detach and eval (default 5)\n"
          "  -h, --help             show this help\n"
          "      --version          show the version\n", f);
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
        rc = session_run(&opts);
    }
    options_free(&opts);
    if (main_close_stdout() != CLI_OK && rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    return rc;
}
