/*
 * fuzz_convert.c - libFuzzer harness for --convert's reader of saved text
 * traces (ext/rbtrace/cli/convert.c) and the formats it feeds: a file
 * given to --convert is anyone's bytes.
 *
 * Input: any bytes, read as lines ('\n') the way main.c reads them, each
 * event handed to the json, chrome, folded and summary formats at once;
 * on the first bad line the reader stops and every format finishes, as
 * the client does. Besides ASan, UBSan and LeakSanitizer, every run checks:
 * - a bad line's error is "line N: expected ..." (or "line N: out of
 *   memory"), N the line it stopped at;
 * - every format finishes, and the chrome document ends closed ("}}\n").
 *
 * Build and run: rake test:fuzz (short, CI), rake fuzz:long (fuzz/RESULTS.md).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "convert.h"
#include "format.h"

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz_convert: check failed: %s (%s:%d)\n", #cond, __FILE__, \
                    __LINE__); \
            abort(); \
        } \
    } while (0)

#define FUZZ_FORMATS 4

static const enum options_format fuzz_kinds[FUZZ_FORMATS] = {
    OPTIONS_FORMAT_JSON, OPTIONS_FORMAT_CHROME, OPTIONS_FORMAT_FOLDED, OPTIONS_FORMAT_SUMMARY
};

struct fuzz_outputs {
    struct format *f[FUZZ_FORMATS];
};

static int fuzz_emit(void *ctx, const struct rbtrace_event *ev)
{
    struct fuzz_outputs *o = ctx;
    int i;

    for (i = 0; i < FUZZ_FORMATS; i++)
        if (format_event(o->f[i], ev) != CLI_OK) return CLI_ERR;
    return CLI_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_outputs o;
    struct format_opts opts;
    char *text[FUZZ_FORMATS];
    size_t len[FUZZ_FORMATS];
    FILE *out[FUZZ_FORMATS];
    const char *p = (const char *)data, *end = p + size, *nl;
    struct convert c;
    int i, rc = CLI_OK;
    char want[32];

    memset(&opts, 0, sizeof(opts));
    opts.text.prefix = 2;
    for (i = 0; i < FUZZ_FORMATS; i++) {
        text[i] = NULL;
        out[i] = open_memstream(&text[i], &len[i]);
        FUZZ_CHECK(out[i] != NULL);
        FUZZ_CHECK(format_open(fuzz_kinds[i], out[i], &opts, &o.f[i]) == CLI_OK);
    }
    FUZZ_CHECK(convert_init(&c, fuzz_emit, &o) == CLI_OK);
    while (p < end && rc == CLI_OK) {
        nl = memchr(p, '\n', (size_t)(end - p));
        rc = convert_line(&c, p, nl ? (size_t)(nl - p) : (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    if (rc != CLI_OK) {
        snprintf(want, sizeof(want), "line %llu: ", (unsigned long long)c.line_no);
        FUZZ_CHECK(!strncmp(c.errstr, want, strlen(want)));
    }
    convert_free(&c);
    for (i = 0; i < FUZZ_FORMATS; i++) {
        FUZZ_CHECK(format_finish(o.f[i]) == CLI_OK);
        format_close(o.f[i]);
        FUZZ_CHECK(fclose(out[i]) == 0);
    }
    FUZZ_CHECK(len[1] >= 3 && !memcmp(text[1] + len[1] - 3, "}}\n", 3));
    for (i = 0; i < FUZZ_FORMATS; i++) free(text[i]);
    return 0;
}
