/*
 * json.c - JSON strings and numbers written by hand (json.h says how the
 * app's bytes are escaped): the formats write millions of them a second.
 */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "json.h"

static const char json_hex[] = "0123456789abcdef";

/* The length of the valid UTF-8 sequence of a non-ASCII character at
 * s[0, len), 0 if the bytes there are none (RFC 3629, section 4). */
static size_t json_utf8_len(const unsigned char *s, size_t len)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    size_t n, i;

    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3;
    else if (c >= 0xf0 && c <= 0xf4) n = 4;
    else return 0;   /* a continuation byte, an overlong lead, F5..FF */
    if (n > len) return 0;
    if (c == 0xe0) lo = 0xa0;          /* overlong */
    if (c == 0xed) hi = 0x9f;          /* surrogates */
    if (c == 0xf0) lo = 0x90;          /* overlong */
    if (c == 0xf4) hi = 0x8f;          /* past U+10FFFF */
    if (s[1] < lo || s[1] > hi) return 0;
    for (i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return n;
}

static size_t json_u00(char *out, unsigned c)
{
    memcpy(out, "\\u00", 4);
    out[4] = json_hex[(c >> 4) & 0xf];
    out[5] = json_hex[c & 0xf];
    return 6;
}

/* One ASCII byte that is not written as it is. */
static size_t json_ascii(char *out, unsigned char c)
{
    out[0] = '\\';
    switch (c) {
    case '"': out[1] = '"'; return 2;
    case '\\': out[1] = '\\'; return 2;
    case '\n': out[1] = 'n'; return 2;
    case '\t': out[1] = 't'; return 2;
    case '\r': out[1] = 'r'; return 2;
    default: return json_u00(out, c);
    }
}

size_t json_escape(char *out, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0, n;

    while (i < len) {
        unsigned char c = p[i];

        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            out[o++] = (char)c;
            i++;
        } else if (c < 0x80) {
            o += json_ascii(out + o, c);
            i++;
        } else if ((n = json_utf8_len(p + i, len - i)) == 0) {
            memcpy(out + o, "\\ufffd", 6);
            o += 6;
            i++;
        } else if (n == 2 && c == 0xc2 && p[i + 1] < 0xa0) {
            o += json_u00(out + o, p[i + 1]);   /* a C1 control, which terminals obey */
            i += 2;
        } else {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        }
    }
    return o;
}

size_t json_utoa(char *out, uint64_t v)
{
    char digits[20];
    size_t n = 0, len = 0;

    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) out[len++] = digits[--n];
    return len;
}

size_t json_us(char *out, uint64_t ns)
{
    size_t n = json_utoa(out, ns / 1000);
    unsigned frac = (unsigned)(ns % 1000);

    out[n] = '.';
    out[n + 1] = (char)('0' + frac / 100);
    out[n + 2] = (char)('0' + frac / 10 % 10);
    out[n + 3] = (char)('0' + frac % 10);
    return n + 4;
}

size_t json_escape_buf(struct json_buf *b, const char *s, size_t len)
{
    size_t n = 0;

    return json_buf_add_escaped(b, &n, s, len) == CLI_OK ? n : (size_t)-1;
}

void json_buf_free(struct json_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* Room in b for need bytes. */
static int json_buf_reserve(struct json_buf *b, size_t need)
{
    char *p;

    need++;   /* never empty: b->p is then never NULL */
    if (need <= b->cap) return CLI_OK;
    if (need < 2 * b->cap) need = 2 * b->cap;
    if (!(p = realloc(b->p, need))) return CLI_ERR;
    b->p = p;
    b->cap = need;
    return CLI_OK;
}

int json_buf_add_escaped(struct json_buf *b, size_t *len_io, const char *s, size_t len)
{
    if (json_buf_reserve(b, *len_io + len * JSON_MAX_PER_BYTE) != CLI_OK) return CLI_ERR;
    *len_io += json_escape(b->p + *len_io, s, len);
    return CLI_OK;
}

int json_buf_add(struct json_buf *b, size_t *len_io, const char *s)
{
    size_t len = strlen(s);

    if (json_buf_reserve(b, *len_io + len) != CLI_OK) return CLI_ERR;
    memcpy(b->p + *len_io, s, len);
    *len_io += len;
    return CLI_OK;
}
