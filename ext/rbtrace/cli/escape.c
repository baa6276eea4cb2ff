/*
 * escape.c - the app's bytes, shown so that they cannot drive the
 * terminal (escape.h says what is escaped and how).
 *
 * Built on two steps: the span of bytes printed as they are (ASCII fast,
 * UTF-8 checked sequence by sequence), then one escaped byte; after an
 * escaped byte the scan goes on at the next byte, so a broken sequence
 * shows each of its bytes as \xNN and whatever valid text follows as is.
 */
#define _GNU_SOURCE /* fwrite_unlocked, ferror_unlocked */
#include <string.h>
#include "escape.h"
#include "utf8.h"

static const char escape_hex[] = "0123456789abcdef";

/* Whether ASCII byte c is printed as it is. */
static int escape_ascii_plain(unsigned char c, unsigned flags)
{
    if (c >= 0x20 && c < 0x7f) return c != '\\' || (flags & ESCAPE_KEEP_BACKSLASH);
    return (c == '\n' || c == '\t') && (flags & ESCAPE_KEEP_LINES);
}

size_t escape_plain_span(const char *s, size_t len, unsigned flags)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, n;

    while (i < len) {
        if (p[i] < 0x80) {
            if (!escape_ascii_plain(p[i], flags)) break;
            i++;
            continue;
        }
        n = utf8_len(p + i, len - i);
        if (n == 0 || utf8_is_c1(p + i, n)) break;
        i += n;
    }
    return i;
}

size_t escape_byte(char out[ESCAPE_MAX_PER_BYTE], unsigned char c)
{
    out[0] = '\\';
    switch (c) {
    case '\\':
        out[1] = '\\';
        return 2;
    case '\n':
        out[1] = 'n';
        return 2;
    case '\t':
        out[1] = 't';
        return 2;
    case '\r':
        out[1] = 'r';
        return 2;
    default:
        out[1] = 'x';
        out[2] = escape_hex[c >> 4];
        out[3] = escape_hex[c & 0xf];
        return 4;
    }
}

int escape_needed(const char *s, size_t len, unsigned flags)
{
    return len && escape_plain_span(s, len, flags) < len;
}

size_t escape_text(char *out, const char *s, size_t len, unsigned flags)
{
    size_t i = 0, o = 0, n;

    flags &= ~ESCAPE_KEEP_BACKSLASH;
    while (i < len) {
        n = escape_plain_span(s + i, len - i, flags);
        if (n) {
            memcpy(out + o, s + i, n);
            o += n;
            i += n;
            if (i == len) break;
        }
        o += escape_byte(out + o, (unsigned char)s[i++]);
    }
    return o;
}

int escape_fwrite(FILE *f, const char *s, size_t len, unsigned flags)
{
    char esc[ESCAPE_MAX_PER_BYTE];
    size_t i = 0, n;

    flags &= ~ESCAPE_KEEP_BACKSLASH;
    while (i < len) {
        n = escape_plain_span(s + i, len - i, flags);
        if (n) {
            fwrite_unlocked(s + i, 1, n, f);
            i += n;
            if (i == len) break;
        }
        fwrite_unlocked(esc, 1, escape_byte(esc, (unsigned char)s[i++]), f);
    }
    return ferror_unlocked(f) ? -1 : 0;
}

int escape_body_needed(const char *s, size_t len)
{
    return escape_needed(s, len, ESCAPE_KEEP_LINES | ESCAPE_KEEP_BACKSLASH);
}

int escape_fwrite_body(FILE *f, const char *s, size_t len)
{
    if (!escape_body_needed(s, len)) {
        if (len) fwrite_unlocked(s, 1, len, f);
        return ferror_unlocked(f) ? -1 : 0;
    }
    return escape_fwrite(f, s, len, ESCAPE_KEEP_LINES);
}

size_t escape_cut(const char *s, size_t len, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;

    if (len <= max) return len;
    /* Back over continuation bytes (10xxxxxx) to a character's start. */
    while (max > 0 && (p[max] & 0xc0) == 0x80) max--;
    return max;
}
