/*
 * test_escape.c - the escaper of the app's bytes (cli/escape.c) against
 * exact expected text: terminal escape sequences, every C0 byte and DEL,
 * C1 controls, plain and broken UTF-8, backslashes, and the multi-line
 * rule for the user's own results; the buffer and FILE* forms agree.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "escape.h"

/* in (n bytes) escaped under flags, as a NUL-terminated string (static). */
static const char *esc(const char *in, size_t n, unsigned flags)
{
    static char out[1024];
    size_t len = escape_text(out, in, n, flags);

    out[len] = '\0';
    return out;
}

#define ESC(lit, flags) esc((lit), sizeof(lit) - 1, (flags))

/* escape_fwrite to a memory stream gives what escape_text gives. */
static void check_fwrite_agrees(const char *in, size_t n, unsigned flags)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    if (!f) {
        perror("open_memstream");
        exit(2);
    }
    CHECK(escape_fwrite(f, in, n, flags) == 0);
    fclose(f);
    CHECK_STR(buf, esc(in, n, flags));
    free(buf);
}

static const char *body(const char *in, size_t n)
{
    static char *buf;
    size_t len = 0;
    FILE *f;

    free(buf);
    buf = NULL;
    f = open_memstream(&buf, &len);
    if (!f) {
        perror("open_memstream");
        exit(2);
    }
    CHECK(escape_fwrite_body(f, in, n) == 0);
    fclose(f);
    return buf;
}

#define BODY(lit) body((lit), sizeof(lit) - 1)

static void test_terminal_sequences(void)
{
    /* the method name of the issue: retitle, bell, clear screen */
    CHECK_STR(ESC("x\x1b]0;PWNED\a\x1b[2J", 0), "x\\x1b]0;PWNED\\x07\\x1b[2J");
    CHECK_STR(ESC("\x1b[31mred\x1b[0m", ESCAPE_KEEP_LINES), "\\x1b[31mred\\x1b[0m");
    /* a carriage return could overwrite the line: escaped even in bodies */
    CHECK_STR(ESC("ok\rEVIL", ESCAPE_KEEP_LINES), "ok\\rEVIL");
    CHECK_STR(ESC("a\x7f"
                  "b\b",
                  0),
              "a\\x7fb\\x08");
}

static void test_every_control_byte(void)
{
    char in[1], want[8];
    unsigned c;

    for (c = 0; c < 0x20; c++) {
        in[0] = (char)c;
        if (c == '\n') strcpy(want, "\\n");
        else if (c == '\t') strcpy(want, "\\t");
        else if (c == '\r') strcpy(want, "\\r");
        else snprintf(want, sizeof(want), "\\x%02x", c);
        CHECK_STR(esc(in, 1, 0), want);
        CHECK(escape_needed(in, 1, 0));
    }
    in[0] = 0x7f;
    CHECK_STR(esc(in, 1, 0), "\\x7f");
    for (c = 0x20; c < 0x7f; c++) {
        in[0] = (char)c;
        if (c == '\\') continue;
        want[0] = (char)c;
        want[1] = '\0';
        CHECK_STR(esc(in, 1, 0), want);
        CHECK(!escape_needed(in, 1, 0));
    }
}

static void test_newlines_and_backslashes(void)
{
    CHECK_STR(ESC("two\nlines\tand\\", 0), "two\\nlines\\tand\\\\");
    CHECK_STR(ESC("two\nlines\tand\\", ESCAPE_KEEP_LINES), "two\nlines\tand\\\\");
    /* the text "\x1b" and the byte ESC show differently */
    CHECK_STR(ESC("\\x1b", 0), "\\\\x1b");
    CHECK_STR(ESC("\x1b", 0), "\\x1b");
    /* KEEP_BACKSLASH only asks; the output never keeps one */
    CHECK(!escape_needed("a\\b", 3, ESCAPE_KEEP_BACKSLASH));
    CHECK(escape_needed("a\\b", 3, 0));
    CHECK_STR(ESC("a\\b", ESCAPE_KEEP_BACKSLASH), "a\\\\b");
    CHECK(!escape_needed("", 0, 0));
    CHECK(escape_text(NULL, NULL, 0, 0) == 0);
}

static void test_utf8(void)
{
    /* plain UTF-8 as it is: 2, 3 and 4 byte characters */
    CHECK_STR(ESC("h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", 0),
              "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");
    CHECK(!escape_needed("\xc2\xa0\xdf\xbf\xef\xbf\xbf\xf4\x8f\xbf\xbf", 11, 0));
    /* C1 controls (U+009B is a CSI for some terminals): each byte */
    CHECK_STR(ESC("\xc2\x9b"
                  "2J",
                  0),
              "\\xc2\\x9b2J");
    CHECK_STR(ESC("\xc2\x80", 0), "\\xc2\\x80");
    /* invalid: a lone continuation, overlong, surrogate, past U+10FFFF,
     * F5..FF, a cut sequence; what follows shows as it is */
    CHECK_STR(ESC("\x80"
                  "a",
                  0),
              "\\x80a");
    CHECK_STR(ESC("\xc0\xaf", 0), "\\xc0\\xaf");
    CHECK_STR(ESC("\xe0\x80\xaf", 0), "\\xe0\\x80\\xaf");
    CHECK_STR(ESC("\xed\xa0\x80", 0), "\\xed\\xa0\\x80");
    CHECK_STR(ESC("\xf4\x90\x80\x80", 0), "\\xf4\\x90\\x80\\x80");
    CHECK_STR(ESC("\xf0\x8f\xbf\xbf", 0), "\\xf0\\x8f\\xbf\\xbf");
    CHECK_STR(ESC("\xff\xfe", 0), "\\xff\\xfe");
    CHECK_STR(ESC("\xe6\x97", 0), "\\xe6\\x97");
    CHECK_STR(ESC("\xe6\x97"
                  "\xc3\xa9",
                  0),
              "\\xe6\\x97\xc3\xa9");
    CHECK_STR(ESC("\xe6"
                  "a\xbf",
                  0),
              "\\xe6a\\xbf");
}

static void test_buffer_and_stream_agree(void)
{
    static const char mixed[] = "a\\b\n\x1b[2J\xc3\xa9\xff\r\t\x7f\xc2\x9b\xe6\x97";
    unsigned flags;

    for (flags = 0; flags < 4; flags++) check_fwrite_agrees(mixed, sizeof(mixed) - 1, flags);
    check_fwrite_agrees("", 0, 0);
}

static void test_bodies(void)
{
    /* Ruby's inspect, newlines and tabs: as they are */
    CHECK(!escape_body_needed("=> \"a\\nb\"\nline\ttab\n", 19));
    CHECK_STR(BODY("\"a\\nb\"\nline\ttab \xc3\xa9\n"), "\"a\\nb\"\nline\ttab \xc3\xa9\n");
    /* anything else: escaped, newlines and tabs kept, backslashes doubled */
    CHECK(escape_body_needed("\x1b", 1));
    CHECK_STR(BODY("\"a\\nb\"\n\x1b]0;PWNED\a\tend\n"), "\"a\\\\nb\"\n\\x1b]0;PWNED\\x07\tend\n");
    CHECK_STR(BODY(""), "");
}

int main(void)
{
    test_terminal_sequences();
    test_every_control_byte();
    test_newlines_and_backslashes();
    test_utf8();
    test_buffer_and_stream_agree();
    test_bodies();
    return check_report();
}
