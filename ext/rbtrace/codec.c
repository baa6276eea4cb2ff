/*
 * codec.c - msgpack encoding and decoding of rbtrace commands and events
 * (see protocol.h for the fields of each). No I/O, no Ruby: the extension,
 * the client, the unit tests and the fuzzers all link this file.
 */
#include <endian.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "codec.h"

/* ---- field access with type checks ---- */

static int codec_fail(char *err, const char *what, uint32_t index)
{
    snprintf(err, RBTRACE_ERRLEN, "field %u: expected %s", index, what);
    return RBTRACE_ERR;
}

static int codec_uint(const msgpack_object_array *a, uint32_t i, uint64_t *out, char *err)
{
    if (i >= a->size || a->ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return codec_fail(err, "an unsigned integer", i);
    *out = a->ptr[i].via.u64;
    return RBTRACE_OK;
}

static int codec_uint32(const msgpack_object_array *a, uint32_t i, uint32_t *out, char *err)
{
    uint64_t v;
    if (codec_uint(a, i, &v, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (v > UINT32_MAX) return codec_fail(err, "a 32-bit unsigned integer", i);
    *out = (uint32_t)v;
    return RBTRACE_OK;
}

static int codec_bool(const msgpack_object_array *a, uint32_t i, int *out, char *err)
{
    if (i >= a->size || a->ptr[i].type != MSGPACK_OBJECT_BOOLEAN)
        return codec_fail(err, "a boolean", i);
    *out = a->ptr[i].via.boolean ? 1 : 0;
    return RBTRACE_OK;
}

static int codec_str_of(const msgpack_object *o, struct rbtrace_str *out)
{
    if (o->type != MSGPACK_OBJECT_STR) return RBTRACE_ERR;
    /* msgpack-c gives an empty string a NULL pointer; memcpy, printf's %.*s
     * and pointer arithmetic must not see one (found by fuzz_event) */
    out->ptr = o->via.str.ptr ? o->via.str.ptr : "";
    out->len = o->via.str.size;
    return RBTRACE_OK;
}

static int codec_str(const msgpack_object_array *a, uint32_t i, struct rbtrace_str *out, char *err)
{
    if (i >= a->size || codec_str_of(&a->ptr[i], out) != RBTRACE_OK)
        return codec_fail(err, "a string", i);
    return RBTRACE_OK;
}

static int codec_array(const msgpack_object_array *a, uint32_t i, const msgpack_object_array **out,
                       char *err)
{
    if (i >= a->size || a->ptr[i].type != MSGPACK_OBJECT_ARRAY)
        return codec_fail(err, "an array", i);
    *out = &a->ptr[i].via.array;
    return RBTRACE_OK;
}

/* The array of a message and its type number. */
static int codec_message(const msgpack_object *obj, const msgpack_object_array **a, uint64_t *type,
                         char *err)
{
    if (obj->type != MSGPACK_OBJECT_ARRAY || obj->via.array.size == 0) {
        snprintf(err, RBTRACE_ERRLEN, "a message must be a non-empty array");
        return RBTRACE_ERR;
    }
    *a = &obj->via.array;
    return codec_uint(*a, 0, type, err);
}

/* ---- commands ---- */

int rbtrace_command_encode(msgpack_packer *pk, const struct rbtrace_command *cmd)
{
    uint32_t i;

    switch (cmd->type) {
    case RBTRACE_CMD_ATTACH:
        msgpack_pack_array(pk, 4);
        msgpack_pack_uint32(pk, cmd->type);
        msgpack_pack_uint32(pk, cmd->client_pid);
        msgpack_pack_uint32(pk, cmd->protocol_version);
        msgpack_pack_str_with_body(pk, cmd->text.ptr, cmd->text.len);
        return RBTRACE_OK;
    case RBTRACE_CMD_DETACH:
    case RBTRACE_CMD_FIREHOSE:
    case RBTRACE_CMD_GC:
    case RBTRACE_CMD_RAISE:
    case RBTRACE_CMD_DEVMODE:
    case RBTRACE_CMD_RESUME:
    case RBTRACE_CMD_GVL:
    case RBTRACE_CMD_THREAD_NAMES:
    case RBTRACE_CMD_SYNC:
        msgpack_pack_array(pk, 2);
        msgpack_pack_uint32(pk, cmd->type);
        msgpack_pack_uint32(pk, cmd->client_pid);
        return RBTRACE_OK;
    case RBTRACE_CMD_ALLOC:
        msgpack_pack_array(pk, 3);
        msgpack_pack_uint32(pk, cmd->type);
        msgpack_pack_uint32(pk, cmd->client_pid);
        msgpack_pack_uint64(pk, cmd->sample);
        return RBTRACE_OK;
    case RBTRACE_CMD_PROFILE:
        msgpack_pack_array(pk, 4);
        msgpack_pack_uint32(pk, cmd->type);
        msgpack_pack_uint32(pk, cmd->client_pid);
        msgpack_pack_uint32(pk, cmd->mode);
        msgpack_pack_uint32(pk, cmd->hz);
        return RBTRACE_OK;
    case RBTRACE_CMD_METHODS:
        if (cmd->n_selectors > RBTRACE_SELECTORS_MAX) return RBTRACE_ERR;
        msgpack_pack_array(pk, 3);
        msgpack_pack_uint32(pk, cmd->type);
        msgpack_pack_uint32(pk, cmd->client_pid);
        msgpack_pack_array(pk, cmd->n_selectors);
        for (i = 0; i < cmd->n_selectors; i++)
            msgpack_pack_str_with_body(pk, cmd->selectors[i].ptr, cmd->selectors[i].len);
        return RBTRACE_OK;
    case RBTRACE_CMD_SLOW:
        if (cmd->n_selectors > RBTRACE_SELECTORS_MAX) return RBTRACE_ERR;
        msgpack_pack_array(pk, 5);
        msgpack_pack_uint32(pk, cmd->type);
        msgpack_pack_uint32(pk, cmd->client_pid);
        msgpack_pack_uint64(pk, cmd->threshold_ns);
        if (cmd->cpu) msgpack_pack_true(pk);
        else msgpack_pack_false(pk);
        msgpack_pack_array(pk, cmd->n_selectors);
        for (i = 0; i < cmd->n_selectors; i++)
            msgpack_pack_str_with_body(pk, cmd->selectors[i].ptr, cmd->selectors[i].len);
        return RBTRACE_OK;
    case RBTRACE_CMD_EVAL:
        if (cmd->result_format > RBTRACE_RESULT_FORMAT_MAX) return RBTRACE_ERR;
        msgpack_pack_array(pk, 6);
        msgpack_pack_uint32(pk, cmd->type);
        msgpack_pack_uint32(pk, cmd->client_pid);
        msgpack_pack_uint32(pk, cmd->eval_id);
        msgpack_pack_str_with_body(pk, cmd->text.ptr, cmd->text.len);
        msgpack_pack_uint32(pk, cmd->timeout_ms);
        msgpack_pack_uint32(pk, cmd->result_format);
        return RBTRACE_OK;
    }
    return RBTRACE_ERR;
}

/* The selector list at index at. */
static int command_decode_selectors(const msgpack_object_array *a, uint32_t at,
                                    struct rbtrace_command *cmd, char *err)
{
    const msgpack_object_array *list;
    uint32_t i;

    if (codec_array(a, at, &list, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (list->size > RBTRACE_SELECTORS_MAX) {
        snprintf(err, RBTRACE_ERRLEN, "too many selectors (%u, at most %d)", list->size,
                 RBTRACE_SELECTORS_MAX);
        return RBTRACE_ERR;
    }
    for (i = 0; i < list->size; i++) {
        if (codec_str_of(&list->ptr[i], &cmd->selectors[i]) != RBTRACE_OK) {
            snprintf(err, RBTRACE_ERRLEN, "selector %u is not a string", i);
            return RBTRACE_ERR;
        }
    }
    cmd->n_selectors = list->size;
    return RBTRACE_OK;
}

/* EVAL's optional trailing field: absent (an older client) is INSPECT. */
static int command_decode_result_format(const msgpack_object_array *a, struct rbtrace_command *cmd,
                                        char *err)
{
    cmd->result_format = RBTRACE_RESULT_INSPECT;
    if (a->size <= 5) return RBTRACE_OK;
    if (codec_uint32(a, 5, &cmd->result_format, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (cmd->result_format > RBTRACE_RESULT_FORMAT_MAX) {
        snprintf(err, RBTRACE_ERRLEN, "field 5: unknown result format %u", cmd->result_format);
        return RBTRACE_ERR;
    }
    return RBTRACE_OK;
}

static int command_decode_fields(const msgpack_object_array *a, struct rbtrace_command *cmd,
                                 char *err)
{
    switch (cmd->type) {
    case RBTRACE_CMD_ATTACH:
        if (codec_uint32(a, 2, &cmd->protocol_version, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_str(a, 3, &cmd->text, err);
    case RBTRACE_CMD_DETACH:
    case RBTRACE_CMD_FIREHOSE:
    case RBTRACE_CMD_GC:
    case RBTRACE_CMD_RAISE:
    case RBTRACE_CMD_DEVMODE:
    case RBTRACE_CMD_RESUME:
    case RBTRACE_CMD_GVL:
    case RBTRACE_CMD_THREAD_NAMES:
    case RBTRACE_CMD_SYNC:
        return RBTRACE_OK;
    case RBTRACE_CMD_ALLOC:
        return codec_uint(a, 2, &cmd->sample, err);
    case RBTRACE_CMD_PROFILE:
        if (codec_uint32(a, 2, &cmd->mode, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_uint32(a, 3, &cmd->hz, err);
    case RBTRACE_CMD_METHODS:
        return command_decode_selectors(a, 2, cmd, err);
    case RBTRACE_CMD_SLOW:
        if (codec_uint(a, 2, &cmd->threshold_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_bool(a, 3, &cmd->cpu, err) != RBTRACE_OK) return RBTRACE_ERR;
        return command_decode_selectors(a, 4, cmd, err);
    case RBTRACE_CMD_EVAL:
        if (codec_uint32(a, 2, &cmd->eval_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 3, &cmd->text, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint32(a, 4, &cmd->timeout_ms, err) != RBTRACE_OK) return RBTRACE_ERR;
        return command_decode_result_format(a, cmd, err);
    }
    snprintf(err, RBTRACE_ERRLEN, "unknown command %u", (unsigned)cmd->type);
    return RBTRACE_ERR;
}

static uint64_t codec_be(const unsigned char *q, size_t bytes);

/*
 * The msgpack item at p (n > 0 bytes left): the length of its header
 * (*head, 0 if the header itself is cut short), of the payload that
 * follows it (*body: a string's, binary's or extension's bytes), and how
 * many items it contains (*children: array elements, map keys and
 * values). Returns 0, or -1 for what msgpack-c refuses: the byte msgpack
 * never uses (0xc1), an ext 32 whose length is 2^32 - 1.
 */
static int codec_item(const unsigned char *p, size_t n, size_t *head, uint64_t *body,
                      uint64_t *children)
{
    unsigned char b = p[0];
    size_t w = 0;
    int ext = 0;

    *head = 1;
    *body = 0;
    *children = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return 0;
    if ((b & 0xf0) == 0x90) {
        *children = b & 0x0f;
        return 0;
    }
    if ((b & 0xf0) == 0x80) {
        *children = 2u * (b & 0x0f);
        return 0;
    }
    if ((b & 0xe0) == 0xa0) {
        *body = b & 0x1f;
        return 0;
    }
    switch (b) {
    case 0xcc:
    case 0xd0:
        *body = 1;
        return 0;
    case 0xcd:
    case 0xd1:
        *body = 2;
        return 0;
    case 0xca:
    case 0xce:
    case 0xd2:
        *body = 4;
        return 0;
    case 0xcb:
    case 0xcf:
    case 0xd3:
        *body = 8;
        return 0;
    case 0xd4:
        *body = 2;
        return 0; /* fixext 1..16: type + data */
    case 0xd5:
        *body = 3;
        return 0;
    case 0xd6:
        *body = 5;
        return 0;
    case 0xd7:
        *body = 9;
        return 0;
    case 0xd8:
        *body = 17;
        return 0;
    case 0xc4:
    case 0xd9:
        w = 1;
        break; /* bin 8, str 8 */
    case 0xc5:
    case 0xda:
        w = 2;
        break;
    case 0xc6:
    case 0xdb:
        w = 4;
        break;
    case 0xc7:
        w = 1;
        ext = 1;
        break; /* ext 8, 16, 32: length, then */
    case 0xc8:
        w = 2;
        ext = 1;
        break; /* a type byte and the data */
    case 0xc9:
        w = 4;
        ext = 1;
        break;
    case 0xdc:
    case 0xdd:
    case 0xde:
    case 0xdf: {
        w = (b == 0xdc || b == 0xde) ? 2 : 4;
        if (n < w + 1) {
            *head = 0;
            return 0;
        }
        *head = w + 1;
        *children = codec_be(p + 1, w) * ((b == 0xde || b == 0xdf) ? 2 : 1);
        return 0;
    }
    default:
        return -1; /* 0xc1 */
    }
    if (n < 1 + w) {
        *head = 0;
        return 0;
    }
    *head = 1 + w;
    *body = codec_be(p + 1, w);
    if (ext) {
        /* msgpack-c counts the type byte with the data, and refuses the
         * length whose count overflows */
        if (*body == UINT32_MAX) return -1;
        *body += 1;
    }
    return 0;
}

/*
 * Walks the items without building them: msgpack-c allocates room for
 * every element an array announces as soon as it reads its header, so
 * five bytes announcing 2^32 elements would otherwise cost gigabytes.
 * Every item takes at least one byte, so a message that announces more
 * items (or string bytes) than max bytes could hold is refused here.
 */
enum rbtrace_scan rbtrace_msgpack_scan(const char *buf, size_t len, size_t max, size_t *size)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t pending = 1, body, children;
    size_t pos = 0, head;

    if (len > max) len = max;
    while (pending > 0) {
        if (pos >= len) return RBTRACE_SCAN_PARTIAL;
        if (codec_item(p + pos, len - pos, &head, &body, &children) != 0)
            return RBTRACE_SCAN_INVALID;
        if (head == 0) return len < max ? RBTRACE_SCAN_PARTIAL : RBTRACE_SCAN_TOO_BIG;
        if (body > max - pos - head) return RBTRACE_SCAN_TOO_BIG;
        if (body > len - pos - head) return RBTRACE_SCAN_PARTIAL;
        pos += head + (size_t)body;
        pending = pending - 1 + children;
        if (pending > max - pos) return RBTRACE_SCAN_TOO_BIG;
    }
    *size = pos;
    return RBTRACE_SCAN_WHOLE;
}

int rbtrace_command_decode(const char *buf, size_t len, msgpack_zone *zone,
                           struct rbtrace_command *cmd, char *err)
{
    msgpack_object obj;
    const msgpack_object_array *a;
    uint64_t type;
    size_t off = 0, size = 0;

    memset(cmd, 0, sizeof(*cmd));
    switch (rbtrace_msgpack_scan(buf, len, len, &size)) {
    case RBTRACE_SCAN_WHOLE:
        break;
    case RBTRACE_SCAN_PARTIAL:
        snprintf(err, RBTRACE_ERRLEN, "truncated command (%zu bytes)", len);
        return RBTRACE_ERR;
    case RBTRACE_SCAN_TOO_BIG:
        snprintf(err, RBTRACE_ERRLEN,
                 "a container or string announces more than the "
                 "command's %zu bytes hold",
                 len);
        return RBTRACE_ERR;
    case RBTRACE_SCAN_INVALID:
        snprintf(err, RBTRACE_ERRLEN, "malformed msgpack in command");
        return RBTRACE_ERR;
    }
    if (size < len) {
        snprintf(err, RBTRACE_ERRLEN, "%zu bytes after the command", len - size);
        return RBTRACE_ERR;
    }
    /* Whole, and every announced item fits in len bytes: msgpack-c's
     * allocations are bounded by len (it may still refuse a message nested
     * deeper than its stack). */
    if (msgpack_unpack(buf, len, &off, zone, &obj) != MSGPACK_UNPACK_SUCCESS) {
        snprintf(err, RBTRACE_ERRLEN, "malformed msgpack in command (nested too deep?)");
        return RBTRACE_ERR;
    }
    if (codec_message(&obj, &a, &type, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (type > UINT32_MAX) return codec_fail(err, "a command number", 0);
    cmd->type = (enum rbtrace_command_type)type;
    if (codec_uint32(a, 1, &cmd->client_pid, err) != RBTRACE_OK) return RBTRACE_ERR;
    return command_decode_fields(a, cmd, err);
}

/* ---- events ---- */

static void pack_cstr(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

void rbtrace_event_pack_attached(msgpack_packer *pk, uint32_t target_pid, const char *ruby_version,
                                 uint64_t clock_origin_ns, uint64_t wall_origin_ns)
{
    msgpack_pack_array(pk, 6);
    msgpack_pack_uint32(pk, RBTRACE_EV_ATTACHED);
    msgpack_pack_uint32(pk, RBTRACE_PROTOCOL_VERSION);
    msgpack_pack_uint32(pk, target_pid);
    pack_cstr(pk, ruby_version);
    msgpack_pack_uint64(pk, clock_origin_ns);
    msgpack_pack_uint64(pk, wall_origin_ns);
}

void rbtrace_event_pack_attached_features(msgpack_packer *pk, uint32_t target_pid,
                                          const char *ruby_version, uint64_t clock_origin_ns,
                                          uint64_t wall_origin_ns, uint64_t features)
{
    msgpack_pack_array(pk, 7);
    msgpack_pack_uint32(pk, RBTRACE_EV_ATTACHED);
    msgpack_pack_uint32(pk, RBTRACE_PROTOCOL_VERSION);
    msgpack_pack_uint32(pk, target_pid);
    pack_cstr(pk, ruby_version);
    msgpack_pack_uint64(pk, clock_origin_ns);
    msgpack_pack_uint64(pk, wall_origin_ns);
    msgpack_pack_uint64(pk, features);
}

void rbtrace_event_pack_gvl(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                            uint64_t wait_ns)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint32(pk, RBTRACE_EV_GVL);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, time_ns);
    msgpack_pack_uint64(pk, wait_ns);
}

void rbtrace_event_pack_alloc(msgpack_packer *pk, uint64_t thread_id, uint64_t count)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint32(pk, RBTRACE_EV_ALLOC);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, count);
}

void rbtrace_event_pack_alloc_site(msgpack_packer *pk, uint64_t count, const char *klass,
                                   size_t klass_len, const char *path, size_t path_len,
                                   uint64_t line, const char *label, size_t label_len)
{
    msgpack_pack_array(pk, 6);
    msgpack_pack_uint32(pk, RBTRACE_EV_ALLOC_SITE);
    msgpack_pack_uint64(pk, count);
    msgpack_pack_str_with_body(pk, klass, klass_len);
    msgpack_pack_str_with_body(pk, path, path_len);
    msgpack_pack_uint64(pk, line);
    msgpack_pack_str_with_body(pk, label, label_len);
}

void rbtrace_event_pack_profile_frame(msgpack_packer *pk, uint64_t frame_id, const char *name,
                                      size_t name_len, const char *path, size_t path_len,
                                      uint64_t line)
{
    msgpack_pack_array(pk, 5);
    msgpack_pack_uint32(pk, RBTRACE_EV_PROFILE_FRAME);
    msgpack_pack_uint64(pk, frame_id);
    msgpack_pack_str_with_body(pk, name, name_len);
    msgpack_pack_str_with_body(pk, path, path_len);
    msgpack_pack_uint64(pk, line);
}

void rbtrace_event_pack_profile_missed(msgpack_packer *pk, uint64_t count)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, RBTRACE_EV_PROFILE_MISSED);
    msgpack_pack_uint64(pk, count);
}

void rbtrace_event_pack_profile_sample(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                                       uint32_t state, uint64_t weight, const uint64_t *frames,
                                       uint32_t n)
{
    uint32_t i;

    msgpack_pack_array(pk, 6);
    msgpack_pack_uint32(pk, RBTRACE_EV_PROFILE_SAMPLE);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, time_ns);
    msgpack_pack_uint32(pk, state);
    msgpack_pack_uint64(pk, weight);
    msgpack_pack_array(pk, n);
    for (i = 0; i < n; i++) msgpack_pack_uint64(pk, frames[i]);
}

void rbtrace_event_pack_thread_name(msgpack_packer *pk, uint64_t thread_id, const char *name,
                                    size_t len)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint32(pk, RBTRACE_EV_THREAD_NAME);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_str_with_body(pk, name, len);
}

void rbtrace_event_pack_refused(msgpack_packer *pk, enum rbtrace_refusal reason,
                                uint32_t client_pid, const char *message)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint32(pk, RBTRACE_EV_REFUSED);
    msgpack_pack_uint32(pk, reason);
    msgpack_pack_uint32(pk, client_pid);
    pack_cstr(pk, message);
}

void rbtrace_event_pack_detached(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 1);
    msgpack_pack_uint32(pk, RBTRACE_EV_DETACHED);
}

void rbtrace_event_pack_synced(msgpack_packer *pk, uint32_t tracing)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, RBTRACE_EV_SYNCED);
    msgpack_pack_uint32(pk, tracing);
}

void rbtrace_event_pack_method(msgpack_packer *pk, uint64_t method_id, const char *name,
                               size_t name_len)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint32(pk, RBTRACE_EV_METHOD);
    msgpack_pack_uint64(pk, method_id);
    msgpack_pack_str_with_body(pk, name, name_len);
}

void rbtrace_event_pack_call(msgpack_packer *pk, enum rbtrace_event_type type, uint64_t thread_id,
                             uint64_t time_ns, uint64_t method_id)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint32(pk, type);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, time_ns);
    msgpack_pack_uint64(pk, method_id);
}

void rbtrace_event_pack_call_next(msgpack_packer *pk, enum rbtrace_event_type type,
                                  uint64_t delta_ns, uint64_t method_id)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_uint32(pk, type);
    msgpack_pack_uint64(pk, delta_ns);
    msgpack_pack_uint64(pk, method_id);
}

void rbtrace_event_pack_call_args(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                                  uint64_t method_id, uint32_t n_exprs)
{
    msgpack_pack_array(pk, 5);
    msgpack_pack_uint32(pk, RBTRACE_EV_CALL_ARGS);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, time_ns);
    msgpack_pack_uint64(pk, method_id);
    msgpack_pack_array(pk, n_exprs);
}

void rbtrace_event_pack_expr(msgpack_packer *pk, const char *expr, size_t expr_len,
                             const char *value, size_t value_len)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_str_with_body(pk, expr, expr_len);
    msgpack_pack_str_with_body(pk, value, value_len);
}

void rbtrace_event_pack_lost(msgpack_packer *pk, uint64_t count)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, RBTRACE_EV_LOST);
    msgpack_pack_uint64(pk, count);
}

void rbtrace_event_pack_forget(msgpack_packer *pk, uint64_t first_id)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, RBTRACE_EV_FORGET);
    msgpack_pack_uint64(pk, first_id);
}

void rbtrace_event_pack_eval_result(msgpack_packer *pk, uint32_t eval_id,
                                    enum rbtrace_eval_status status, const char *text,
                                    size_t text_len)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint32(pk, RBTRACE_EV_EVAL_RESULT);
    msgpack_pack_uint32(pk, eval_id);
    msgpack_pack_uint32(pk, status);
    msgpack_pack_str_with_body(pk, text, text_len);
}

void rbtrace_event_pack_slow(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                             uint64_t method_id, uint64_t duration_ns, uint64_t depth)
{
    msgpack_pack_array(pk, 6);
    msgpack_pack_uint32(pk, RBTRACE_EV_SLOW);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, time_ns);
    msgpack_pack_uint64(pk, method_id);
    msgpack_pack_uint64(pk, duration_ns);
    msgpack_pack_uint64(pk, depth);
}

void rbtrace_event_pack_gc(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                           uint64_t duration_ns, uint64_t mark_ns, uint64_t sweep_ns,
                           const char *major_by, const char *gc_by)
{
    msgpack_pack_array(pk, 8);
    msgpack_pack_uint32(pk, RBTRACE_EV_GC);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, time_ns);
    msgpack_pack_uint64(pk, duration_ns);
    msgpack_pack_uint64(pk, mark_ns);
    msgpack_pack_uint64(pk, sweep_ns);
    pack_cstr(pk, major_by);
    pack_cstr(pk, gc_by);
}

void rbtrace_event_pack_raise(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                              const char *klass, size_t klass_len, const char *message,
                              size_t message_len, const char *location, size_t location_len,
                              uint64_t reraise)
{
    msgpack_pack_array(pk, 7);
    msgpack_pack_uint32(pk, RBTRACE_EV_RAISE);
    msgpack_pack_uint64(pk, thread_id);
    msgpack_pack_uint64(pk, time_ns);
    msgpack_pack_str_with_body(pk, klass, klass_len);
    msgpack_pack_str_with_body(pk, message, message_len);
    msgpack_pack_str_with_body(pk, location, location_len);
    msgpack_pack_uint64(pk, reraise);
}

void rbtrace_event_pack_message(msgpack_packer *pk, enum rbtrace_event_type type,
                                const char *message, size_t len)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint32(pk, type);
    msgpack_pack_str_with_body(pk, message, len);
}

static int event_decode_exprs(const msgpack_object_array *a, struct rbtrace_event *ev, char *err)
{
    const msgpack_object_array *list;
    uint32_t i;

    if (codec_array(a, 4, &list, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (list->size > RBTRACE_EXPRS_MAX) {
        snprintf(err, RBTRACE_ERRLEN, "too many expressions (%u)", list->size);
        return RBTRACE_ERR;
    }
    for (i = 0; i < list->size; i++) {
        const msgpack_object *pair = &list->ptr[i];
        if (pair->type != MSGPACK_OBJECT_ARRAY || pair->via.array.size != 2 ||
            codec_str_of(&pair->via.array.ptr[0], &ev->exprs[i]) != RBTRACE_OK ||
            codec_str_of(&pair->via.array.ptr[1], &ev->values[i]) != RBTRACE_OK) {
            snprintf(err, RBTRACE_ERRLEN, "expression %u is not a [string, string] pair", i);
            return RBTRACE_ERR;
        }
    }
    ev->n_exprs = list->size;
    return RBTRACE_OK;
}

static int event_decode_call(const msgpack_object_array *a, struct rbtrace_event *ev, char *err)
{
    if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (codec_uint(a, 2, &ev->time_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (codec_uint(a, 3, &ev->method_id, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (ev->type == RBTRACE_EV_CALL_ARGS) return event_decode_exprs(a, ev, err);
    return RBTRACE_OK;
}

static int event_decode_frames(const msgpack_object_array *a, struct rbtrace_event *ev, char *err)
{
    const msgpack_object_array *list;
    uint32_t i;

    if (codec_array(a, 5, &list, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (list->size > RBTRACE_PROFILE_FRAMES_MAX) {
        snprintf(err, RBTRACE_ERRLEN, "too many frames (%u)", list->size);
        return RBTRACE_ERR;
    }
    for (i = 0; i < list->size; i++)
        if (codec_uint(list, i, &ev->frames[i], err) != RBTRACE_OK) return RBTRACE_ERR;
    ev->n_frames = list->size;
    return RBTRACE_OK;
}

static int event_decode_sample(const msgpack_object_array *a, struct rbtrace_event *ev, char *err)
{
    if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (codec_uint(a, 2, &ev->time_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (codec_uint32(a, 3, &ev->status, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (ev->status > RBTRACE_STATE_MAX) {
        snprintf(err, RBTRACE_ERRLEN, "field 3: unknown thread state %u", ev->status);
        return RBTRACE_ERR;
    }
    if (codec_uint(a, 4, &ev->count, err) != RBTRACE_OK) return RBTRACE_ERR;
    return event_decode_frames(a, ev, err);
}

static int event_decode_fields(const msgpack_object_array *a, struct rbtrace_event *ev, char *err)
{
    switch (ev->type) {
    case RBTRACE_EV_ATTACHED:
        if (codec_uint(a, 1, &ev->number, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 2, &ev->pid, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 3, &ev->text, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 4, &ev->clock_origin_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 5, &ev->wall_origin_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        /* features: optional (absent or nil: none) */
        if (a->size <= 6 || a->ptr[6].type == MSGPACK_OBJECT_NIL) return RBTRACE_OK;
        return codec_uint(a, 6, &ev->features, err);
    case RBTRACE_EV_REFUSED:
        if (codec_uint(a, 1, &ev->number, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 2, &ev->pid, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_str(a, 3, &ev->text, err);
    case RBTRACE_EV_DETACHED:
        return RBTRACE_OK;
    case RBTRACE_EV_METHOD:
        if (codec_uint(a, 1, &ev->method_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_str(a, 2, &ev->text, err);
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_RETURN:
    case RBTRACE_EV_CALL_ARGS:
        return event_decode_call(a, ev, err);
    case RBTRACE_EV_CALL_NEXT:
    case RBTRACE_EV_RETURN_NEXT:
        if (codec_uint(a, 1, &ev->time_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_uint(a, 2, &ev->method_id, err);
    case RBTRACE_EV_LOST:
    case RBTRACE_EV_FORGET:
    case RBTRACE_EV_SYNCED:
        return codec_uint(a, 1, &ev->number, err);
    case RBTRACE_EV_EVAL_RESULT:
        if (codec_uint(a, 1, &ev->number, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint32(a, 2, &ev->status, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_str(a, 3, &ev->text, err);
    case RBTRACE_EV_ERROR:
    case RBTRACE_EV_NOTICE:
        return codec_str(a, 1, &ev->text, err);
    case RBTRACE_EV_SLOW:
        if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 2, &ev->time_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 3, &ev->method_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 4, &ev->duration_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_uint(a, 5, &ev->depth, err);
    case RBTRACE_EV_GC:
        if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 2, &ev->time_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 3, &ev->duration_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 4, &ev->mark_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 5, &ev->sweep_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 6, &ev->text, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_str(a, 7, &ev->text2, err);
    case RBTRACE_EV_RAISE:
        if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 2, &ev->time_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 3, &ev->text, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 4, &ev->text2, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 5, &ev->text3, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_uint(a, 6, &ev->number, err);
    case RBTRACE_EV_GVL:
        if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 2, &ev->time_ns, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_uint(a, 3, &ev->duration_ns, err);
    case RBTRACE_EV_ALLOC:
        if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_uint(a, 2, &ev->count, err);
    case RBTRACE_EV_ALLOC_SITE:
        if (codec_uint(a, 1, &ev->count, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 2, &ev->text, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 3, &ev->text2, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_uint(a, 4, &ev->line, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_str(a, 5, &ev->text3, err);
    case RBTRACE_EV_THREAD_NAME:
        if (codec_uint(a, 1, &ev->thread_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_str(a, 2, &ev->text, err);
    case RBTRACE_EV_PROFILE_FRAME:
        if (codec_uint(a, 1, &ev->method_id, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 2, &ev->text, err) != RBTRACE_OK) return RBTRACE_ERR;
        if (codec_str(a, 3, &ev->text2, err) != RBTRACE_OK) return RBTRACE_ERR;
        return codec_uint(a, 4, &ev->line, err);
    case RBTRACE_EV_PROFILE_SAMPLE:
        return event_decode_sample(a, ev, err);
    case RBTRACE_EV_PROFILE_MISSED:
        return codec_uint(a, 1, &ev->number, err);
    }
    snprintf(err, RBTRACE_ERRLEN, "unknown event %u", (unsigned)ev->type);
    return RBTRACE_ERR;
}

int rbtrace_event_decode(const msgpack_object *obj, struct rbtrace_event *ev, char *err)
{
    const msgpack_object_array *a;
    uint64_t type;

    /* The expression arrays are filled only up to n_exprs: clear the rest. */
    memset(ev, 0, offsetof(struct rbtrace_event, exprs));
    if (codec_message(obj, &a, &type, err) != RBTRACE_OK) return RBTRACE_ERR;
    if (type > UINT32_MAX) return codec_fail(err, "an event number", 0);
    ev->type = (enum rbtrace_event_type)type;
    return event_decode_fields(a, ev, err);
}

/* ---- the fast path for CALL and RETURN ---- */

/* The big-endian number of 1, 2, 4 or 8 bytes at q. */
static uint64_t codec_be(const unsigned char *q, size_t bytes)
{
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;

    switch (bytes) {
    case 1:
        return q[0];
    case 2:
        memcpy(&v16, q, 2);
        return be16toh(v16);
    case 4:
        memcpy(&v32, q, 4);
        return be32toh(v32);
    default:
        memcpy(&v64, q, 8);
        return be64toh(v64);
    }
}

/*
 * A msgpack unsigned integer at *p (any width: peers may not pack in the
 * shortest form). Returns the integers read: 1, *p past it, or 0 for
 * another type; -1 if cut short.
 */
static int codec_get_uint(const unsigned char **p, const unsigned char *end, uint64_t *out)
{
    const unsigned char *q = *p;
    size_t bytes;

    if (q == end) return -1;
    if (*q < 0x80) {
        *out = *q;
        *p = q + 1;
        return 1;
    }
    if (*q < 0xcc || *q > 0xcf) return 0;
    bytes = (size_t)1 << (*q - 0xcc); /* 0xcc..0xcf: 1, 2, 4, 8 bytes */
    if ((size_t)(end - q) < bytes + 1) return -1;
    *out = codec_be(q + 1, bytes);
    *p = q + 1 + bytes;
    return 1;
}

int rbtrace_event_decode_call_bytes(const char *buf, size_t len, struct rbtrace_event *ev,
                                    size_t *used)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t thread_id, time_ns, method_id;
    int rc;

    if (len < 2) return len == 0 || p[0] == 0x94 || p[0] == 0x93 ? -1 : 0;
    /* rbtrace_event_encode_call's form: fixarray of 4, fixint type; or
     * rbtrace_event_encode_call_next's: fixarray of 3, no thread. */
    if (p[0] == 0x94 && (p[1] == RBTRACE_EV_CALL || p[1] == RBTRACE_EV_RETURN)) {
        p += 2;
        if ((rc = codec_get_uint(&p, end, &thread_id)) != 1) return rc;
    } else if (p[0] == 0x93 && (p[1] == RBTRACE_EV_CALL_NEXT || p[1] == RBTRACE_EV_RETURN_NEXT)) {
        p += 2;
        thread_id = 0;
    } else {
        return 0;
    }
    if ((rc = codec_get_uint(&p, end, &time_ns)) != 1) return rc;
    if ((rc = codec_get_uint(&p, end, &method_id)) != 1) return rc;
    ev->type = (enum rbtrace_event_type)buf[1];
    ev->thread_id = thread_id;
    ev->time_ns = time_ns;
    ev->method_id = method_id;
    *used = (size_t)(p - (const unsigned char *)buf);
    return 1;
}

/* ---- the call chain ---- */

int rbtrace_call_chain_resolve(struct rbtrace_call_chain *c, struct rbtrace_event *ev, char *err)
{
    switch (ev->type) {
    case RBTRACE_EV_CALL_NEXT:
    case RBTRACE_EV_RETURN_NEXT:
        if (!c->started) {
            snprintf(err, RBTRACE_ERRLEN, "event %u (relative to the last call) before any call",
                     (unsigned)ev->type);
            return RBTRACE_ERR;
        }
        if (ev->time_ns > UINT64_MAX - c->time_ns) {
            snprintf(err, RBTRACE_ERRLEN, "event %u: time past 2^64 ns", (unsigned)ev->type);
            return RBTRACE_ERR;
        }
        ev->type = ev->type == RBTRACE_EV_CALL_NEXT ? RBTRACE_EV_CALL : RBTRACE_EV_RETURN;
        ev->thread_id = c->thread_id;
        ev->time_ns += c->time_ns;
        break;
    case RBTRACE_EV_CALL:
    case RBTRACE_EV_RETURN:
    case RBTRACE_EV_CALL_ARGS:
        break;
    default:
        return RBTRACE_OK;
    }
    rbtrace_call_chain_note(c, ev->thread_id, ev->time_ns);
    return RBTRACE_OK;
}
