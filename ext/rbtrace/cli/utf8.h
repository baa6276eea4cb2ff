/*
 * utf8.h - where a valid UTF-8 character ends: the one check that both
 * ways of showing the app's bytes make, the terminal's (escape.c) and
 * JSON's (json.c), before printing a non-ASCII character as it is.
 *
 * Inline: both call it for every non-ASCII character of a trace.
 */
#ifndef RBTRACE_CLI_UTF8_H
#define RBTRACE_CLI_UTF8_H

#include <stddef.h>

/* The length of the valid UTF-8 sequence of a non-ASCII character at
 * s[0, len), 0 if the bytes there are none (RFC 3629, section 4: no
 * overlong forms, no surrogates, nothing past U+10FFFF). The C1 controls
 * (C2 80..C2 9F) are valid UTF-8: each caller escapes them its own way. */
static inline size_t utf8_len(const unsigned char *s, size_t len)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    size_t n, i;

    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3;
    else if (c >= 0xf0 && c <= 0xf4) n = 4;
    else return 0; /* a continuation byte, an overlong lead, F5..FF */
    if (n > len) return 0;
    /* The second byte's range is narrower after these leads. */
    if (c == 0xe0) lo = 0xa0; /* overlong */
    if (c == 0xed) hi = 0x9f; /* surrogates */
    if (c == 0xf0) lo = 0x90; /* overlong */
    if (c == 0xf4) hi = 0x8f; /* past U+10FFFF */
    if (s[1] < lo || s[1] > hi) return 0;
    for (i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return n;
}

/* Whether the valid sequence of n bytes at s is a C1 control (U+0080..U+009F),
 * which some terminals obey as ESC [ ... */
static inline int utf8_is_c1(const unsigned char *s, size_t n)
{
    return n == 2 && s[0] == 0xc2 && s[1] < 0xa0;
}

#endif
