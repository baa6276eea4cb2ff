/*
 * json.c - JSON strings and numbers written by hand (json.h says how the
 * app's bytes are escaped): the formats write millions of them a second.
 */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "json.h"
#include "utf8.h"

static const char json_hex[] = "0123456789abcdef";

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
    case '"':
        out[1] = '"';
        return 2;
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
        return json_u00(out, c);
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
        } else if ((n = utf8_len(p + i, len - i)) == 0) {
            memcpy(out + o, "\\ufffd", 6);
            o += 6;
            i++;
        } else if (utf8_is_c1(p + i, n)) {
            o += json_u00(out + o, p[i + 1]); /* a C1 control, which terminals obey */
            i += 2;
        } else {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        }
    }
    return o;
}

/* "00".."99": two digits per division (numbers are most of a line). */
static const char json_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* v < 2^32 in decimal: its digits, written backwards from end. */
static char *json_u32_back(char *end, uint32_t v)
{
    while (v >= 100) {
        uint32_t r = v % 100;
        v /= 100;
        end -= 2;
        memcpy(end, json_pairs + 2 * r, 2);
    }
    if (v >= 10) {
        end -= 2;
        memcpy(end, json_pairs + 2 * v, 2);
    } else {
        *--end = (char)('0' + v);
    }
    return end;
}

/* v < 10^8 as exactly 8 digits, backwards from end. */
static char *json_8_digits_back(char *end, uint32_t v)
{
    int i;

    for (i = 0; i < 4; i++) {
        uint32_t r = v % 100;
        v /= 100;
        end -= 2;
        memcpy(end, json_pairs + 2 * r, 2);
    }
    return end;
}

/* Times in ns run to 11 digits and more: split by 10^8 so that the
 * divisions are 32-bit ones, cheaper than 64-bit ones. */
size_t json_utoa(char *out, uint64_t v)
{
    char digits[24], *end = digits + sizeof(digits), *p = end;

    while (v > UINT32_MAX) {
        p = json_8_digits_back(p, (uint32_t)(v % 100000000));
        v /= 100000000;
    }
    p = json_u32_back(p, (uint32_t)v);
    memcpy(out, p, (size_t)(end - p));
    return (size_t)(end - p);
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

int json_buf_reserve(struct json_buf *b, size_t need)
{
    char *p;

    need++; /* never empty: b->p is then never NULL */
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
