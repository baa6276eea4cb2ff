/*
 * unfinished.c - tells an unfinished entry from a wrong one by the syntax
 * error the target's parser wrote (unfinished.h). The parsers word it:
 *
 *   parse.y (Ruby up to 3.3): "syntax error, unexpected end-of-input, ..."
 *     (an open def, class, if, block, bracket, operator), "unterminated
 *     string meets end of file" (also list, regexp), "embedded document
 *     meets end of file" (=begin), "can't find string "EOS" anywhere before
 *     EOF" (heredoc). It echoes the source line, then a caret line.
 *   prism (Ruby 3.4+): "unexpected end-of-input", "expected an `end` to
 *     close the `def` statement" (class, module, if, ...), and the same
 *     "meets end of file" and "anywhere before EOF"; and, without those
 *     words, "unterminated list; ..." (%w, %i), "unterminated symbol; ..."
 *     (:"), "unterminated quoted string; ..." (%s), "expected a closing
 *     delimiter for the `%x` or backtick string" (`, %x), which only the
 *     end of the input leaves open, and "expected a `}` to close the hash
 *     literal", also said of a hash that a wrong bracket ended ("foo(a:
 *     {b: 1)"). It quotes the source ("> 2 | code", the line in error),
 *     then a diagnostic line per error ("    |   ^ what").
 *
 * prism's own phrases count only on its diagnostic lines (a source line, or
 * parse.y's echo of one, may hold any text), and the hash's only where its
 * caret stands past the end of the line in error: where the input ended.
 * Any error that says the input went on where it should have ended
 * (", expecting end-of-input") makes the entry wrong. An entry with another
 * error besides an unfinished one may wait for more lines: ^C drops it.
 */
#define _GNU_SOURCE /* memmem */
#include <string.h>
#include "unfinished.h"

static const char *line_start(const char *text, const char *p)
{
    while (p > text && p[-1] != '\n') p--;
    return p;
}

/* If the phrase at `at` follows the caret of a prism diagnostic line
 * ("    |   ^~~ phrase"), the caret's column in the source; else -1. */
static long prism_caret_column(const char *text, const char *at)
{
    const char *p = line_start(text, at), *bar, *caret = NULL;

    while (p < at && *p == ' ') p++;
    if (p == at || *p != '|') return -1;
    bar = p++;
    for (; p < at && (*p == ' ' || *p == '^' || *p == '~'); p++)
        if (*p == '^' && !caret) caret = p;
    if (p != at || !caret || caret < bar + 2) return -1;
    return (long)(caret - (bar + 2)); /* the source follows "| " */
}

/* The length of the source line prism marks as in error ("> N | code"),
 * the nearest one above the line starting at diag; -1 if none. */
static long prism_marked_length(const char *text, const char *diag)
{
    const char *p = diag;

    while (p > text) {
        const char *end = p - 1; /* the newline that ends the line above */
        const char *start = line_start(text, end), *bar;

        p = start;
        if (*start != '>') continue;
        if ((bar = memchr(start, '|', (size_t)(end - start))) == NULL) return -1;
        if (bar + 1 == end) return 0; /* an empty line, without its space */
        return (long)(end - (bar + 2));
    }
    return -1;
}

/* Whether phrase is on one of prism's diagnostic lines; at_end: and its
 * caret past the end of the line in error. */
static int prism_says(const char *text, size_t len, const char *phrase, int at_end)
{
    const char *p = text, *end = text + len;
    size_t n = strlen(phrase);

    while ((p = memmem(p, (size_t)(end - p), phrase, n)) != NULL) {
        long column = prism_caret_column(text, p);

        if (column >= 0 && (!at_end || column == prism_marked_length(text, line_start(text, p))))
            return 1;
        p += n;
    }
    return 0;
}

int syntax_error_unfinished(const char *text, size_t len)
{
    static const char *const ended[] = {
        "unexpected end-of-input",
        "meets end of file",
        "anywhere before EOF",
        "expected an `end` to close the",
    };
    static const char *const unterminated[] = {
        "unterminated list;",
        "unterminated symbol;",
        "unterminated quoted string;",
        "expected a closing delimiter for the `%x` or backtick string",
    };
    static const char went_on[] = ", expecting end-of-input";
    size_t i;

    for (i = 0; i < sizeof(ended) / sizeof(ended[0]); i++)
        if (memmem(text, len, ended[i], strlen(ended[i]))) return 1;
    if (memmem(text, len, went_on, sizeof(went_on) - 1)) return 0;
    for (i = 0; i < sizeof(unterminated) / sizeof(unterminated[0]); i++)
        if (prism_says(text, len, unterminated[i], 0)) return 1;
    return prism_says(text, len, "expected a `}` to close the hash literal", 1);
}
