/*
 * json.h - the app's bytes as JSON strings, for the json and chrome
 * formats (format.h).
 *
 * Pure: bytes in, text out to a buffer. Everything the app sends is
 * untrusted; whatever its bytes, the string written is valid JSON (RFC
 * 8259) and safe on a terminal:
 *
 *   "  \         as \" and \\
 *   \n \t \r     as \n \t \r; \b \f and every other C0 control byte, DEL and
 *                the C1 controls (U+0080..U+009F) as \u00XX
 *   valid UTF-8  as it is (RFC 3629: no overlong forms, no surrogates,
 *                nothing past U+10FFFF)
 *   invalid      each byte that is not part of valid UTF-8 as \ufffd (the
 *                replacement character, as Ruby's String#scrub and most JSON
 *                encoders do): the text stays readable and any JSON parser
 *                takes it; the original bytes of such a string are lost
 */
#ifndef RBTRACE_CLI_JSON_H
#define RBTRACE_CLI_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The longest JSON form of one byte of input: "\ufffd" or "\u00XX". */
#define JSON_MAX_PER_BYTE 6

/* s[0, len) as the inside of a JSON string (no quotes) into out, which has
 * room for len * JSON_MAX_PER_BYTE bytes; returns the length written. */
size_t json_escape(char *out, const char *s, size_t len);

/* v in decimal at out (room for 20 digits); returns the length. */
size_t json_utoa(char *out, uint64_t v);

/* ns nanoseconds as microseconds with three decimals ("12.345"), at out
 * (room for 24 bytes); returns the length. */
size_t json_us(char *out, uint64_t ns);

/* A buffer for escaped text, grown as needed; zero it to start. */
struct json_buf {
    char *p;
    size_t cap;
};

/* s[0, len) escaped into b (grown if need be): the length, or (size_t)-1
 * when out of memory. */
size_t json_escape_buf(struct json_buf *b, const char *s, size_t len);

void json_buf_free(struct json_buf *b);

/* Room in b for need bytes. CLI_OK, or CLI_ERR when out of memory. */
int json_buf_reserve(struct json_buf *b, size_t need);

/* Appends to a line built in a buffer with room enough: the bytes, a
 * literal, a number; each returns the new end. */
static inline char *json_put(char *p, const char *s, size_t len)
{
    memcpy(p, s, len);
    return p + len;
}

#define JSON_PUT_LITERAL(p, s) json_put((p), (s), sizeof(s) - 1)

static inline char *json_put_u64(char *p, uint64_t v)
{
    return p + json_utoa(p, v);
}

/* Text built in b: s[0, len) escaped, or the C string s as it is, added at
 * *len_io (moved past it). CLI_OK, or CLI_ERR when out of memory. */
int json_buf_add_escaped(struct json_buf *b, size_t *len_io, const char *s, size_t len);
int json_buf_add(struct json_buf *b, size_t *len_io, const char *s);

#endif
