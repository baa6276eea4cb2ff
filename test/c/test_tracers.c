/*
 * test_tracers.c - tracer files (-c): lines into selectors, shipped names
 * against paths, every error naming the file and line, and the memory
 * they live in owned by struct options (run under ASan: a leak or a
 * selector read after its file's buffer is freed fails the test).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "options.h"
#include "tracers.h"

#define ARGC(argv) ((int)(sizeof(argv) / sizeof(argv[0])))

static char test_dir[] = "/tmp/rbtrace-test-tracers-XXXXXX";

/* Writes text to test_dir/name; returns the path (static buffer). */
static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", test_dir, name);
    f = fopen(path, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
    return path;
}

/* Reads arg; expects failure with a message mentioning each of the NULL-ended
 * strings that follow. */
static void read_fails(const char *arg, ...)
{
    struct tracer_file tf;
    char err[CLI_ERRLEN] = "";
    const char *want;
    va_list ap;

    CHECK(tracer_file_read(&tf, arg, err, sizeof(err)) == CLI_ERR);
    va_start(ap, arg);
    while ((want = va_arg(ap, const char *)) != NULL) {
        if (!strstr(err, want))
            fprintf(stderr, "message \"%s\" does not mention \"%s\"\n", err, want);
        CHECK(strstr(err, want) != NULL);
    }
    va_end(ap);
    tracer_file_free(&tf);
}

static void test_parse(void)
{
    struct tracer_file tf;
    char err[CLI_ERRLEN] = "";
    static const char *want[] = {
        "String#gsub", "Process.pid", "Kernel#",
        "Dir.",        "sleep",       "Foo::Bar#baz(self, \"a #b\", x.y(1) # not a comment)",
        "Integer",     "A#b (arg)",   "A#c",
        "Hash#key?",   "String#=~",   "Foo.bar=",
    };
    size_t i;

    write_file("parse.tracer",
               "# a header\n"
               "\n"
               "String#gsub\n"
               "   Process.pid   # trailing comment\n"
               "\t# indented comment\n"
               "Kernel#\n"
               "Dir.\n"
               "sleep\r\n"
               "Foo::Bar#baz(self, \"a #b\", x.y(1) # not a comment)\n"
               "Integer\n"
               "A#b (arg)\n"
               "A#c\n"
               "Hash#key? # a comment\n"
               "String#=~\n"
               "Foo.bar=");
    {
        char path[512];
        snprintf(path, sizeof(path), "%s/parse.tracer", test_dir);
        CHECK(tracer_file_read(&tf, path, err, sizeof(err)) == CLI_OK);
    }
    if (tf.n_selectors != sizeof(want) / sizeof(want[0]))
        fprintf(stderr, "got %zu selectors (%s)\n", tf.n_selectors, err);
    CHECK(tf.n_selectors == sizeof(want) / sizeof(want[0]));
    for (i = 0; i < tf.n_selectors && i < sizeof(want) / sizeof(want[0]); i++) {
        if (strcmp(tf.selectors[i], want[i]))
            fprintf(stderr, "selector %zu: got '%s', want '%s'\n", i, tf.selectors[i], want[i]);
        CHECK(!strcmp(tf.selectors[i], want[i]));
    }
    tracer_file_free(&tf);
}

static void test_shape(void)
{
    CHECK(tracers_selector_shape_ok("sleep"));
    CHECK(tracers_selector_shape_ok("A::B#c?"));
    CHECK(tracers_selector_shape_ok("A.b(x, y)"));
    CHECK(tracers_selector_shape_ok("Kernel#"));
    CHECK(tracers_selector_shape_ok("Net::HTTP#request(req.method, @address)"));
    CHECK(tracers_selector_shape_ok("?RedisClient::Middlewares#call(command)"));
    CHECK(!tracers_selector_shape_ok("?"));
    CHECK(!tracers_selector_shape_ok("??A#b"));
    CHECK(!tracers_selector_shape_ok("? A#b"));
    CHECK(!tracers_selector_shape_ok("two words"));
    CHECK(!tracers_selector_shape_ok("a#b"));
    CHECK(!tracers_selector_shape_ok("A:B#c"));
    CHECK(!tracers_selector_shape_ok("A::#c"));
    CHECK(!tracers_selector_shape_ok("(File.write('x','y');String)#gsub"));
    CHECK(!tracers_selector_shape_ok("A#b(x"));
    CHECK(!tracers_selector_shape_ok("(x)"));
    CHECK(!tracers_selector_shape_ok("A#b.c"));
    CHECK(!tracers_selector_shape_ok("foo::bar"));
}

static void test_errors(void)
{
    char long_line[TRACERS_LINE_MAX + 16];
    char path[512];

    read_fails("./no-such-file.tracer", "cannot open tracer file ./no-such-file.tracer",
               "No such file", NULL);
    snprintf(path, sizeof(path), "%s/", test_dir);
    read_fails(path, "is a directory", NULL);
    read_fails(write_file("empty.tracer", ""), "empty.tracer has no selectors", NULL);
    read_fails(write_file("comments.tracer", "# only\n\n   # comments\n"), "has no selectors",
               NULL);
    read_fails(write_file("bad.tracer", "A#a\n\nnot a selector\n"), "bad.tracer:3: not a selector",
               "'not a selector'", NULL);
    memset(long_line, 'a', sizeof(long_line) - 1);
    long_line[sizeof(long_line) - 1] = '\0';
    read_fails(write_file("long.tracer", long_line), "long.tracer:1: line longer than 4096", NULL);
    {
        FILE *f;
        snprintf(path, sizeof(path), "%s/nul.tracer", test_dir);
        f = fopen(path, "w");
        if (!f || fwrite("A#a\nB#\0b\n", 1, 9, f) != 9 || fclose(f) != 0) exit(2);
        read_fails(path, "nul.tracer:2: a NUL byte", NULL);
    }
    if (geteuid() != 0) {
        const char *p = write_file("secret.tracer", "A#a\n");
        snprintf(path, sizeof(path), "%s", p);
        CHECK(chmod(path, 0) == 0);
        read_fails(path, "Permission denied", "make it readable", NULL);
    }
}

static void test_shipped(void)
{
    struct tracer_file tf;
    char err[CLI_ERRLEN] = "";
    char dir[512];

    snprintf(dir, sizeof(dir), "%s/shipped", test_dir);
    CHECK(mkdir(dir, 0700) == 0);
    CHECK(setenv(TRACERS_DIR_ENV, dir, 1) == 0);
    write_file("shipped/zeta.tracer", "Z#z\n");
    write_file("shipped/alpha.tracer", "A#a\nA.b\n");
    write_file("shipped/notes.txt", "not a tracer\n");

    CHECK(tracer_file_read(&tf, "alpha", err, sizeof(err)) == CLI_OK);
    CHECK(tf.n_selectors == 2 && !strcmp(tf.selectors[1], "A.b"));
    tracer_file_free(&tf);
    write_file("shipped/bom.tracer",
               "\xEF\xBB\xBF"
               "B#b\n");
    CHECK(tracer_file_read(&tf, "bom", err, sizeof(err)) == CLI_OK);
    CHECK(tf.n_selectors == 1 && !strcmp(tf.selectors[0], "B#b"));
    tracer_file_free(&tf);
    /* The shipped names, sorted, and how to give a file of one's own. */
    read_fails("nope", "unknown tracer 'nope'", "the shipped tracers are alpha, bom, zeta;",
               "./nope", NULL);
    read_fails("notes", "unknown tracer 'notes'", NULL);
    read_fails("a b", "unknown tracer 'a b'", NULL);
    read_fails("notes.txt", "unknown tracer 'notes.txt'", "./notes.txt", NULL);
    /* A name never reads a file of the current directory; a path does. */
    read_fails("zeta.tracer", "cannot open tracer file zeta.tracer", NULL);
    CHECK(setenv(TRACERS_DIR_ENV, "/nonexistent-rbtrace-dir", 1) == 0);
    read_fails("alpha", "cannot be listed", "/nonexistent-rbtrace-dir", TRACERS_DIR_ENV, NULL);
    CHECK(unsetenv(TRACERS_DIR_ENV) == 0);
    CHECK(tracers_dir(dir, sizeof(dir), err, sizeof(err)) == CLI_OK);
    CHECK(strlen(dir) > strlen("/tracers") &&
          !strcmp(dir + strlen(dir) - strlen("/tracers"), "/tracers"));
}

/* -c with -m: selectors add up, in order; the texts outlive parsing. */
static void test_options(void)
{
    char one[512], two[512];
    struct options o;
    char *argv[] = { "rbtrace", "-p", "1",        "-m", "X#x", "-c", one,
                     two,       "-t", "--config", one,  "-m",  "Y.y" };
    char *argv_bad[] = { "rbtrace", "-p", "1", "-c", one, "./missing.tracer" };
    char *argv_firehose[] = { "rbtrace", "-p", "1", "-f", "-c", one };
    char *argv_empty[] = { "rbtrace", "-p", "1", "-c", "-t" };

    snprintf(one, sizeof(one), "%s", write_file("one.tracer", "A#a\nB#b # two\n"));
    snprintf(two, sizeof(two), "%s", write_file("two.tracer", "C#c\n"));
    CHECK(options_parse(&o, ARGC(argv), argv) == CLI_OK);
    CHECK(o.mode == OPTIONS_MODE_METHODS && o.start_time);
    CHECK(o.n_selectors == 7);
    if (o.n_selectors == 7) {
        CHECK(!strcmp(o.selectors[0], "X#x"));
        CHECK(!strcmp(o.selectors[1], "A#a"));
        CHECK(!strcmp(o.selectors[2], "B#b"));
        CHECK(!strcmp(o.selectors[3], "C#c"));
        CHECK(!strcmp(o.selectors[4], "A#a"));
        CHECK(!strcmp(o.selectors[6], "Y.y"));
    }
    options_free(&o);

    CHECK(options_parse(&o, ARGC(argv_bad), argv_bad) == CLI_ERR);
    CHECK(strstr(o.errstr, "./missing.tracer") != NULL);
    options_free(&o);
    CHECK(options_parse(&o, ARGC(argv_firehose), argv_firehose) == CLI_ERR);
    CHECK(strstr(o.errstr, "cannot be combined") != NULL);
    options_free(&o);
    CHECK(options_parse(&o, ARGC(argv_empty), argv_empty) == CLI_ERR);
    CHECK(strstr(o.errstr, "-c needs") != NULL);
    options_free(&o);
}

/* The limit on selectors counts -m and -c together. */
static void test_limit(void)
{
    char path[512], *text;
    size_t i, n = 250;
    struct options o;
    char *argv[] = { "rbtrace", "-p",  "1",   "-m",  "A#a", "B#b", "C#c",
                     "D#d",     "E#e", "F#f", "G#g", "-c",  path };
    char *argv_fits[] = { "rbtrace", "-p",  "1",   "-m",  "A#a", "B#b",
                          "C#c",     "D#d", "E#e", "F#f", "-c",  path };

    text = malloc(n * 4 + 1);
    if (!text) abort();
    for (i = 0; i < n; i++) memcpy(text + i * 4, "A#a\n", 4);
    text[n * 4] = '\0';
    snprintf(path, sizeof(path), "%s", write_file("many.tracer", text));
    free(text);
    CHECK(options_parse(&o, ARGC(argv), argv) == CLI_ERR);
    CHECK(strstr(o.errstr, "too many method selectors (at most 256)") != NULL);
    CHECK(strstr(o.errstr, "adds 250 to 7") != NULL);
    options_free(&o);
    CHECK(options_parse(&o, ARGC(argv_fits), argv_fits) == CLI_OK && o.n_selectors == 256);
    options_free(&o);
}

static void cleanup(void)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
}

int main(void)
{
    if (!mkdtemp(test_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_parse();
    test_shape();
    test_errors();
    test_shipped();
    test_options();
    test_limit();
    cleanup();
    return check_report();
}
