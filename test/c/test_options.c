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
    char *argv[] = { "rbtrace",       "-m", "A#a",           "B.b", "-p", "1", "--methods",
                     "C#c(self, @x)", "-t", "--methods=D#d", "E#e" };
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
    char *argv[] = { "rbtrace",  "-p123",   "-tn", "-r4", "--timeout=2.5",
                     "--output", "out.txt", "-a",  "-e",  "-1" };
    char *argv2[] = { "rbtrace",   "--pid=9", "--start-time", "--no-duration",
                      "--prefix",  "0",       "--timeout",    "0.25",
                      "-o",        "x",       "--append",     "--stats",
                      "--eval=p 1" };
    struct options o;

    CHECK(parse(&o, ARGC(argv), argv, NULL) == CLI_OK);
    CHECK(o.pid == 123 && o.start_time && o.no_duration && o.prefix == 4 && !o.stats);
    CHECK(o.timeout == 2.5);
    CHECK(o.output_path && !strcmp(o.output_path, "out.txt") && o.append);
    CHECK(o.mode == OPTIONS_MODE_EVAL && !strcmp(o.eval_code, "-1"));
    options_free(&o);

    CHECK(parse(&o, ARGC(argv2), argv2, NULL) == CLI_OK);
    CHECK(o.pid == 9 && o.start_time && o.no_duration && o.prefix == 0 && o.stats);
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
    refused(ARGC(no_value), no_value, "-p needs at least one value");
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

/* --gvl [MS]: 1 ms unless a value follows; alone, or with -m, -f, --gc... */
static void test_gvl(void)
{
    char *alone[] = { "rbtrace", "-p", "1", "--gvl" };
    char *with_ms[] = { "rbtrace", "-p", "1", "--gvl", "0.5", "-m", "A#a" };
    char *inline_ms[] = { "rbtrace", "-p", "1", "--gvl=20", "--gc" };
    char *then_option[] = { "rbtrace", "-p", "1", "--gvl", "-f" };
    char *word[] = { "rbtrace", "-p", "1", "--gvl", "often" };
    char *negative[] = { "rbtrace", "-p", "1", "--gvl=-1" };
    char *with_eval[] = { "rbtrace", "-p", "1", "--gvl", "-e", "1" };
    struct options o;

    CHECK(parse(&o, ARGC(alone), alone, NULL) == CLI_OK);
    CHECK(o.gvl_ms == 1.0 && o.mode == OPTIONS_MODE_NONE && options_watches(&o));
    options_free(&o);
    CHECK(parse(&o, ARGC(with_ms), with_ms, NULL) == CLI_OK);
    CHECK(o.gvl_ms == 0.5 && o.mode == OPTIONS_MODE_METHODS && o.n_selectors == 1);
    options_free(&o);
    CHECK(parse(&o, ARGC(inline_ms), inline_ms, NULL) == CLI_OK);
    CHECK(o.gvl_ms == 20 && o.gc);
    options_free(&o);
    CHECK(parse(&o, ARGC(then_option), then_option, NULL) == CLI_OK);
    CHECK(o.gvl_ms == 1.0 && o.mode == OPTIONS_MODE_FIREHOSE);
    options_free(&o);
    CHECK(parse(&o, ARGC(alone) - 1, alone, NULL) == CLI_ERR); /* without it: nothing to do */
    CHECK(o.gvl_ms < 0);
    options_free(&o);
    refused(ARGC(word), word, "invalid value 'often' for --gvl");
    refused(ARGC(negative), negative, "'-1' for --gvl");
    refused(ARGC(with_eval), with_eval,
            "-e cannot be combined with --slow, --slowcpu, --gc, --raise, --gvl or --alloc");
}

/* --alloc, --alloc-sample N (which implies --alloc): a watch, with -m or alone. */
static void test_alloc(void)
{
    char *alone[] = { "rbtrace", "-p", "1", "--alloc" };
    char *sample[] = { "rbtrace", "-p", "1", "-m", "A#a", "--alloc-sample", "100" };
    char *zero[] = { "rbtrace", "-p", "1", "--alloc-sample", "0" };
    char *word[] = { "rbtrace", "-p", "1", "--alloc-sample", "many" };
    char *negative[] = { "rbtrace", "-p", "1", "--alloc-sample=-4" };
    char *with_eval[] = { "rbtrace", "-p", "1", "--alloc", "-e", "1" };
    struct options o;

    CHECK(parse(&o, ARGC(alone), alone, NULL) == CLI_OK);
    CHECK(o.alloc && o.alloc_sample == 16 && o.mode == OPTIONS_MODE_NONE && options_watches(&o));
    options_free(&o);
    CHECK(parse(&o, ARGC(sample), sample, NULL) == CLI_OK);
    CHECK(o.alloc && o.alloc_sample == 100 && o.mode == OPTIONS_MODE_METHODS);
    options_free(&o);
    refused(ARGC(zero), zero,
            "invalid value '0' for --alloc-sample: expected a whole number of objects");
    refused(ARGC(word), word, "invalid value 'many' for --alloc-sample");
    refused(ARGC(negative), negative, "'-4' for --alloc-sample");
    refused(ARGC(with_eval), with_eval, "-e cannot be combined with");
}

/* --thread-names: with a trace (-m, -f, --slow...), not with -e or a report. */
static void test_thread_names(void)
{
    char *with_m[] = { "rbtrace", "-p", "1", "-m", "A#a", "--thread-names" };
    char *with_slow[] = { "rbtrace", "-p", "1", "--thread-names", "--slow", "5" };
    char *with_eval[] = { "rbtrace", "-p", "1", "--thread-names", "-e", "1" };
    char *with_value[] = { "rbtrace", "-p", "1", "-f", "--thread-names=yes" };
    struct options o;

    CHECK(parse(&o, ARGC(with_m), with_m, NULL) == CLI_OK);
    CHECK(o.thread_names && o.mode == OPTIONS_MODE_METHODS);
    options_free(&o);
    CHECK(parse(&o, ARGC(with_slow), with_slow, NULL) == CLI_OK);
    CHECK(o.thread_names && o.slow_ms == 5);
    options_free(&o);
    CHECK(parse(&o, ARGC(with_m) - 1, with_m, NULL) == CLI_OK);
    CHECK(!o.thread_names);
    options_free(&o);
    refused(ARGC(with_eval), with_eval,
            "--thread-names names the threads of a trace: use it with -m");
    refused(ARGC(with_value), with_value, "option --thread-names takes no value");
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

static void test_targets(void)
{
    char *several[] = { "rbtrace", "-p", "11", "22", "-p33", "-f" };
    char *ps[] = { "rbtrace", "--ps", "puma: cluster", "--gc", "--wait", "1.5" };
    char *exec[] = { "rbtrace", "-m", "A#a", "--exec", "ruby", "-e", "p 1", "-f" };
    char *twice[] = { "rbtrace", "-p", "11", "11", "-f" };
    char *both[] = { "rbtrace", "-p", "11", "--ps", "x", "-f" };
    char *exec_empty[] = { "rbtrace", "-f", "--exec" };
    char *bad_wait[] = { "rbtrace", "-p", "1", "-f", "--wait", "-1" };
    struct options o;

    CHECK(parse(&o, ARGC(several), several, NULL) == CLI_OK);
    CHECK(o.n_pids == 3 && o.pid == 11);
    if (o.n_pids == 3) CHECK(o.pids[0] == 11 && o.pids[1] == 22 && o.pids[2] == 33);
    options_free(&o);

    CHECK(parse(&o, ARGC(ps), ps, NULL) == CLI_OK);
    CHECK(o.ps_pattern && !strcmp(o.ps_pattern, "puma: cluster") && o.n_pids == 0);
    CHECK(o.wait_s == 1.5);
    options_free(&o);

    /* Everything after --exec is the command's, -f included. */
    CHECK(parse(&o, ARGC(exec), exec, NULL) == CLI_OK);
    CHECK(o.exec_argv == exec + 4 && o.mode == OPTIONS_MODE_METHODS);
    options_free(&o);

    /* --ps adds what the user picks, more than argv held: the list grows. */
    CHECK(parse(&o, ARGC(ps), ps, NULL) == CLI_OK);
    for (int k = 1; k <= 300; k++) CHECK(options_add_pid(&o, (pid_t)(1000 + k)) == 1);
    CHECK(options_add_pid(&o, 1001) == 0);
    CHECK(o.n_pids == 300 && o.pid == 1001 && o.pids[299] == 1300);
    options_free(&o);

    refused(ARGC(twice), twice, "given twice");
    refused(ARGC(both), both, "cannot be combined");
    refused(ARGC(exec_empty), exec_empty, "--exec needs a command");
    refused(ARGC(bad_wait), bad_wait, "--wait");
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

/* Optional values: -b [N], --heapdump [FILE]. */
static void test_optional_values(void)
{
    char *b_alone[] = { "rbtrace", "-p", "1", "-b" };
    char *b_then_opt[] = { "rbtrace", "-b", "-p", "1" };
    char *b_n[] = { "rbtrace", "-p", "1", "-b", "7" };
    char *b_inline[] = { "rbtrace", "-p", "1", "-b7" };
    char *b_long_eq[] = { "rbtrace", "-p", "1", "--backtraces=12" };
    char *b_long[] = { "rbtrace", "--backtraces", "3", "-p", "1" };
    char *h_alone[] = { "rbtrace", "-p", "1", "--heapdump" };
    char *h_then_opt[] = { "rbtrace", "--heapdump", "--timeout", "9", "-p", "1" };
    char *h_file[] = { "rbtrace", "-p", "1", "--heapdump", "out.json" };
    char *h_eq[] = { "rbtrace", "-p", "1", "--heapdump=/tmp/x.json" };
    char *s_file[] = { "rbtrace", "-p", "1", "--shapesdump", "s.json" };
    struct options o;

    CHECK(parse(&o, ARGC(b_alone), b_alone, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_BACKTRACES && o.frames == 0);
    options_free(&o);
    CHECK(parse(&o, ARGC(b_then_opt), b_then_opt, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_BACKTRACES && o.frames == 0 && o.pid == 1);
    options_free(&o);
    CHECK(parse(&o, ARGC(b_n), b_n, NULL) == CLI_OK && o.frames == 7);
    options_free(&o);
    CHECK(parse(&o, ARGC(b_inline), b_inline, NULL) == CLI_OK && o.frames == 7);
    options_free(&o);
    CHECK(parse(&o, ARGC(b_long_eq), b_long_eq, NULL) == CLI_OK && o.frames == 12);
    options_free(&o);
    CHECK(parse(&o, ARGC(b_long), b_long, NULL) == CLI_OK && o.frames == 3 && o.pid == 1);
    options_free(&o);

    CHECK(parse(&o, ARGC(h_alone), h_alone, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_HEAPDUMP && o.dump_path == NULL && !o.timeout_given);
    options_free(&o);
    CHECK(parse(&o, ARGC(h_then_opt), h_then_opt, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_HEAPDUMP && o.dump_path == NULL);
    CHECK(o.timeout_given && o.timeout == 9.0 && o.pid == 1);
    options_free(&o);
    CHECK(parse(&o, ARGC(h_file), h_file, NULL) == CLI_OK);
    CHECK(o.dump_path && !strcmp(o.dump_path, "out.json"));
    options_free(&o);
    CHECK(parse(&o, ARGC(h_eq), h_eq, NULL) == CLI_OK);
    CHECK(o.dump_path && !strcmp(o.dump_path, "/tmp/x.json"));
    options_free(&o);
    CHECK(parse(&o, ARGC(s_file), s_file, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_SHAPESDUMP && !strcmp(o.dump_path, "s.json"));
    options_free(&o);
}

static void test_reports(void)
{
    char *backtrace[] = { "rbtrace", "-p", "1", "--backtrace", "4" };
    char *memory[] = { "rbtrace", "-p", "1", "--memory" };
    char *fork_[] = { "rbtrace", "-p", "1", "--fork", "-o", "f.txt" };
    struct options o;

    CHECK(parse(&o, ARGC(backtrace), backtrace, NULL) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_BACKTRACE && o.frames == 4);
    options_free(&o);
    CHECK(parse(&o, ARGC(memory), memory, NULL) == CLI_OK && o.mode == OPTIONS_MODE_MEMORY);
    options_free(&o);
    CHECK(parse(&o, ARGC(fork_), fork_, NULL) == CLI_OK && o.mode == OPTIONS_MODE_FORK);
    CHECK(o.output_path && !strcmp(o.output_path, "f.txt"));
    options_free(&o);
}

static void test_report_errors(void)
{
    char *b_word[] = { "rbtrace", "-p", "1", "--backtraces", "x" };
    char *b_zero[] = { "rbtrace", "-p", "1", "-b", "0" };
    char *b_big[] = { "rbtrace", "-p", "1", "-b", "1000001" };
    char *bt_none[] = { "rbtrace", "-p", "1", "--backtrace" };
    char *bt_opt[] = { "rbtrace", "--backtrace", "-p", "1" };
    char *bt_word[] = { "rbtrace", "-p", "1", "--backtrace", "all" };
    char *h_empty[] = { "rbtrace", "-p", "1", "--heapdump=" };
    char *mem_value[] = { "rbtrace", "-p", "1", "--memory=1" };
    char *fork_eval[] = { "rbtrace", "-p", "1", "--fork", "-e", "1" };
    char *mem_heap[] = { "rbtrace", "-p", "1", "--memory", "--heapdump" };
    char *m_b[] = { "rbtrace", "-p", "1", "-m", "A#a", "-b" };
    char *b_twice[] = { "rbtrace", "-p", "1", "-b", "-b", "2" };
    char *heap_extra[] = { "rbtrace", "-p", "1", "--heapdump", "a", "b" };
    char *nothing[] = { "rbtrace", "-p", "1" };

    refused(ARGC(b_word), b_word, "invalid value 'x' for -b: expected a number of frames");
    refused(ARGC(b_zero), b_zero, "'0' for -b");
    refused(ARGC(b_big), b_big, "-b");
    refused(ARGC(bt_none), bt_none, "--backtrace needs a value");
    refused(ARGC(bt_opt), bt_opt, "'-p' for --backtrace");
    refused(ARGC(bt_word), bt_word, "'all' for --backtrace");
    refused(ARGC(h_empty), h_empty, "--heapdump");
    refused(ARGC(mem_value), mem_value, "--memory takes no value");
    refused(ARGC(fork_eval), fork_eval, "--fork and -e cannot be combined");
    refused(ARGC(mem_heap), mem_heap, "--memory and --heapdump cannot be combined");
    refused(ARGC(m_b), m_b, "-m/-c and -b cannot be combined");
    refused(ARGC(b_twice), b_twice, "-b may be given only once");
    refused(ARGC(heap_extra), heap_extra, "unexpected argument 'b'");
    refused(ARGC(nothing), nothing, "--heapdump");
}

/* The original rbtrace's -h was also its heap dump: -h with anything
 * else is refused with a hint; alone it is help. */
static void test_help_conflicts(void)
{
    char *p_h[] = { "rbtrace", "-p", "123", "-h" };
    char *h_p[] = { "rbtrace", "-h", "-p", "123" };
    char *h_file[] = { "rbtrace", "-h", "/tmp/heap.json" };
    char *p_h_file[] = { "rbtrace", "-p", "123", "-h", "heap.json" };
    char *h_e[] = { "rbtrace", "-e", "1", "-h" };
    char *long_help[] = { "rbtrace", "-p", "123", "--help" };
    struct options o;

    refused(ARGC(p_h), p_h, "-h is --help; for a heap dump use --heapdump [FILE]");
    refused(ARGC(h_p), h_p, "--heapdump [FILE]");
    refused(ARGC(h_file), h_file, "--heapdump [FILE]");
    refused(ARGC(p_h_file), p_h_file, "--heapdump [FILE]");
    refused(ARGC(h_e), h_e, "--heapdump [FILE]");
    CHECK(parse(&o, ARGC(long_help), long_help, NULL) == CLI_OK && o.help);
    options_free(&o);
}

/* A value given inline ends a one-value option (-o FILE extra); a list
 * option (-p, -m) goes on taking values. */
static void test_inline_value_ends_option(void)
{
    char *argv[] = { "rbtrace", "-p123", "-f", "-oFILE", "extra" };
    char *pids[] = { "rbtrace", "-p123", "-f", "--pid=4", "extra" };

    refused(ARGC(argv), argv, "unexpected argument 'extra'");
    refused(ARGC(pids), pids, "invalid value 'extra' for -p");
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
    refused(ARGC(with_eval), with_eval, "-i and -e cannot be combined");
    refused(ARGC(eval_first), eval_first, "-e and -i cannot be combined");
    refused(ARGC(with_methods), with_methods, "-m/-c and -i cannot be combined");
    refused(ARGC(with_firehose), with_firehose, "-i and -f cannot be combined");
    refused(ARGC(with_gc), with_gc, "-i cannot be combined with --slow");
    refused(ARGC(with_output), with_output, "-o");
}

/* --duration SECS: a decimal number above 0, with a trace only. */
static void test_duration(void)
{
    char *plain[] = { "rbtrace", "-p", "1", "-m", "A#a", "--duration", "10" };
    char *inline_half[] = { "rbtrace", "-p", "1", "--gc", "--duration=0.5", "--summary" };
    char *exec[] = { "rbtrace", "-f", "--duration", "2", "--exec", "ruby", "x.rb" };
    char *zero[] = { "rbtrace", "-p", "1", "-f", "--duration", "0" };
    char *negative[] = { "rbtrace", "-p", "1", "-f", "--duration", "-1" };
    char *word[] = { "rbtrace", "-p", "1", "-f", "--duration", "10s" };
    char *huge[] = { "rbtrace", "-p", "1", "-f", "--duration", "1e300" };
    char *nan[] = { "rbtrace", "-p", "1", "-f", "--duration", "nan" };
    char *missing[] = { "rbtrace", "-p", "1", "-f", "--duration" };
    char *eval[] = { "rbtrace", "-p", "1", "-e", "1", "--duration", "1" };
    char *interactive[] = { "rbtrace", "-p", "1", "-i", "--duration", "1" };
    char *report[] = { "rbtrace", "-p", "1", "--heapdump", "--duration", "1" };
    char *convert[] = { "rbtrace", "--convert", "json", "--duration", "1" };
    struct options o;

    CHECK(parse(&o, ARGC(plain), plain, NULL) == CLI_OK);
    CHECK(o.duration_s == 10.0);
    options_free(&o);
    CHECK(parse(&o, ARGC(inline_half), inline_half, NULL) == CLI_OK);
    CHECK(o.duration_s == 0.5 && o.gc && o.summary);
    options_free(&o);
    CHECK(parse(&o, ARGC(exec), exec, NULL) == CLI_OK);
    CHECK(o.duration_s == 2.0 && o.exec_argv == exec + 5);
    options_free(&o);
    /* Not given: 0, until ^C. */
    CHECK(parse(&o, ARGC(eval) - 2, eval, NULL) == CLI_OK);
    CHECK(o.duration_s == 0);
    options_free(&o);
    refused(ARGC(zero), zero, "expected a number of seconds above 0 to trace for, e.g. 10 or 0.5");
    refused(ARGC(negative), negative, "invalid value '-1' for --duration");
    refused(ARGC(word), word, "invalid value '10s' for --duration");
    refused(ARGC(huge), huge, "invalid value '1e300' for --duration");
    refused(ARGC(nan), nan, "invalid value 'nan' for --duration");
    refused(ARGC(missing), missing, "--duration needs a value");
    refused(ARGC(eval), eval, "-e is not one, and ends by itself: drop --duration");
    refused(ARGC(interactive), interactive, "-i is not one");
    refused(ARGC(report), report, "--heapdump is not one");
    refused(ARGC(convert), convert, "--convert FORMAT [FILE] reads a saved trace");
}

/* --inject, --inject=DIR, --inject DIR; DIR absolute; not with --exec. */
static void test_inject(void)
{
    char *plain[] = { "rbtrace", "-p", "1", "--inject", "-e", "1" };
    char *eq[] = { "rbtrace", "-p", "1", "--inject=/opt/rb/lib", "-f" };
    char *spaced[] = { "rbtrace", "--inject", "/opt/rb/lib", "-p", "1", "-f" };
    char *relative[] = { "rbtrace", "-p", "1", "--inject=lib", "-f" };
    char *empty[] = { "rbtrace", "-p", "1", "--inject=", "-f" };
    char *exec[] = { "rbtrace", "--inject", "-f", "--exec", "ruby", "app.rb" };
    char *none[] = { "rbtrace", "-p", "1", "-f" };
    struct options o;

    CHECK(parse(&o, ARGC(plain), plain, NULL) == CLI_OK);
    CHECK(o.inject == 1 && o.inject_dir == NULL && o.mode == OPTIONS_MODE_EVAL);
    options_free(&o);
    CHECK(parse(&o, ARGC(eq), eq, NULL) == CLI_OK);
    CHECK(o.inject == 1 && o.inject_dir && !strcmp(o.inject_dir, "/opt/rb/lib"));
    options_free(&o);
    CHECK(parse(&o, ARGC(spaced), spaced, NULL) == CLI_OK);
    CHECK(o.inject == 1 && o.inject_dir && !strcmp(o.inject_dir, "/opt/rb/lib") && o.pid == 1);
    options_free(&o);
    /* without it: off */
    CHECK(parse(&o, ARGC(none), none, NULL) == CLI_OK);
    CHECK(o.inject == 0 && o.inject_dir == NULL);
    options_free(&o);
    refused(ARGC(relative), relative, "invalid value 'lib' for --inject");
    refused(ARGC(empty), empty, "an absolute directory");
    refused(ARGC(exec), exec, "drop --inject");
}

int main(void)
{
    test_defaults();
    test_inject();
    test_methods();
    test_spellings();
    test_help_version();
    test_errors();
    test_too_many_selectors();
    test_watches();
    test_watch_errors();
    test_gvl();
    test_alloc();
    test_thread_names();
    test_targets();
    test_optional_values();
    test_reports();
    test_report_errors();
    test_help_conflicts();
    test_inline_value_ends_option();
    test_interactive();
    test_duration();
    return check_report();
}
