/*
 * fuzz_escape.c - libFuzzer harness for the escaper of the app's bytes
 * (ext/rbtrace/cli/escape.c): whatever the app sends, what the client
 * prints cannot drive a terminal, and loses nothing.
 *
 * Input: any bytes, escaped under each set of flags. Besides ASan, UBSan
 * and LeakSanitizer, every run checks:
 * - the output has no C0 control byte (but newline and tab with
 *   ESCAPE_KEEP_LINES), no DEL, is valid UTF-8 and has no C1 control;
 * - it decodes back (\\, \n, \t, \r, \xNN) to the input: nothing lost,
 *   nothing ambiguous;
 * - escape_fwrite writes what escape_text gives;
 * - a body (escape_fwrite_body) with nothing to escape but newlines, tabs
 *   and backslashes is written as it is; any other is written escaped.
 *
 * Build and run: rake test:fuzz (short, CI), rake fuzz:long (fuzz/RESULTS.md).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "escape.h"

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz_escape: check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            abort(); \
        } \
    } while (0)

/* The length of a valid UTF-8 character at s (RFC 3629), or 0; C1
 * controls count as invalid here, as the output must not have them. */
static size_t fuzz_utf8_char(const unsigned char *s, size_t len)
{
    uint32_t cp;
    size_t n, i;

    if (s[0] < 0x80) return 1;
    if ((s[0] & 0xe0) == 0xc0) n = 2, cp = s[0] & 0x1f;
    else if ((s[0] & 0xf0) == 0xe0) n = 3, cp = s[0] & 0x0f;
    else if ((s[0] & 0xf8) == 0xf0) n = 4, cp = s[0] & 0x07;
    else return 0;
    if (n > len) return 0;
    for (i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    if (cp > 0x10ffff || (cp >= 0x80 && cp <= 0x9f)) return 0;
    return n;
}

static int fuzz_hex(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Checks out (the escaped form of in under flags) byte by byte. */
static void fuzz_check_output(const unsigned char *in, size_t in_len, const unsigned char *out,
                              size_t out_len, unsigned flags)
{
    size_t i = 0, k = 0, n;

    while (i < out_len) {
        unsigned char c = out[i];

        n = fuzz_utf8_char(out + i, out_len - i);
        FUZZ_CHECK(n > 0);
        FUZZ_CHECK(c != 0x7f);
        if (c < 0x20) FUZZ_CHECK((flags & ESCAPE_KEEP_LINES) && (c == '\n' || c == '\t'));
        if (c != '\\') {
            /* as it is */
            FUZZ_CHECK(k + n <= in_len && memcmp(in + k, out + i, n) == 0);
            i += n;
            k += n;
            continue;
        }
        FUZZ_CHECK(i + 1 < out_len && k < in_len);
        switch (out[i + 1]) {
        case '\\':
            FUZZ_CHECK(in[k] == '\\');
            i += 2;
            break;
        case 'n':
            FUZZ_CHECK(in[k] == '\n' && !(flags & ESCAPE_KEEP_LINES));
            i += 2;
            break;
        case 't':
            FUZZ_CHECK(in[k] == '\t' && !(flags & ESCAPE_KEEP_LINES));
            i += 2;
            break;
        case 'r':
            FUZZ_CHECK(in[k] == '\r');
            i += 2;
            break;
        case 'x':
            FUZZ_CHECK(i + 3 < out_len);
            FUZZ_CHECK(fuzz_hex(out[i + 2]) >= 0 && fuzz_hex(out[i + 3]) >= 0);
            FUZZ_CHECK(in[k] == (unsigned char)(fuzz_hex(out[i + 2]) << 4 | fuzz_hex(out[i + 3])));
            i += 4;
            break;
        default:
            FUZZ_CHECK(!"an unknown escape");
        }
        k++;
    }
    FUZZ_CHECK(k == in_len);
}

/* What escape_fwrite or escape_fwrite_body writes, in a malloc'd buffer. */
static char *fuzz_stream(const uint8_t *data, size_t size, unsigned flags, int body, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);

    FUZZ_CHECK(f != NULL);
    if (body) FUZZ_CHECK(escape_fwrite_body(f, (const char *)data, size) == 0);
    else FUZZ_CHECK(escape_fwrite(f, (const char *)data, size, flags) == 0);
    FUZZ_CHECK(fclose(f) == 0);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned flag_sets[] = { 0, ESCAPE_KEEP_LINES };
    char *out = malloc(size * ESCAPE_MAX_PER_BYTE + 1), *streamed;
    size_t i, len, slen;

    FUZZ_CHECK(out != NULL);
    for (i = 0; i < sizeof(flag_sets) / sizeof(flag_sets[0]); i++) {
        len = escape_text(out, (const char *)data, size, flag_sets[i]);
        FUZZ_CHECK(len <= size * ESCAPE_MAX_PER_BYTE);
        fuzz_check_output(data, size, (const unsigned char *)out, len, flag_sets[i]);
        FUZZ_CHECK(escape_needed((const char *)data, size, flag_sets[i]) == (len != size));
        streamed = fuzz_stream(data, size, flag_sets[i], 0, &slen);
        FUZZ_CHECK(slen == len && memcmp(streamed, out, len) == 0);
        free(streamed);
    }
    /* a body: as it is, or as escape_text with newlines kept */
    streamed = fuzz_stream(data, size, 0, 1, &slen);
    if (escape_body_needed((const char *)data, size)) {
        len = escape_text(out, (const char *)data, size, ESCAPE_KEEP_LINES);
        FUZZ_CHECK(slen == len && memcmp(streamed, out, len) == 0);
    } else {
        FUZZ_CHECK(slen == size && (size == 0 || memcmp(streamed, data, size) == 0));
    }
    free(streamed);
    free(out);
    return 0;
}
