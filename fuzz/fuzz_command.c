/*
 * fuzz_command.c - libFuzzer harness for the extension's command decoder,
 * rbtrace_command_decode (ext/rbtrace/codec.c): the function that turns the
 * bytes of one reassembled queue command into a struct rbtrace_command
 * before command.c carries it out. The input is the command's bytes.
 *
 * Besides ASan, UBSan and LeakSanitizer (no crash, no undefined behaviour,
 * no leak), every run checks:
 * - a refused command comes with a message (what the error event says);
 * - an accepted one is a known command whose strings lie inside the input,
 *   with no more selectors than RBTRACE_SELECTORS_MAX and a known result
 *   format; it encodes again (rbtrace_command_encode), the encoding decodes
 *   to the same command, and encoding that gives the same bytes;
 * - rbtrace_msgpack_scan agrees with msgpack-c on where a message ends,
 *   and says PARTIAL only where msgpack-c wants more bytes too.
 *
 * Build and run: rake test:fuzz (short, CI), rake fuzz:long (fuzz/RESULTS.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec.h"

#define FUZZ_CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz_command: check failed at %s:%d: %s\n", __FILE__, __LINE__, \
                    #cond); \
            abort(); \
        } \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int command_known(enum rbtrace_command_type type)
{
    return type >= RBTRACE_CMD_ATTACH && type <= RBTRACE_CMD_PROFILE;
}

static int str_inside(struct rbtrace_str s, const uint8_t *data, size_t size)
{
    const char *lo = (const char *)data;

    return s.len == 0 || (s.ptr >= lo && s.len <= size && s.ptr - lo <= (ptrdiff_t)(size - s.len));
}

static int str_same(struct rbtrace_str a, struct rbtrace_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static int command_same(const struct rbtrace_command *a, const struct rbtrace_command *b)
{
    uint32_t i;

    if (a->type != b->type || a->client_pid != b->client_pid ||
        a->protocol_version != b->protocol_version || !str_same(a->text, b->text) ||
        a->eval_id != b->eval_id || a->timeout_ms != b->timeout_ms ||
        a->result_format != b->result_format || a->threshold_ns != b->threshold_ns ||
        a->cpu != b->cpu || a->n_selectors != b->n_selectors)
        return 0;
    for (i = 0; i < a->n_selectors; i++)
        if (!str_same(a->selectors[i], b->selectors[i])) return 0;
    return 1;
}

/* The scan against msgpack-c, with room for the message to be longer
 * than the input (so that PARTIAL is possible) but a bounded allocation. */
static void check_scan(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    size_t max = 2 * size + 16, end = 0, off = 0;
    enum rbtrace_scan scan = rbtrace_msgpack_scan(buf, size, max, &end);
    msgpack_zone zone;
    msgpack_object obj;
    int rc;

    if (scan == RBTRACE_SCAN_TOO_BIG) return; /* msgpack-c would allocate for it */
    if (!msgpack_zone_init(&zone, 1024)) abort();
    rc = msgpack_unpack(buf, size, &off, &zone, &obj);
    switch (scan) {
    case RBTRACE_SCAN_WHOLE:
        /* msgpack-c refuses nesting deeper than its stack (NOMEM) */
        FUZZ_CHECK(
            rc == MSGPACK_UNPACK_NOMEM_ERROR ||
            ((rc == MSGPACK_UNPACK_SUCCESS || rc == MSGPACK_UNPACK_EXTRA_BYTES) && off == end));
        FUZZ_CHECK(end <= size && (rc != MSGPACK_UNPACK_SUCCESS || end == size));
        break;
    case RBTRACE_SCAN_PARTIAL:
        FUZZ_CHECK(rc == MSGPACK_UNPACK_CONTINUE || rc == MSGPACK_UNPACK_NOMEM_ERROR);
        break;
    case RBTRACE_SCAN_INVALID:
        FUZZ_CHECK(rc == MSGPACK_UNPACK_PARSE_ERROR || rc == MSGPACK_UNPACK_NOMEM_ERROR);
        break;
    case RBTRACE_SCAN_TOO_BIG:
        break;
    }
    msgpack_zone_destroy(&zone);
}

/* Encodes cmd, decodes the encoding, and encodes that again. */
static void check_round_trip(const struct rbtrace_command *cmd)
{
    static struct rbtrace_command again, third;
    char err[RBTRACE_ERRLEN];
    msgpack_sbuffer sb, sb2;
    msgpack_packer pk;
    msgpack_zone zone;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    FUZZ_CHECK(rbtrace_command_encode(&pk, cmd) == RBTRACE_OK);
    if (!msgpack_zone_init(&zone, 1024)) abort();
    err[0] = '\0';
    if (rbtrace_command_decode(sb.data, sb.size, &zone, &again, err) != RBTRACE_OK) {
        fprintf(stderr, "fuzz_command: re-encoded command refused: %s\n", err);
        abort();
    }
    FUZZ_CHECK(command_same(cmd, &again));

    msgpack_sbuffer_init(&sb2);
    msgpack_packer_init(&pk, &sb2, msgpack_sbuffer_write);
    FUZZ_CHECK(rbtrace_command_encode(&pk, &again) == RBTRACE_OK);
    FUZZ_CHECK(sb2.size == sb.size && memcmp(sb2.data, sb.data, sb.size) == 0);
    msgpack_zone_clear(&zone);
    FUZZ_CHECK(rbtrace_command_decode(sb2.data, sb2.size, &zone, &third, err) == RBTRACE_OK);
    FUZZ_CHECK(command_same(&again, &third));

    msgpack_zone_destroy(&zone);
    msgpack_sbuffer_destroy(&sb2);
    msgpack_sbuffer_destroy(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rbtrace_command cmd; /* large: off the stack, as in command.c */
    char err[RBTRACE_ERRLEN];
    msgpack_zone zone;
    uint32_t i;
    int rc;

    check_scan(data, size);
    if (!msgpack_zone_init(&zone, 4096)) abort();
    memset(err, 0x55, sizeof(err));
    rc = rbtrace_command_decode((const char *)data, size, &zone, &cmd, err);
    if (rc != RBTRACE_OK) {
        FUZZ_CHECK(rc == RBTRACE_ERR);
        FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
        msgpack_zone_destroy(&zone);
        return 0;
    }
    FUZZ_CHECK(command_known(cmd.type));
    FUZZ_CHECK(cmd.n_selectors <= RBTRACE_SELECTORS_MAX);
    FUZZ_CHECK(cmd.result_format <= RBTRACE_RESULT_FORMAT_MAX);
    FUZZ_CHECK(str_inside(cmd.text, data, size));
    for (i = 0; i < cmd.n_selectors; i++) FUZZ_CHECK(str_inside(cmd.selectors[i], data, size));
    check_round_trip(&cmd);
    msgpack_zone_destroy(&zone);
    return 0;
}
