/*
 * escape.h - every byte that comes from the traced app is shown escaped,
 * as strace shows what a process wrote: the app cannot write to the
 * client's terminal (retitle it, clear it, move the cursor, fake a line).
 *
 * Pure functions: bytes in, text out (to a buffer or one FILE*).
 *
 * Printed as it is: printable ASCII and valid UTF-8 (so "héllo" and CJK
 * text show as they are). Escaped:
 *
 *   \\          a backslash (so that the output is unambiguous)
 *   \n \t \r    newline, tab, carriage return
 *   \xNN        any other C0 control byte, DEL, each byte of a C1 control
 *               (U+0080..U+009F, which some terminals obey as ESC [ ...),
 *               and each byte that is not part of valid UTF-8 (overlong
 *               forms, surrogates, past U+10FFFF, cut sequences)
 *
 * Two ways of using them:
 *   - one-line fields (method and class names, trace expression values,
 *     GC and raise text, notices and errors, --ps command lines): all of
 *     the above (flags 0).
 *   - multi-line text the user asked for (-e and -i results, report
 *     bodies): escape_fwrite_body. Text with nothing to escape but newlines,
 *     tabs and backslashes is printed byte for byte (Ruby's inspect is
 *     full of backslashes: "a\nb".inspect must show as "a\nb"); text with
 *     anything else to escape is printed with every escape above but
 *     newlines and tabs kept, and the caller says so (ESCAPE_BODY_NOTE), so
 *     that a reader knows its backslashes are doubled.
 */
#ifndef RBTRACE_CLI_ESCAPE_H
#define RBTRACE_CLI_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* Newlines and tabs stay as they are (multi-line text). */
#define ESCAPE_KEEP_LINES 1u
/* A backslash stays as it is: only to ask whether text is clean
 * (escape_needed), never to print: the output would be ambiguous. */
#define ESCAPE_KEEP_BACKSLASH 2u

/* The longest escaped form of one byte: "\xNN". */
#define ESCAPE_MAX_PER_BYTE 4

/* What a caller of escape_fwrite_body says first when escape_body_needed. */
#define ESCAPE_BODY_NOTE \
    "*** the text below has control characters or invalid UTF-8: shown " \
    "escaped, as \\xNN (\\r for a carriage return), with each backslash doubled"

/* The length of the longest prefix of s[0, len) printed as it is. */
size_t escape_plain_span(const char *s, size_t len, unsigned flags);

/* The escaped form of byte c (one that escape_plain_span stopped at) into
 * out, not NUL-terminated; returns its length (2 or 4). */
size_t escape_byte(char out[ESCAPE_MAX_PER_BYTE], unsigned char c);

/* Nonzero if anything in s[0, len) would be escaped under flags. */
int escape_needed(const char *s, size_t len, unsigned flags);

/* s[0, len) escaped into out, which has room for
 * len * ESCAPE_MAX_PER_BYTE bytes; returns the length written (no NUL). */
size_t escape_text(char *out, const char *s, size_t len, unsigned flags);

/* s[0, len) escaped to f, with unlocked writes (the caller's thread owns
 * f). 0, or -1 if f has a write error. */
int escape_fwrite(FILE *f, const char *s, size_t len, unsigned flags);

/* How much of s[0, len) to show when at most max bytes may be: len, or
 * max or less, never splitting a UTF-8 character (a name cut short). */
size_t escape_cut(const char *s, size_t len, size_t max);

/* Whether multi-line text the user asked for (see the top of this file)
 * is printed escaped: the caller then prints ESCAPE_BODY_NOTE first. */
int escape_body_needed(const char *s, size_t len);

/* That text to f: as it is, or escaped with newlines and tabs kept.
 * 0, or -1 if f has a write error. */
int escape_fwrite_body(FILE *f, const char *s, size_t len);

#endif
