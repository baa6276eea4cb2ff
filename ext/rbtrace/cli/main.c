/*
 * main.c - the rbtrace client's entry point: parse the options, run a
 * session, and make sure everything written to stdout reached it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "options.h"
#include "repl.h"
#include "session.h"

static void usage(FILE *f)
{
    fputs("Usage: rbtrace -p PID (-m SELECTOR... | -f | --slow MS | --gc | --raise | -e CODE\n"
          "                     | -i) [options]\n"
          "\n"
          "Trace the method calls of a running Ruby process that loaded rbtrace\n"
          "(require 'rbtrace', or RUBYOPT=-rrbtrace).\n"
          "\n"
          "  -p, --pid PID          the process to trace\n"
          "  -m, --methods SEL...   trace these methods: Class#method, Class.method,\n"
          "                         with expressions: \"String#gsub(self, @x)\"\n"
          "  -f, --firehose         trace every method call\n"
          "  -s, --slow MS          show the calls that took MS milliseconds or more,\n"
          "                         indented by their nesting (combines with -m, -f)\n"
          "      --slowcpu MS       the same in the thread's CPU time\n"
          "      --slow-methods SEL...  watch only these methods for --slow/--slowcpu\n"
          "      --gc               show each garbage collection: minor or major, why,\n"
          "                         time in all, marking and sweeping\n"
          "      --raise            show each exception raised: class, message, where\n"
          "      --devmode          -m selectors follow their classes by name: a class\n"
          "                         reloaded or defined later is traced too\n"
          "  -e, --eval CODE        run Ruby code in the process and print the result\n"
          "  -i, --interactive      a Ruby prompt in the process: each entry runs there\n"
          "                         and its result is shown; Ctrl-D leaves\n"
          "  -o, --output FILE      write the trace to FILE instead of stdout\n"
          "  -a, --append           append to the -o FILE\n"
          "  -t, --start-time       show each call's start time\n"
          "  -n, --no-duration      do not show call durations\n"
          "  -r, --prefix N         indent nested calls by N spaces (default 2)\n"
          "      --timeout SECS     to attach, detach and eval (default 5)\n"
          "  -h, --help             show this help\n"
          "      --version          show the version\n", f);
    fprintf(f, "\n-i: %s.\n", repl_line_editing());
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
        rc = opts.mode == OPTIONS_MODE_INTERACTIVE ? repl_run(&opts) : session_run(&opts);
    }
    options_free(&opts);
    if (main_close_stdout() != CLI_OK && rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    return rc;
}
