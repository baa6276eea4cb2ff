/*
 * test_options.c - the client's command line: every spelling the original
 * rbtrace accepted, and a clear message naming the culprit for bad ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "options.h"

#define ARGC(argv) ((int)(sizeof(argv) / sizeof(argv[0])))

/* Parses argv; on failure, checks that errstr mentions `mention`. */
static int parse(struct options *o, int argc, char **argv, const char *mention)
{
    int rc = options_parse(o, argc, argv);

    if (rc != CLI_OK && mention) {
        if (!strstr(o->errstr, mention))
            fprintf(stderr, "message \"%s\" does not mention \"%s\"\n", o->errstr, mention);
        CHECK(strstr(o->errstr, mention) != NULL);
    }
    return rc;
}

/* Expects argv to be refused with a message mentioning `mention`. */
static void refused(int argc, char **argv, const char *mention)
{
    struct options o;

    CHECK(parse(&o, argc, argv, mention) == CLI_ERR);
    options_free(&o);
}

static void test_defaults(void)
{
    char *argv[] = { "rbtrace", "-p", "123", "-f" };
    struct options o;

    CHECK(parse(&o, ARGC(argv), argv, NULL) == CLI_OK);
    CHECK(o.pid == 123);
    CHECK(o.mode == OPTIONS_MODE_FIREHOSE);
    CHECK(o.prefix == 2);
    CHECK(o.timeout == 5.0);
    CHECK(!o.start_time && !o.no_duration && !o.append && !o.output_path);
    options_free(&o);
}

static void test_methods(void)
{
    char *argv[] = { "rbtrace", "-m", "A#a", "B.b", "-p", "1", "--methods", "C#c(self, @x)",
                     "-t", "--methods=D#d", "E#e" };
    struct options o;

    CHECK(parse(&o, ARGC(argv), argv, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_METHODS);
    CHECK(o.n_selectors == 5);
    if (o.n_selectors == 5) {
        CHECK(!strcmp(o.selectors[0], "A#a"));
        CHECK(!strcmp(o.selectors[1], "B.b"));
        CHECK(!strcmp(o.selectors[2], "C#c(self, @x)"));
        CHECK(!strcmp(o.selectors[3], "D#d"));
        CHECK(!strcmp(o.selectors[4], "E#e"));
    }
    CHECK(o.start_time);
    options_free(&o);
}

static void test_spellings(void)
{
    char *argv[] = { "rbtrace", "-p123", "-tn", "-r4", "--timeout=2.5", "--output", "out.txt",
                     "-a", "-e", "-1" };
    char *argv2[] = { "rbtrace", "--pid=9", "--start-time", "--no-duration", "--prefix", "0",
                      "--timeout", "0.25", "-o", "x", "--append", "--eval=p 1" };
    struct options o;

    CHECK(parse(&o, ARGC(argv), argv, NULL) == CLI_OK);
    CHECK(o.pid == 123 && o.start_time && o.no_duration && o.prefix == 4);
    CHECK(o.timeout == 2.5);
    CHECK(o.output_path && !strcmp(o.output_path, "out.txt") && o.append);
    CHECK(o.mode == OPTIONS_MODE_EVAL && !strcmp(o.eval_code, "-1"));
    options_free(&o);

    CHECK(parse(&o, ARGC(argv2), argv2, NULL) == CLI_OK);
    CHECK(o.pid == 9 && o.start_time && o.no_duration && o.prefix == 0);
    CHECK(o.timeout == 0.25 && o.append && !strcmp(o.output_path, "x"));
    CHECK(!strcmp(o.eval_code, "p 1"));
    options_free(&o);
}

static void test_help_version(void)
{
    char *help[] = { "rbtrace", "-h" };
    char *version[] = { "rbtrace", "--version" };
    struct options o;

    CHECK(parse(&o, ARGC(help), help, NULL) == CLI_OK && o.help);
    options_free(&o);
    CHECK(parse(&o, ARGC(version), version, NULL) == CLI_OK && o.version);
    options_free(&o);
}

static void test_errors(void)
{
    char *no_args[] = { "rbtrace" };
    char *no_pid[] = { "rbtrace", "-f" };
    char *no_mode[] = { "rbtrace", "-p", "1" };
    char *unknown_short[] = { "rbtrace", "-p", "1", "-f", "-x" };
    char *unknown_long[] = { "rbtrace", "-p", "1", "-f", "--frobnicate" };
    char *bad_pid[] = { "rbtrace", "-p", "abc", "-f" };
    char *zero_pid[] = { "rbtrace", "-p", "0", "-f" };
    char *neg_pid[] = { "rbtrace", "--pid=-5", "-f" };
    char *big_pid[] = { "rbtrace", "-p", "99999999999", "-f" };
    char *no_value[] = { "rbtrace", "-f", "-p" };
    char *bad_prefix[] = { "rbtrace", "-p", "1", "-f", "-r", "65" };
    char *bad_timeout[] = { "rbtrace", "-p", "1", "-f", "--timeout=0" };
    char *nan_timeout[] = { "rbtrace", "-p", "1", "-f", "--timeout", "nan" };
    char *word_timeout[] = { "rbtrace", "-p", "1", "-f", "--timeout", "5s" };
    char *empty_m[] = { "rbtrace", "-p", "1", "-m", "-t" };
    char *flag_value[] = { "rbtrace", "-p", "1", "--firehose=yes" };
    char *append_alone[] = { "rbtrace", "-p", "1", "-f", "-a" };
    char *positional[] = { "rbtrace", "-p", "1", "-f", "extra" };
    char *combined[] = { "rbtrace", "-p", "1", "-f", "-m", "A#a" };
    char *two_evals[] = { "rbtrace", "-p", "1", "-e", "1", "-e", "2" };
    char *empty_output[] = { "rbtrace", "-p", "1", "-f", "-o", "" };

    refused(ARGC(no_args), no_args, "-p PID");
    refused(ARGC(no_pid), no_pid, "-p PID");
    refused(ARGC(no_mode), no_mode, "-m");
    refused(ARGC(unknown_short), unknown_short, "-x");
    refused(ARGC(unknown_long), unknown_long, "--frobnicate");
    refused(ARGC(bad_pid), bad_pid, "'abc' for -p");
    refused(ARGC(zero_pid), zero_pid, "-p");
    refused(ARGC(neg_pid), neg_pid, "-p");
    refused(ARGC(big_pid), big_pid, "-p");
    refused(ARGC(no_value), no_value, "-p needs a value");
    refused(ARGC(bad_prefix), bad_prefix, "-r");
    refused(ARGC(bad_timeout), bad_timeout, "--timeout");
    refused(ARGC(nan_timeout), nan_timeout, "--timeout");
    refused(ARGC(word_timeout), word_timeout, "--timeout");
    refused(ARGC(empty_m), empty_m, "-m needs");
    refused(ARGC(flag_value), flag_value, "-f takes no value");
    refused(ARGC(append_alone), append_alone, "-a needs -o");
    refused(ARGC(positional), positional, "'extra'");
    refused(ARGC(combined), combined, "cannot be combined");
    refused(ARGC(two_evals), two_evals, "-e");
    refused(ARGC(empty_output), empty_output, "-o");
}

static void test_watches(void)
{
    char *slow[] = { "rbtrace", "-p", "1", "--slow=250", "--gc", "--raise", "-m", "A#a" };
    char *short_slow[] = { "rbtrace", "-p", "1", "-s", "0.5", "--slow-methods", "A#a", "B.b" };
    char *cpu[] = { "rbtrace", "-p", "1", "--slowcpu", "10", "-f" };
    char *gc_only[] = { "rbtrace", "-p", "1", "--gc" };
    struct options o;

    CHECK(parse(&o, ARGC(slow), slow, NULL) == CLI_OK);
    CHECK(o.slow_ms == 250 && !o.slow_cpu && o.gc && o.raises && options_watches(&o));
    CHECK(o.mode == OPTIONS_MODE_METHODS && o.n_selectors == 1 && o.n_slow_selectors == 0);
    options_free(&o);

    CHECK(parse(&o, ARGC(short_slow), short_slow, NULL) == CLI_OK);
    CHECK(o.slow_ms == 0.5 && o.mode == OPTIONS_MODE_NONE && o.n_slow_selectors == 2);
    if (o.n_slow_selectors == 2) {
        CHECK(!strcmp(o.slow_selectors[0], "A#a"));
        CHECK(!strcmp(o.slow_selectors[1], "B.b"));
    }
    options_free(&o);

    CHECK(parse(&o, ARGC(cpu), cpu, NULL) == CLI_OK);
    CHECK(o.slow_ms == 10 && o.slow_cpu && o.mode == OPTIONS_MODE_FIREHOSE);
    options_free(&o);

    CHECK(parse(&o, ARGC(gc_only), gc_only, NULL) == CLI_OK);
    CHECK(o.gc && !o.raises && o.slow_ms < 0 && options_watches(&o));
    options_free(&o);
}

static void test_watch_errors(void)
{
    char *both[] = { "rbtrace", "-p", "1", "--slow", "1", "--slowcpu", "2" };
    char *negative[] = { "rbtrace", "-p", "1", "--slow=-1" };
    char *word[] = { "rbtrace", "-p", "1", "--slow", "fast" };
    char *methods_alone[] = { "rbtrace", "-p", "1", "--slow-methods", "A#a", "--gc" };
    char *with_eval[] = { "rbtrace", "-p", "1", "--gc", "-e", "1" };
    char *empty_list[] = { "rbtrace", "-p", "1", "--slow", "1", "--slow-methods" };
    char *gc_value[] = { "rbtrace", "-p", "1", "--gc=yes" };
    char *devmode_alone[] = { "rbtrace", "-p", "1", "--devmode", "-f" };

    refused(ARGC(both), both, "--slow and --slowcpu");
    refused(ARGC(negative), negative, "'-1' for -s");
    refused(ARGC(word), word, "milliseconds");
    refused(ARGC(methods_alone), methods_alone, "--slow MS");
    refused(ARGC(with_eval), with_eval, "-e cannot be combined");
    refused(ARGC(empty_list), empty_list, "--slow-methods needs");
    refused(ARGC(gc_value), gc_value, "--gc takes no value");
    refused(ARGC(devmode_alone), devmode_alone, "--devmode applies to -m");
}

static void test_too_many_selectors(void)
{
    int argc = 4 + 300, i;
    char **argv = calloc((size_t)argc, sizeof(*argv));

    if (!argv) abort();
    argv[0] = "rbtrace";
    argv[1] = "-p";
    argv[2] = "1";
    argv[3] = "-m";
    for (i = 4; i < argc; i++) argv[i] = "A#a";
    refused(argc, argv, "too many");
    refused(4 + 257, argv, "too many");
    {
        struct options o;
        CHECK(parse(&o, 4 + 256, argv, NULL) == CLI_OK && o.n_selectors == 256);
        options_free(&o);
    }
    free(argv);
}

/* -i: a REPL, alone. */
static void test_interactive(void)
{
    char *short_form[] = { "rbtrace", "-p", "1", "-i", "--timeout", "2" };
    char *long_form[] = { "rbtrace", "--interactive", "-p1" };
    char *with_eval[] = { "rbtrace", "-p", "1", "-i", "-e", "1" };
    char *eval_first[] = { "rbtrace", "-p", "1", "-e", "1", "-i" };
    char *with_methods[] = { "rbtrace", "-p", "1", "-m", "A#a", "-i" };
    char *with_firehose[] = { "rbtrace", "-p", "1", "-if" };
    char *with_gc[] = { "rbtrace", "-p", "1", "-i", "--gc" };
    char *with_output[] = { "rbtrace", "-p", "1", "-i", "-o", "x" };
    struct options o;

    CHECK(parse(&o, ARGC(short_form), short_form, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_INTERACTIVE && o.timeout == 2);
    options_free(&o);
    CHECK(parse(&o, ARGC(long_form), long_form, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_INTERACTIVE && o.pid == 1);
    options_free(&o);
    refused(ARGC(with_eval), with_eval, "-i cannot be combined");
    refused(ARGC(eval_first), eval_first, "-i cannot be combined");
    refused(ARGC(with_methods), with_methods, "-i cannot be combined");
    refused(ARGC(with_firehose), with_firehose, "-i cannot be combined");
    refused(ARGC(with_gc), with_gc, "-i cannot be combined with --slow");
    refused(ARGC(with_output), with_output, "-o");
}

int main(void)
{
    test_defaults();
    test_methods();
    test_spellings();
    test_help_version();
    test_errors();
    test_too_many_selectors();
    test_watches();
    test_watch_errors();
    test_interactive();
    return check_report();
}
