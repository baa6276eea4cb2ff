/*
 * test_codec.c - the codec (ext/rbtrace/codec.c): every command and event
 * survives encode -> decode; every malformed input (truncated at every
 * length, fields missing or mistyped, unknown numbers, wrong shapes, random
 * bytes) is refused with a message, never a crash (run under ASan+UBSan).
 * The client's fast path for CALL and RETURN agrees with msgpack and
 * rbtrace_event_decode on every width of every field, on every truncation,
 * and on random bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "codec.h"

/*
 * msgpack-c allocates an array's elements as soon as it reads the array's
 * header, before the elements arrive: 5 bytes declaring 2^27 elements make
 * a 4 GiB allocation (cheap without ASan: untouched pages; the codec then
 * fails), and ASan would spend seconds poisoning each. Cap allocations under
 * ASan so that a huge one is a NULL (msgpack's NOMEM), as it usually is in
 * production.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=256";
}

static int str_eq(struct rbtrace_str s, const char *want)
{
    return s.len == strlen(want) && (s.len == 0 || !memcmp(s.ptr, want, s.len));
}

static struct rbtrace_str str_of(const char *s)
{
    struct rbtrace_str r = { s, (uint32_t)strlen(s) };
    return r;
}

/* ---- helpers over msgpack objects ---- */

/* A copy of array obj with element i replaced by *with (or removed from
 * the end when with is NULL and i == size - 1...): the caller frees *store. */
static msgpack_object obj_replace(const msgpack_object *obj, uint32_t i, const msgpack_object *with,
                                  msgpack_object **store)
{
    msgpack_object copy = *obj;
    uint32_t n = obj->via.array.size;

    *store = malloc((n + 1) * sizeof(msgpack_object));
    if (!*store) abort();
    memcpy(*store, obj->via.array.ptr, n * sizeof(msgpack_object));
    (*store)[i] = *with;
    copy.via.array.ptr = *store;
    if (i == n) copy.via.array.size = n + 1;
    return copy;
}

static msgpack_object obj_nil(void)
{
    msgpack_object o;
    memset(&o, 0, sizeof(o));
    o.type = MSGPACK_OBJECT_NIL;
    return o;
}

static msgpack_object obj_uint(uint64_t v)
{
    msgpack_object o;
    memset(&o, 0, sizeof(o));
    o.type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o.via.u64 = v;
    return o;
}

static msgpack_object obj_neg(int64_t v)
{
    msgpack_object o;
    memset(&o, 0, sizeof(o));
    o.type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
    o.via.i64 = v;
    return o;
}

static msgpack_object obj_str(const char *s)
{
    msgpack_object o;
    memset(&o, 0, sizeof(o));
    o.type = MSGPACK_OBJECT_STR;
    o.via.str.ptr = s;
    o.via.str.size = (uint32_t)strlen(s);
    return o;
}

static msgpack_object obj_float(double d)
{
    msgpack_object o;
    memset(&o, 0, sizeof(o));
    o.type = MSGPACK_OBJECT_FLOAT64;
    o.via.f64 = d;
    return o;
}

/* An object of another type than o. */
static msgpack_object obj_wrong_type(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_STR ? obj_uint(1) : obj_str("x");
}

/* ---- commands ---- */

/* Decodes buf; checks that a failure comes with a message. */
static int cmd_decode(const char *buf, size_t len, msgpack_zone *zone, struct rbtrace_command *cmd)
{
    char err[RBTRACE_ERRLEN] = "";
    int rc = rbtrace_command_decode(buf, len, zone, cmd, err);

    if (rc != RBTRACE_OK) CHECK(err[0] != '\0');
    return rc;
}

/* Re-packs obj and decodes it as a command. */
static int cmd_decode_obj(const msgpack_object *obj)
{
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_zone zone;
    int rc;

    if (!cmd) abort();
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, *obj);
    msgpack_zone_init(&zone, 1024);
    rc = cmd_decode(sb.data, sb.size, &zone, cmd);
    msgpack_zone_destroy(&zone);
    msgpack_sbuffer_destroy(&sb);
    free(cmd);
    return rc;
}

static void cmd_compare(const struct rbtrace_command *got, const struct rbtrace_command *want)
{
    uint32_t i;

    CHECK(got->type == want->type);
    CHECK(got->client_pid == want->client_pid);
    switch (want->type) {
    case RBTRACE_CMD_ATTACH:
        CHECK(got->protocol_version == want->protocol_version);
        CHECK(got->text.len == want->text.len &&
              !memcmp(got->text.ptr, want->text.ptr, want->text.len));
        break;
    case RBTRACE_CMD_ALLOC:
        CHECK(got->sample == want->sample);
        break;
    case RBTRACE_CMD_METHODS:
        CHECK(got->n_selectors == want->n_selectors);
        for (i = 0; i < want->n_selectors && i < got->n_selectors; i++)
            CHECK(got->selectors[i].len == want->selectors[i].len &&
                  !memcmp(got->selectors[i].ptr, want->selectors[i].ptr, want->selectors[i].len));
        break;
    case RBTRACE_CMD_SLOW:
        CHECK(got->threshold_ns == want->threshold_ns);
        CHECK(got->cpu == want->cpu);
        CHECK(got->n_selectors == want->n_selectors);
        for (i = 0; i < want->n_selectors && i < got->n_selectors; i++)
            CHECK(got->selectors[i].len == want->selectors[i].len &&
                  !memcmp(got->selectors[i].ptr, want->selectors[i].ptr, want->selectors[i].len));
        break;
    case RBTRACE_CMD_EVAL:
        CHECK(got->eval_id == want->eval_id);
        CHECK(got->timeout_ms == want->timeout_ms);
        CHECK(got->result_format == want->result_format);
        CHECK(got->text.len == want->text.len &&
              !memcmp(got->text.ptr, want->text.ptr, want->text.len));
        break;
    default:
        break;
    }
}

/* Every shorter buffer, every missing required field (the first `required`
 * ones), every mistyped field fails; an extra trailing field is accepted. */
static void cmd_check_malformed(const msgpack_sbuffer *sb, uint32_t required)
{
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    msgpack_zone zone;
    msgpack_object obj, bad, nil = obj_nil(), *store;
    size_t len, off = 0;
    uint32_t i;
    int all_fail = 1;

    if (!cmd) abort();
    msgpack_zone_init(&zone, 1024);
    for (len = 0; len < sb->size; len++) {
        /* A fresh heap copy of exactly len bytes, so ASan sees any overread. */
        char *copy = malloc(len ? len : 1);
        if (!copy) abort();
        memcpy(copy, sb->data, len);
        all_fail &= cmd_decode(copy, len, &zone, cmd) == RBTRACE_ERR;
        free(copy);
    }
    CHECK(all_fail);
    CHECK(msgpack_unpack(sb->data, sb->size, &off, &zone, &obj) == MSGPACK_UNPACK_SUCCESS);
    for (i = 0; i < obj.via.array.size; i++) {
        msgpack_object prefix = obj, wrong = obj_wrong_type(&obj.via.array.ptr[i]);
        prefix.via.array.size = i;
        CHECK(cmd_decode_obj(&prefix) == (i < required ? RBTRACE_ERR : RBTRACE_OK));
        bad = obj_replace(&obj, i, &nil, &store);
        CHECK(cmd_decode_obj(&bad) == RBTRACE_ERR);
        free(store);
        bad = obj_replace(&obj, i, &wrong, &store);
        CHECK(cmd_decode_obj(&bad) == RBTRACE_ERR);
        free(store);
    }
    bad = obj_replace(&obj, obj.via.array.size, &nil, &store);
    CHECK(cmd_decode_obj(&bad) == RBTRACE_OK);
    free(store);
    msgpack_zone_destroy(&zone);
    free(cmd);
}

static void cmd_roundtrip(const struct rbtrace_command *want)
{
    struct rbtrace_command *got = malloc(sizeof(*got));
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_zone zone;

    if (!got) abort();
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    CHECK(rbtrace_command_encode(&pk, want) == RBTRACE_OK);
    msgpack_zone_init(&zone, 1024);
    CHECK(cmd_decode(sb.data, sb.size, &zone, got) == RBTRACE_OK);
    cmd_compare(got, want);
    msgpack_zone_destroy(&zone);
    /* EVAL's result_format (its sixth field) is optional. */
    cmd_check_malformed(&sb, want->type == RBTRACE_CMD_EVAL ? 5 : UINT32_MAX);
    msgpack_sbuffer_destroy(&sb);
    free(got);
}

static void test_commands(void)
{
    struct rbtrace_command *cmd = calloc(1, sizeof(*cmd));
    static char names[RBTRACE_SELECTORS_MAX][24];
    char *code;
    uint32_t i;

    if (!cmd) abort();
    cmd->type = RBTRACE_CMD_ATTACH;
    cmd->client_pid = 4194303;
    cmd->protocol_version = RBTRACE_PROTOCOL_VERSION;
    cmd->text = str_of("/tmp/rbtrace-AbC123/sock");
    cmd_roundtrip(cmd);

    memset(cmd, 0, sizeof(*cmd));
    cmd->type = RBTRACE_CMD_DETACH;
    cmd->client_pid = UINT32_MAX;
    cmd_roundtrip(cmd);
    cmd->type = RBTRACE_CMD_FIREHOSE;
    cmd_roundtrip(cmd);

    cmd->type = RBTRACE_CMD_METHODS;
    cmd->n_selectors = 0;
    cmd_roundtrip(cmd);
    cmd->n_selectors = 2;
    cmd->selectors[0] = str_of("String#gsub(self, @x)");
    cmd->selectors[1] = str_of("");
    cmd_roundtrip(cmd);
    for (i = 0; i < RBTRACE_SELECTORS_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "C%u#m", i);
        cmd->selectors[i] = str_of(names[i]);
    }
    cmd->n_selectors = RBTRACE_SELECTORS_MAX;
    cmd_roundtrip(cmd);

    memset(cmd, 0, sizeof(*cmd));
    cmd->type = RBTRACE_CMD_GC;
    cmd->client_pid = 12;
    cmd_roundtrip(cmd);
    cmd->type = RBTRACE_CMD_RAISE;
    cmd_roundtrip(cmd);
    cmd->type = RBTRACE_CMD_DEVMODE;
    cmd_roundtrip(cmd);
    cmd->type = RBTRACE_CMD_RESUME;
    cmd_roundtrip(cmd);
    cmd->type = RBTRACE_CMD_GVL;
    cmd_roundtrip(cmd);
    cmd->type = RBTRACE_CMD_ALLOC;
    cmd->sample = 16;
    cmd_roundtrip(cmd);
    cmd->sample = UINT64_MAX;
    cmd_roundtrip(cmd);
    cmd->sample = 0;

    cmd->type = RBTRACE_CMD_THREAD_NAMES;
    cmd_roundtrip(cmd);
    cmd->type = RBTRACE_CMD_SYNC;
    cmd_roundtrip(cmd);

    cmd->type = RBTRACE_CMD_SLOW;
    cmd->threshold_ns = 250000000;
    cmd_roundtrip(cmd);
    cmd->cpu = 1;
    cmd->threshold_ns = UINT64_MAX;
    cmd->n_selectors = 2;
    cmd->selectors[0] = str_of("Worker#run");
    cmd->selectors[1] = str_of("Kernel#sleep");
    cmd_roundtrip(cmd);

    memset(cmd, 0, sizeof(*cmd));
    cmd->type = RBTRACE_CMD_EVAL;
    cmd->client_pid = 77;
    cmd->eval_id = 1;
    cmd->timeout_ms = 5000;
    cmd->text = str_of("1 + 1");
    cmd_roundtrip(cmd);
    /* 64 KiB of code: longer than one queue message. */
    code = malloc(65537);
    if (!code) abort();
    for (i = 0; i < 65536; i++) code[i] = (char)('a' + i % 26);
    code[65536] = '\0';
    cmd->text = str_of(code);
    cmd_roundtrip(cmd);
    free(code);
    cmd->text = str_of("RBTrace::Reports.memory");
    cmd->result_format = RBTRACE_RESULT_TEXT;
    cmd_roundtrip(cmd);
    free(cmd);
}

static void test_command_encode_refuses(void)
{
    struct rbtrace_command *cmd = calloc(1, sizeof(*cmd));
    msgpack_sbuffer sb;
    msgpack_packer pk;

    if (!cmd) abort();
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    cmd->type = RBTRACE_CMD_METHODS;
    cmd->n_selectors = RBTRACE_SELECTORS_MAX + 1;
    CHECK(rbtrace_command_encode(&pk, cmd) == RBTRACE_ERR);
    cmd->type = (enum rbtrace_command_type)99;
    CHECK(rbtrace_command_encode(&pk, cmd) == RBTRACE_ERR);
    msgpack_sbuffer_destroy(&sb);
    free(cmd);
}

/* Packs [items...] from a small description: 'u' uint, 'n' negative,
 * 's' string, 'z' nil, 'f' float, 'm' empty map, 'a' N strings (N next). */
static void pack_items(msgpack_packer *pk, const char *spec, const uint64_t *vals)
{
    size_t i, n = strlen(spec);

    msgpack_pack_array(pk, (uint32_t)n);
    for (i = 0; i < n; i++) {
        switch (spec[i]) {
        case 'u':
            msgpack_pack_uint64(pk, vals[i]);
            break;
        case 'n':
            msgpack_pack_int64(pk, -(int64_t)vals[i]);
            break;
        case 's':
            msgpack_pack_str_with_body(pk, "sel", 3);
            break;
        case 'z':
            msgpack_pack_nil(pk);
            break;
        case 'f':
            msgpack_pack_double(pk, 1.5);
            break;
        case 'm':
            msgpack_pack_map(pk, 0);
            break;
        case 'a': {
            uint64_t k;
            msgpack_pack_array(pk, (uint32_t)vals[i]);
            for (k = 0; k < vals[i]; k++) msgpack_pack_str_with_body(pk, "C#m", 3);
            break;
        }
        }
    }
}

/* 1 if the command described by spec decodes. */
static int cmd_decodes(const char *spec, const uint64_t *vals)
{
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_zone zone;
    int rc;

    if (!cmd) abort();
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_items(&pk, spec, vals);
    msgpack_zone_init(&zone, 1024);
    rc = cmd_decode(sb.data, sb.size, &zone, cmd);
    msgpack_zone_destroy(&zone);
    msgpack_sbuffer_destroy(&sb);
    free(cmd);
    return rc == RBTRACE_OK;
}

static void test_command_malformed(void)
{
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    static const char garbage[] = { (char)0xc1, 0x01 };
    static const char extra[] = { (char)0x92, 0x02, 0x05, 0x00 }; /* [2, 5] + 1 byte */
    static const char map[] = { (char)0x80 };
    static const char str[] = { (char)0xa1, 'x' };
    static const char empty_array[] = { (char)0x90 };
    msgpack_zone zone;
    uint64_t v[4];

    if (!cmd) abort();
    msgpack_zone_init(&zone, 1024);
    CHECK(cmd_decode(garbage, sizeof(garbage), &zone, cmd) == RBTRACE_ERR);
    CHECK(cmd_decode(extra, sizeof(extra), &zone, cmd) == RBTRACE_ERR);
    CHECK(cmd_decode(extra, sizeof(extra) - 1, &zone, cmd) == RBTRACE_OK);
    CHECK(cmd_decode(map, sizeof(map), &zone, cmd) == RBTRACE_ERR);
    CHECK(cmd_decode(str, sizeof(str), &zone, cmd) == RBTRACE_ERR);
    CHECK(cmd_decode(empty_array, sizeof(empty_array), &zone, cmd) == RBTRACE_ERR);
    CHECK(cmd_decode("", 0, &zone, cmd) == RBTRACE_ERR);
    msgpack_zone_destroy(&zone);
    free(cmd);

    /* unknown numbers */
    v[0] = 0;
    v[1] = 1;
    CHECK(!cmd_decodes("uu", v));
    v[0] = 6;
    CHECK(!cmd_decodes("uu", v));
    v[0] = 99;
    CHECK(!cmd_decodes("uu", v));
    v[0] = (1ULL << 32) + RBTRACE_CMD_DETACH;
    CHECK(!cmd_decodes("uu", v));
    v[0] = 1;
    CHECK(!cmd_decodes("nu", v));
    v[0] = RBTRACE_CMD_DETACH;
    CHECK(cmd_decodes("uu", v));
    CHECK(!cmd_decodes("fu", v));
    CHECK(!cmd_decodes("un", v));
    v[1] = 1ULL << 32; /* client_pid beyond 32 bits */
    CHECK(!cmd_decodes("uu", v));
    v[1] = 5;
    v[2] = 1ULL << 32; /* protocol version beyond 32 bits */
    v[0] = RBTRACE_CMD_ATTACH;
    CHECK(!cmd_decodes("uuus", v));
    v[2] = 1;
    CHECK(cmd_decodes("uuus", v));
    CHECK(!cmd_decodes("uuum", v));
    /* selectors */
    v[0] = RBTRACE_CMD_METHODS;
    v[2] = RBTRACE_SELECTORS_MAX;
    CHECK(cmd_decodes("uua", v));
    v[2] = RBTRACE_SELECTORS_MAX + 1;
    CHECK(!cmd_decodes("uua", v));
    CHECK(!cmd_decodes("uus", v));
    CHECK(!cmd_decodes("uum", v));
}

/* EVAL's optional result_format: absent is INSPECT, present must be a
 * known format, as an unsigned integer. */
static void test_command_result_format(void)
{
    struct rbtrace_command *cmd = calloc(1, sizeof(*cmd));
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_zone zone;
    char err[RBTRACE_ERRLEN] = "";
    uint64_t v[6] = { RBTRACE_CMD_EVAL, 7, 1, 0, 5000, RBTRACE_RESULT_TEXT };

    if (!cmd) abort();
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_items(&pk, "uuusu", v); /* an older client's EVAL: five fields */
    msgpack_zone_init(&zone, 1024);
    cmd->result_format = 99;
    CHECK(rbtrace_command_decode(sb.data, sb.size, &zone, cmd, err) == RBTRACE_OK);
    CHECK(cmd->type == RBTRACE_CMD_EVAL && cmd->result_format == RBTRACE_RESULT_INSPECT);
    CHECK(cmd->timeout_ms == 5000);
    msgpack_zone_destroy(&zone);
    msgpack_sbuffer_destroy(&sb);

    CHECK(cmd_decodes("uuusuu", v));
    v[5] = RBTRACE_RESULT_INSPECT;
    CHECK(cmd_decodes("uuusuu", v));
    v[5] = RBTRACE_RESULT_FORMAT_MAX + 1; /* a format this side does not know */
    CHECK(!cmd_decodes("uuusuu", v));
    v[5] = 1ULL << 32;
    CHECK(!cmd_decodes("uuusuu", v));
    v[5] = 1;
    CHECK(!cmd_decodes("uuusun", v));
    CHECK(!cmd_decodes("uuusus", v));
    CHECK(!cmd_decodes("uuusuz", v));
    CHECK(!cmd_decodes("uuusuf", v));
    CHECK(cmd_decodes("uuusuuz", v)); /* and a field newer still is ignored */

    /* The encoder refuses to send a format that does not exist. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    memset(cmd, 0, sizeof(*cmd));
    cmd->type = RBTRACE_CMD_EVAL;
    cmd->text = str_of("1");
    cmd->result_format = RBTRACE_RESULT_FORMAT_MAX + 1;
    CHECK(rbtrace_command_encode(&pk, cmd) == RBTRACE_ERR);
    msgpack_sbuffer_destroy(&sb);
    free(cmd);
}

/* A METHODS command whose selector list holds a non-string. */
static void test_command_bad_selector(void)
{
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_zone zone;
    char err[RBTRACE_ERRLEN] = "";

    if (!cmd) abort();
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_uint32(&pk, RBTRACE_CMD_METHODS);
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_str_with_body(&pk, "A#a", 3);
    msgpack_pack_uint32(&pk, 7);
    msgpack_zone_init(&zone, 1024);
    CHECK(rbtrace_command_decode(sb.data, sb.size, &zone, cmd, err) == RBTRACE_ERR);
    CHECK(strstr(err, "selector 1") != NULL);
    msgpack_zone_destroy(&zone);
    msgpack_sbuffer_destroy(&sb);
    free(cmd);
}

/* ---- events ---- */

static int ev_decode(const msgpack_object *obj, struct rbtrace_event *ev)
{
    char err[RBTRACE_ERRLEN] = "";
    int rc = rbtrace_event_decode(obj, ev, err);

    if (rc != RBTRACE_OK) CHECK(err[0] != '\0');
    return rc;
}

/* Every field missing or mistyped fails; a trailing extra field is fine. */
static void ev_check_malformed(const msgpack_object *obj, struct rbtrace_event *ev)
{
    msgpack_object nil = obj_nil(), bad, *store;
    uint32_t i;

    for (i = 0; i < obj->via.array.size; i++) {
        msgpack_object prefix = *obj, wrong = obj_wrong_type(&obj->via.array.ptr[i]);
        prefix.via.array.size = i;
        CHECK(ev_decode(&prefix, ev) == RBTRACE_ERR);
        bad = obj_replace(obj, i, &nil, &store);
        CHECK(ev_decode(&bad, ev) == RBTRACE_ERR);
        free(store);
        bad = obj_replace(obj, i, &wrong, &store);
        CHECK(ev_decode(&bad, ev) == RBTRACE_ERR);
        free(store);
    }
    bad = obj_replace(obj, obj->via.array.size, &nil, &store);
    CHECK(ev_decode(&bad, ev) == RBTRACE_OK);
    free(store);
}

/* A truncated stream never yields an event. */
static void ev_check_truncated(const msgpack_sbuffer *sb)
{
    msgpack_unpacked result;
    size_t len;
    int none = 1;

    msgpack_unpacked_init(&result);
    for (len = 0; len < sb->size; len++) {
        msgpack_unpacker unp;
        if (!msgpack_unpacker_init(&unp, 64) || !msgpack_unpacker_reserve_buffer(&unp, len + 1))
            abort();
        memcpy(msgpack_unpacker_buffer(&unp), sb->data, len);
        msgpack_unpacker_buffer_consumed(&unp, len);
        none &= msgpack_unpacker_next(&unp, &result) == MSGPACK_UNPACK_CONTINUE;
        msgpack_unpacker_destroy(&unp);
    }
    msgpack_unpacked_destroy(&result);
    CHECK(none);
}

/* Unpacks sb (one event), decodes it into *ev, runs the malformed checks,
 * then decodes again so that *ev is valid; the strings live in *zone. */
static void ev_roundtrip(const msgpack_sbuffer *sb, msgpack_zone *zone, struct rbtrace_event *ev)
{
    msgpack_object obj;
    size_t off = 0;

    CHECK(msgpack_unpack(sb->data, sb->size, &off, zone, &obj) == MSGPACK_UNPACK_SUCCESS);
    CHECK(off == sb->size);
    ev_check_malformed(&obj, ev);
    ev_check_truncated(sb);
    CHECK(ev_decode(&obj, ev) == RBTRACE_OK);
}

struct ev_fixture {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_zone zone;
    struct rbtrace_event ev;
};

static void evf_begin(struct ev_fixture *f)
{
    msgpack_sbuffer_init(&f->sb);
    msgpack_packer_init(&f->pk, &f->sb, msgpack_sbuffer_write);
    msgpack_zone_init(&f->zone, 1024);
}

static void evf_decode(struct ev_fixture *f)
{
    ev_roundtrip(&f->sb, &f->zone, &f->ev);
}

static void evf_end(struct ev_fixture *f)
{
    msgpack_zone_destroy(&f->zone);
    msgpack_sbuffer_destroy(&f->sb);
}

static void test_event_attached(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_attached(&f->pk, 4194303, "3.3.0", 123456789ULL, 1700000000123456789ULL);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_ATTACHED);
    CHECK(f->ev.number == RBTRACE_PROTOCOL_VERSION);
    CHECK(f->ev.pid == 4194303);
    CHECK(str_eq(f->ev.text, "3.3.0"));
    CHECK(f->ev.clock_origin_ns == 123456789ULL);
    CHECK(f->ev.wall_origin_ns == 1700000000123456789ULL);
    CHECK(f->ev.features == 0); /* absent: none */
    evf_end(f);

    /* With features, optional: decoded where present, absent or nil means none;
     * of another type, the event is refused. */
    evf_begin(f);
    rbtrace_event_pack_attached_features(&f->pk, 12, "3.4.5", 1, 2, RBTRACE_FEATURE_GVL);
    {
        msgpack_object obj, nil = obj_nil(), bad, *store;
        size_t off = 0;

        CHECK(msgpack_unpack(f->sb.data, f->sb.size, &off, &f->zone, &obj) ==
              MSGPACK_UNPACK_SUCCESS);
        CHECK(ev_decode(&obj, &f->ev) == RBTRACE_OK);
        CHECK(f->ev.type == RBTRACE_EV_ATTACHED);
        CHECK(f->ev.pid == 12);
        CHECK(f->ev.wall_origin_ns == 2);
        CHECK(f->ev.features == RBTRACE_FEATURE_GVL);
        bad = obj_replace(&obj, 6, &nil, &store);
        CHECK(ev_decode(&bad, &f->ev) == RBTRACE_OK && f->ev.features == 0);
        free(store);
        nil = obj_wrong_type(&obj.via.array.ptr[6]);
        bad = obj_replace(&obj, 6, &nil, &store);
        CHECK(ev_decode(&bad, &f->ev) == RBTRACE_ERR);
        free(store);
    }
    evf_end(f);
}

/* GVL: packed, and written in place by the target's thread hook, the same bytes. */
static void test_event_gvl(struct ev_fixture *f)
{
    static const uint64_t values[] = {
        0, 127, 128, 65535, 65536, UINT32_MAX, (uint64_t)UINT32_MAX + 1, UINT64_MAX
    };
    char buf[RBTRACE_GVL_EVENT_MAX];
    size_t i, n;

    for (i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        evf_begin(f);
        rbtrace_event_pack_gvl(&f->pk, values[i], values[(i + 3) % 8], values[(i + 5) % 8]);
        n = rbtrace_event_encode_gvl(buf, values[i], values[(i + 3) % 8], values[(i + 5) % 8]);
        CHECK(n <= RBTRACE_GVL_EVENT_MAX);
        CHECK(n == f->sb.size && memcmp(buf, f->sb.data, n) == 0);
        evf_decode(f);
        CHECK(f->ev.type == RBTRACE_EV_GVL);
        CHECK(f->ev.thread_id == values[i]);
        CHECK(f->ev.time_ns == values[(i + 3) % 8]);
        CHECK(f->ev.duration_ns == values[(i + 5) % 8]);
        evf_end(f);
    }
}

/* ALLOC: packed, and written in place by the target's allocation hook, the
 * same bytes; ALLOC_SITE packed and decoded. */
static void test_event_alloc(struct ev_fixture *f)
{
    static const uint64_t values[] = {
        0, 127, 128, 65535, 65536, UINT32_MAX, (uint64_t)UINT32_MAX + 1, UINT64_MAX
    };
    char buf[RBTRACE_ALLOC_EVENT_MAX];
    size_t i, n;

    for (i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        evf_begin(f);
        rbtrace_event_pack_alloc(&f->pk, values[i], values[(i + 3) % 8]);
        n = rbtrace_event_encode_alloc(buf, values[i], values[(i + 3) % 8]);
        CHECK(n <= RBTRACE_ALLOC_EVENT_MAX);
        CHECK(n == f->sb.size && memcmp(buf, f->sb.data, n) == 0);
        evf_decode(f);
        CHECK(f->ev.type == RBTRACE_EV_ALLOC);
        CHECK(f->ev.thread_id == values[i]);
        CHECK(f->ev.count == values[(i + 3) % 8]);
        evf_end(f);
    }
    evf_begin(f);
    rbtrace_event_pack_alloc_site(&f->pk, 3972, "String", 6, "app/report.rb", 13, 8,
                                  "Report#render", 13);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_ALLOC_SITE);
    CHECK(f->ev.count == 3972 && f->ev.line == 8);
    CHECK(str_eq(f->ev.text, "String"));
    CHECK(str_eq(f->ev.text2, "app/report.rb"));
    CHECK(str_eq(f->ev.text3, "Report#render"));
    evf_end(f);
}

/* THREAD_NAME: a name, an empty one, and one of any bytes. */
static void test_event_thread_name(struct ev_fixture *f)
{
    static const char odd[] = "a\nb\x1b[31m\xff\0z";

    evf_begin(f);
    rbtrace_event_pack_thread_name(&f->pk, 140379806918336ULL, "puma srv tp 001", 15);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_THREAD_NAME);
    CHECK(f->ev.thread_id == 140379806918336ULL);
    CHECK(str_eq(f->ev.text, "puma srv tp 001"));
    evf_end(f);

    evf_begin(f);
    rbtrace_event_pack_thread_name(&f->pk, 7, "", 0);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_THREAD_NAME && f->ev.thread_id == 7 && f->ev.text.len == 0);
    evf_end(f);

    evf_begin(f);
    rbtrace_event_pack_thread_name(&f->pk, 7, odd, sizeof(odd) - 1);
    evf_decode(f);
    CHECK(f->ev.text.len == sizeof(odd) - 1 && memcmp(f->ev.text.ptr, odd, sizeof(odd) - 1) == 0);
    evf_end(f);
}

static void test_event_refused(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_refused(&f->pk, RBTRACE_REFUSED_BUSY, 999, "already traced");
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_REFUSED);
    CHECK(f->ev.number == RBTRACE_REFUSED_BUSY);
    CHECK(f->ev.pid == 999);
    CHECK(str_eq(f->ev.text, "already traced"));
    evf_end(f);
}

static void test_event_detached(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_detached(&f->pk);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_DETACHED);
    evf_end(f);
}

static void test_event_synced(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_synced(&f->pk, 1);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_SYNCED);
    CHECK(f->ev.number == 1);
    evf_end(f);
    evf_begin(f);
    rbtrace_event_pack_synced(&f->pk, 0);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_SYNCED);
    CHECK(f->ev.number == 0);
    evf_end(f);
}

static void test_event_method(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_method(&f->pk, 1ULL << 40, "String#gsub", 11);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_METHOD);
    CHECK(f->ev.method_id == 1ULL << 40);
    CHECK(str_eq(f->ev.text, "String#gsub"));
    evf_end(f);
}

static void test_event_call_return(struct ev_fixture *f)
{
    static const enum rbtrace_event_type types[] = { RBTRACE_EV_CALL, RBTRACE_EV_RETURN };
    size_t i;

    for (i = 0; i < 2; i++) {
        evf_begin(f);
        rbtrace_event_pack_call(&f->pk, types[i], UINT64_MAX, 1ULL << 62, 7);
        evf_decode(f);
        CHECK(f->ev.type == types[i]);
        CHECK(f->ev.thread_id == UINT64_MAX);
        CHECK(f->ev.time_ns == 1ULL << 62);
        CHECK(f->ev.method_id == 7);
        CHECK(f->ev.n_exprs == 0);
        evf_end(f);
    }
}

static void test_event_call_args(struct ev_fixture *f, uint32_t n)
{
    char exprs[RBTRACE_EXPRS_MAX][16], values[RBTRACE_EXPRS_MAX][16];
    uint32_t i;
    int ok = 1;

    evf_begin(f);
    rbtrace_event_pack_call_args(&f->pk, 3, 4, 5, n);
    for (i = 0; i < n; i++) {
        snprintf(exprs[i], sizeof(exprs[i]), "@x%u", i);
        snprintf(values[i], sizeof(values[i]), "\"v%u\"", i);
        rbtrace_event_pack_expr(&f->pk, exprs[i], strlen(exprs[i]), values[i], strlen(values[i]));
    }
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_CALL_ARGS);
    CHECK(f->ev.thread_id == 3 && f->ev.time_ns == 4 && f->ev.method_id == 5);
    CHECK(f->ev.n_exprs == n);
    for (i = 0; i < n && i < f->ev.n_exprs; i++)
        ok &= str_eq(f->ev.exprs[i], exprs[i]) && str_eq(f->ev.values[i], values[i]);
    CHECK(ok);
    evf_end(f);
}

static void test_event_lost(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_lost(&f->pk, 123456789012ULL);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_LOST);
    CHECK(f->ev.number == 123456789012ULL);
    evf_end(f);
}

static void test_event_eval_result(struct ev_fixture *f)
{
    static const char text[] = "RuntimeError: boom\n\t(eval):1:in `<main>'";
    char *big = malloc(100000);
    size_t i;

    if (!big) abort();
    evf_begin(f);
    rbtrace_event_pack_eval_result(&f->pk, 1, RBTRACE_EVAL_RAISED, text, strlen(text));
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_EVAL_RESULT);
    CHECK(f->ev.number == 1);
    CHECK(f->ev.status == RBTRACE_EVAL_RAISED);
    CHECK(str_eq(f->ev.text, text));
    evf_end(f);

    for (i = 0; i < 100000; i++) big[i] = (char)('0' + i % 10);
    evf_begin(f);
    rbtrace_event_pack_eval_result(&f->pk, UINT32_MAX, RBTRACE_EVAL_OK, big, 100000);
    evf_decode(f);
    CHECK(f->ev.number == UINT32_MAX && f->ev.status == RBTRACE_EVAL_OK);
    CHECK(f->ev.text.len == 100000 && !memcmp(f->ev.text.ptr, big, 100000));
    evf_end(f);
    free(big);
}

static void test_event_messages(struct ev_fixture *f)
{
    static const enum rbtrace_event_type types[] = { RBTRACE_EV_ERROR, RBTRACE_EV_NOTICE };
    size_t i;

    for (i = 0; i < 2; i++) {
        evf_begin(f);
        rbtrace_event_pack_message(&f->pk, types[i], "no such method", 14);
        evf_decode(f);
        CHECK(f->ev.type == types[i]);
        CHECK(str_eq(f->ev.text, "no such method"));
        evf_end(f);
    }
}

static void test_event_slow(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_slow(&f->pk, 0x7f0000001234ULL, 5000000000ULL, 42, 250000001ULL, 7);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_SLOW);
    CHECK(f->ev.thread_id == 0x7f0000001234ULL);
    CHECK(f->ev.time_ns == 5000000000ULL);
    CHECK(f->ev.method_id == 42);
    CHECK(f->ev.duration_ns == 250000001ULL);
    CHECK(f->ev.depth == 7);
    evf_end(f);
}

static void test_event_gc(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_gc(&f->pk, 9, 1000, 3000, 2000, 1000, "oldgen", "newobj");
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_GC);
    CHECK(f->ev.thread_id == 9 && f->ev.time_ns == 1000);
    CHECK(f->ev.duration_ns == 3000 && f->ev.mark_ns == 2000 && f->ev.sweep_ns == 1000);
    CHECK(str_eq(f->ev.text, "oldgen"));
    CHECK(str_eq(f->ev.text2, "newobj"));
    evf_end(f);
    evf_begin(f);
    rbtrace_event_pack_gc(&f->pk, 9, 1000, 0, 0, 0, "", "method");
    evf_decode(f);
    CHECK(f->ev.text.len == 0 && str_eq(f->ev.text2, "method"));
    evf_end(f);
}

static void test_event_raise(struct ev_fixture *f)
{
    evf_begin(f);
    rbtrace_event_pack_raise(&f->pk, 3, 77, "ArgumentError", 13, "bad value", 9, "app.rb:12", 9, 0);
    evf_decode(f);
    CHECK(f->ev.type == RBTRACE_EV_RAISE);
    CHECK(f->ev.thread_id == 3 && f->ev.time_ns == 77);
    CHECK(str_eq(f->ev.text, "ArgumentError"));
    CHECK(str_eq(f->ev.text2, "bad value"));
    CHECK(str_eq(f->ev.text3, "app.rb:12"));
    CHECK(f->ev.number == 0);
    evf_end(f);

    /* a re-raise of the same exception: how many times so far */
    evf_begin(f);
    rbtrace_event_pack_raise(&f->pk, 3, 78, "ArgumentError", 13, "bad value", 9, "mw.rb:4", 7, 3);
    evf_decode(f);
    CHECK(f->ev.number == 3 && str_eq(f->ev.text3, "mw.rb:4"));
    evf_end(f);
}

/* Decodes a hand-built object. */
static int ev_decodes(const msgpack_object *obj)
{
    struct rbtrace_event *ev = malloc(sizeof(*ev));
    int rc;

    if (!ev) abort();
    rc = ev_decode(obj, ev);
    free(ev);
    return rc == RBTRACE_OK;
}

static msgpack_object obj_array(msgpack_object *items, uint32_t n)
{
    msgpack_object o;
    memset(&o, 0, sizeof(o));
    o.type = MSGPACK_OBJECT_ARRAY;
    o.via.array.ptr = items;
    o.via.array.size = n;
    return o;
}

static void test_event_malformed(void)
{
    msgpack_object items[6], pair[3], pairs[RBTRACE_EXPRS_MAX + 1], o;
    uint32_t i;

    o = obj_nil();
    CHECK(!ev_decodes(&o));
    o = obj_uint(5);
    CHECK(!ev_decodes(&o));
    o = obj_str("x");
    CHECK(!ev_decodes(&o));
    o = obj_float(1.0);
    CHECK(!ev_decodes(&o));
    o = obj_array(items, 0);
    CHECK(!ev_decodes(&o));

    /* unknown numbers */
    items[0] = obj_uint(0);
    o = obj_array(items, 1);
    CHECK(!ev_decodes(&o));
    items[0] = obj_uint(12);
    CHECK(!ev_decodes(&o));
    items[0] = obj_uint(1ULL << 32 | RBTRACE_EV_DETACHED);
    CHECK(!ev_decodes(&o));
    items[0] = obj_neg(-3);
    CHECK(!ev_decodes(&o));
    items[0] = obj_uint(RBTRACE_EV_DETACHED);
    CHECK(ev_decodes(&o));

    /* EVAL_RESULT status beyond 32 bits */
    items[0] = obj_uint(RBTRACE_EV_EVAL_RESULT);
    items[1] = obj_uint(1);
    items[2] = obj_uint(1ULL << 32);
    items[3] = obj_str("x");
    o = obj_array(items, 4);
    CHECK(!ev_decodes(&o));

    /* CALL_ARGS: too many pairs, and pairs of the wrong shape */
    items[0] = obj_uint(RBTRACE_EV_CALL_ARGS);
    items[1] = obj_uint(1);
    items[2] = obj_uint(2);
    items[3] = obj_uint(3);
    pair[0] = obj_str("@x");
    pair[1] = obj_str("1");
    pair[2] = obj_str("extra");
    for (i = 0; i <= RBTRACE_EXPRS_MAX; i++) pairs[i] = obj_array(pair, 2);
    o = obj_array(items, 5);
    items[4] = obj_array(pairs, RBTRACE_EXPRS_MAX);
    CHECK(ev_decodes(&o));
    items[4] = obj_array(pairs, RBTRACE_EXPRS_MAX + 1);
    CHECK(!ev_decodes(&o));
    items[4] = obj_array(pairs, 1);
    pairs[0] = obj_array(pair, 1);
    CHECK(!ev_decodes(&o));
    pairs[0] = obj_array(pair, 3);
    CHECK(!ev_decodes(&o));
    pairs[0] = obj_str("@x=1");
    CHECK(!ev_decodes(&o));
    pair[1] = obj_uint(1);
    pairs[0] = obj_array(pair, 2);
    CHECK(!ev_decodes(&o));
    pair[0] = obj_nil();
    pair[1] = obj_str("1");
    CHECK(!ev_decodes(&o));
}

/* ---- the fast path for CALL and RETURN ---- */

/* Values at both ends of every msgpack uint width. */
static const uint64_t fast_values[] = { 0,
                                        1,
                                        127,
                                        128,
                                        255,
                                        256,
                                        65535,
                                        65536,
                                        0xffffffffULL,
                                        0x100000000ULL,
                                        0x7f3a12345678ULL,
                                        UINT64_MAX };
#define FAST_NVALUES (sizeof(fast_values) / sizeof(fast_values[0]))

/* An event with every field set to a mark: the fast path must leave the
 * fields CALL and RETURN do not use as they were. */
static void fast_mark(struct rbtrace_event *ev)
{
    memset(ev, 0xa5, sizeof(*ev));
}

static int fast_marks_kept(const struct rbtrace_event *ev)
{
    struct rbtrace_event mark;

    fast_mark(&mark);
    return ev->number == mark.number && ev->pid == mark.pid &&
        ev->clock_origin_ns == mark.clock_origin_ns && ev->status == mark.status &&
        ev->n_exprs == mark.n_exprs && !memcmp(&ev->text, &mark.text, sizeof(ev->text));
}

/* buf (one CALL or RETURN of len bytes) decodes to want, and every shorter
 * prefix of it asks for more bytes. */
static int fast_check_one(const char *buf, size_t len, const struct rbtrace_event *want)
{
    struct rbtrace_event *ev = malloc(sizeof(*ev));
    size_t used = 0, cut;
    int ok;

    if (!ev) abort();
    fast_mark(ev);
    ok = rbtrace_event_decode_call_bytes(buf, len, ev, &used) == 1 && used == len &&
        ev->type == want->type && ev->thread_id == want->thread_id &&
        ev->time_ns == want->time_ns && ev->method_id == want->method_id && fast_marks_kept(ev);
    for (cut = 0; cut < len; cut++) {
        used = 12345;
        ok &= rbtrace_event_decode_call_bytes(buf, cut, ev, &used) == -1 && used == 12345;
    }
    free(ev);
    return ok;
}

/* Every width of every field, as both encoders write it; bytes after the
 * event are not its own. */
static void test_fast_call_widths(void)
{
    static const enum rbtrace_event_type types[] = { RBTRACE_EV_CALL, RBTRACE_EV_RETURN };
    struct rbtrace_event want;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char buf[RBTRACE_CALL_EVENT_MAX + 4];
    size_t t, a, b, c, len;
    int ok = 1;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (t = 0; t < 2; t++)
        for (a = 0; a < FAST_NVALUES; a++)
            for (b = 0; b < FAST_NVALUES; b++)
                for (c = 0; c < FAST_NVALUES; c++) {
                    memset(&want, 0, sizeof(want));
                    want.type = types[t];
                    want.thread_id = fast_values[a];
                    want.time_ns = fast_values[b];
                    want.method_id = fast_values[c];
                    msgpack_sbuffer_clear(&sb);
                    rbtrace_event_pack_call(&pk, want.type, want.thread_id, want.time_ns,
                                            want.method_id);
                    len = rbtrace_event_encode_call(buf, want.type, want.thread_id, want.time_ns,
                                                    want.method_id);
                    ok &= len == sb.size && !memcmp(buf, sb.data, len);
                    ok &= fast_check_one(sb.data, sb.size, &want);
                    memcpy(buf + len, "\x92\x08\x01\x00", 4); /* a LOST after it */
                    ok &= fast_check_one(buf, len, &want);
                    {
                        struct rbtrace_event ev;
                        size_t used = 0;
                        ok &= rbtrace_event_decode_call_bytes(buf, len + 4, &ev, &used) == 1 &&
                            used == len;
                    }
                }
    CHECK(ok);
    msgpack_sbuffer_destroy(&sb);
}

/* CALL_NEXT and RETURN_NEXT: every width of both fields, as both
 * encoders write them; the fast path takes them as they are (thread 0). */
static void test_fast_call_next_widths(void)
{
    static const enum rbtrace_event_type types[] = { RBTRACE_EV_CALL_NEXT, RBTRACE_EV_RETURN_NEXT };
    struct rbtrace_event want;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char buf[RBTRACE_CALL_EVENT_MAX + 4];
    size_t t, b, c, len;
    int ok = 1;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    for (t = 0; t < 2; t++)
        for (b = 0; b < FAST_NVALUES; b++)
            for (c = 0; c < FAST_NVALUES; c++) {
                memset(&want, 0, sizeof(want));
                want.type = types[t];
                want.time_ns = fast_values[b];
                want.method_id = fast_values[c];
                msgpack_sbuffer_clear(&sb);
                rbtrace_event_pack_call_next(&pk, want.type, want.time_ns, want.method_id);
                len = rbtrace_event_encode_call_next(buf, want.type, want.time_ns, want.method_id);
                ok &= len == sb.size && len <= RBTRACE_CALL_EVENT_MAX && !memcmp(buf, sb.data, len);
                ok &= fast_check_one(sb.data, sb.size, &want);
                memcpy(buf + len, "\x92\x08\x01\x00", 4); /* a LOST after it */
                ok &= fast_check_one(buf, len, &want);
            }
    CHECK(ok);
    msgpack_sbuffer_destroy(&sb);
}

/* The chained encoder against the client's resolution: whatever the
 * encoder chose, the client gets the thread and time back; _NEXT only
 * after a call event of the same thread, and never for a time before it. */
static void test_call_chain(void)
{
    static const struct {
        uint64_t thread, time;
        int next;
    } steps[] = {
        { 7, 1000, 0 },             /* first: in full */
        { 7, 1000, 1 },             /* same thread, same time */
        { 7, 1127, 1 },             /* delta 127: one byte */
        { 7, 1000000000000ull, 1 }, /* delta wider than 32 bits */
        { 8, 1000000000001ull, 0 }, /* another thread: in full */
        { 8, 999, 0 },              /* back in time (another CPU's stamp): in full */
        { 8, 1000, 1 },
        { 7, UINT64_MAX, 0 },
        { 7, UINT64_MAX, 1 },
    };
    struct rbtrace_call_chain enc, dec;
    struct rbtrace_event *ev = malloc(sizeof(*ev));
    char buf[RBTRACE_CALL_EVENT_MAX], err[RBTRACE_ERRLEN];
    size_t i, len, used;

    if (!ev) abort();
    memset(&enc, 0, sizeof(enc));
    memset(&dec, 0, sizeof(dec));
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        enum rbtrace_event_type type = i % 2 ? RBTRACE_EV_RETURN : RBTRACE_EV_CALL;

        len = rbtrace_event_encode_call_chained(buf, &enc, type, steps[i].thread, steps[i].time,
                                                300 + i);
        rbtrace_call_chain_note(&enc, steps[i].thread, steps[i].time);
        CHECK(rbtrace_event_decode_call_bytes(buf, len, ev, &used) == 1 && used == len);
        CHECK((ev->type == RBTRACE_EV_CALL_NEXT || ev->type == RBTRACE_EV_RETURN_NEXT) ==
              steps[i].next);
        if (steps[i].next) CHECK(len <= 1 + 1 + 9 + 3);
        CHECK(rbtrace_call_chain_resolve(&dec, ev, err) == RBTRACE_OK);
        CHECK(ev->type == type && ev->thread_id == steps[i].thread &&
              ev->time_ns == steps[i].time && ev->method_id == 300 + i);
    }
    /* A CALL_ARGS and a LOST between: CALL_ARGS moves the chain, LOST does not. */
    memset(ev, 0, sizeof(*ev));
    ev->type = RBTRACE_EV_CALL_ARGS;
    ev->thread_id = 5;
    ev->time_ns = 50;
    CHECK(rbtrace_call_chain_resolve(&dec, ev, err) == RBTRACE_OK && dec.thread_id == 5 &&
          dec.time_ns == 50);
    ev->type = RBTRACE_EV_LOST;
    ev->thread_id = 6;
    ev->time_ns = 60;
    CHECK(rbtrace_call_chain_resolve(&dec, ev, err) == RBTRACE_OK && dec.thread_id == 5 &&
          dec.time_ns == 50 && ev->type == RBTRACE_EV_LOST);
    /* Refused: a _NEXT past 2^64 ns, and one before any call event. */
    memset(ev, 0, sizeof(*ev));
    ev->type = RBTRACE_EV_RETURN_NEXT;
    ev->time_ns = UINT64_MAX - 49;
    err[0] = '\0';
    CHECK(rbtrace_call_chain_resolve(&dec, ev, err) == RBTRACE_ERR && strstr(err, "2^64"));
    ev->time_ns = UINT64_MAX - 50;
    CHECK(rbtrace_call_chain_resolve(&dec, ev, err) == RBTRACE_OK && ev->time_ns == UINT64_MAX);
    memset(&dec, 0, sizeof(dec));
    ev->type = RBTRACE_EV_CALL_NEXT;
    ev->time_ns = 1;
    err[0] = '\0';
    CHECK(rbtrace_call_chain_resolve(&dec, ev, err) == RBTRACE_ERR &&
          strstr(err, "before any call"));
    free(ev);
}

/* A peer may pack a field wider than it needs: the value is the same. */
static void test_fast_call_wide_fields(void)
{
    struct rbtrace_event want;
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_uint32(&pk, RBTRACE_EV_RETURN);
    msgpack_pack_fix_uint64(&pk, 3);
    msgpack_pack_fix_uint16(&pk, 4);
    msgpack_pack_fix_uint8(&pk, 5);
    memset(&want, 0, sizeof(want));
    want.type = RBTRACE_EV_RETURN;
    want.thread_id = 3;
    want.time_ns = 4;
    want.method_id = 5;
    CHECK(fast_check_one(sb.data, sb.size, &want));
    msgpack_sbuffer_destroy(&sb);
}

/* The fast path's answer for what pack wrote. */
static int fast_rc_of(void (*pack)(msgpack_packer *))
{
    struct rbtrace_event ev;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t used = 0;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack(&pk);
    rc = rbtrace_event_decode_call_bytes(sb.data, sb.size, &ev, &used);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static void fast_attached(msgpack_packer *pk)
{
    rbtrace_event_pack_attached(pk, 1, "3.3.0", 2, 3);
}
static void fast_refused(msgpack_packer *pk)
{
    rbtrace_event_pack_refused(pk, RBTRACE_REFUSED_BUSY, 4, "busy");
}
static void fast_detached(msgpack_packer *pk)
{
    rbtrace_event_pack_detached(pk);
}
static void fast_method(msgpack_packer *pk)
{
    rbtrace_event_pack_method(pk, 5, "A#a", 3);
}
static void fast_lost(msgpack_packer *pk)
{
    rbtrace_event_pack_lost(pk, 6);
}
static void fast_error(msgpack_packer *pk)
{
    rbtrace_event_pack_message(pk, RBTRACE_EV_ERROR, "e", 1);
}
static void fast_notice(msgpack_packer *pk)
{
    rbtrace_event_pack_message(pk, RBTRACE_EV_NOTICE, "n", 1);
}

static void fast_eval_result(msgpack_packer *pk)
{
    rbtrace_event_pack_eval_result(pk, 1, RBTRACE_EVAL_OK, "42", 2);
}

static void fast_call_args(msgpack_packer *pk)
{
    rbtrace_event_pack_call_args(pk, 1, 2, 3, 1);
    rbtrace_event_pack_expr(pk, "self", 4, "1", 1);
}

/* [5, 1, 2, 3, nil]: a CALL with a field a newer peer added. */
static void fast_call_extra(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 5);
    msgpack_pack_uint32(pk, RBTRACE_EV_CALL);
    msgpack_pack_uint32(pk, 1);
    msgpack_pack_uint32(pk, 2);
    msgpack_pack_uint32(pk, 3);
    msgpack_pack_nil(pk);
}

static void fast_type_wide(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_fix_uint8(pk, RBTRACE_EV_CALL);
    msgpack_pack_uint32(pk, 1);
    msgpack_pack_uint32(pk, 2);
    msgpack_pack_uint32(pk, 3);
}

static void fast_type_other(msgpack_packer *pk)
{
    rbtrace_event_pack_call(pk, RBTRACE_EV_CALL_ARGS, 1, 2, 3);
}

static void fast_neg_field(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint32(pk, RBTRACE_EV_CALL);
    msgpack_pack_uint32(pk, 1);
    msgpack_pack_int64(pk, -2);
    msgpack_pack_uint32(pk, 3);
}

static void fast_str_field(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint32(pk, RBTRACE_EV_RETURN);
    msgpack_pack_uint32(pk, 1);
    msgpack_pack_uint32(pk, 2);
    msgpack_pack_str_with_body(pk, "3", 1);
}

static void fast_nil_field(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 4);
    msgpack_pack_uint32(pk, RBTRACE_EV_RETURN);
    msgpack_pack_nil(pk);
    msgpack_pack_uint32(pk, 2);
    msgpack_pack_uint32(pk, 3);
}

static void fast_not_array(msgpack_packer *pk)
{
    msgpack_pack_uint32(pk, RBTRACE_EV_CALL);
}

/* Everything that is not a CALL or RETURN in encode_call's form: 0, for
 * rbtrace_event_decode to judge. */
static void test_fast_call_others(void)
{
    static void (*const packs[])(
        msgpack_packer *) = { fast_attached,  fast_refused,    fast_detached,  fast_method,
                              fast_lost,      fast_error,      fast_notice,    fast_eval_result,
                              fast_call_args, fast_call_extra, fast_type_wide, fast_type_other,
                              fast_neg_field, fast_str_field,  fast_nil_field, fast_not_array };
    char lost[RBTRACE_LOST_EVENT_MAX];
    struct rbtrace_event ev;
    size_t i, used = 0, len;
    int ok = 1;

    for (i = 0; i < sizeof(packs) / sizeof(packs[0]); i++) ok &= fast_rc_of(packs[i]) == 0;
    CHECK(ok);
    len = rbtrace_event_encode_lost(lost, 1ULL << 40);
    CHECK(rbtrace_event_decode_call_bytes(lost, len, &ev, &used) == 0);
    CHECK(rbtrace_event_decode_call_bytes(lost, 1, &ev, &used) == 0);
    CHECK(rbtrace_event_decode_call_bytes("\x94", 1, &ev, &used) == -1);
    CHECK(rbtrace_event_decode_call_bytes("", 0, &ev, &used) == -1);
}

/*
 * The fast path agrees with msgpack and rbtrace_event_decode on buf: 1 only
 * for what they decode as the same CALL or RETURN of the same length, -1
 * only for what msgpack finds incomplete.
 */
static int fast_agrees(const char *buf, size_t len, struct rbtrace_event *ev)
{
    struct rbtrace_event fast;
    char err[RBTRACE_ERRLEN];
    msgpack_zone zone;
    msgpack_object obj;
    size_t off = 0, used = 0;
    int rc = rbtrace_event_decode_call_bytes(buf, len, &fast, &used), unpacked, ok = 1;

    if (rc == 0) return 1;
    msgpack_zone_init(&zone, 256);
    unpacked = msgpack_unpack(buf, len, &off, &zone, &obj);
    if (rc < 0) {
        ok = unpacked == MSGPACK_UNPACK_CONTINUE;
    } else {
        ok = unpacked >= MSGPACK_UNPACK_EXTRA_BYTES && off == used &&
            rbtrace_event_decode(&obj, ev, err) == RBTRACE_OK && ev->type == fast.type &&
            ev->thread_id == fast.thread_id && ev->time_ns == fast.time_ns &&
            ev->method_id == fast.method_id;
    }
    msgpack_zone_destroy(&zone);
    return ok;
}

/* ---- random input ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* Decodes buf as a command and, if it unpacks, as an event: no crash. */
static int fuzz_fast_agrees = 1;

static void fuzz_one(const char *buf, size_t len, struct rbtrace_command *cmd,
                     struct rbtrace_event *ev)
{
    char err[RBTRACE_ERRLEN];
    msgpack_zone zone;
    msgpack_object obj;
    size_t off = 0;

    fuzz_fast_agrees &= fast_agrees(buf, len, ev);
    msgpack_zone_init(&zone, 256);
    rbtrace_command_decode(buf, len, &zone, cmd, err);
    msgpack_zone_destroy(&zone);
    msgpack_zone_init(&zone, 256);
    if (msgpack_unpack(buf, len, &off, &zone, &obj) >= MSGPACK_UNPACK_SUCCESS)
        rbtrace_event_decode(&obj, ev, err);
    msgpack_zone_destroy(&zone);
}

/* Keeps 32-bit container headers (array32, map32) out of random input:
 * see __asan_default_options; test_huge_array covers them. */
static char fuzz_tame(char c)
{
    unsigned char u = (unsigned char)c;
    return (char)(u == 0xdd ? 0xdc : u == 0xdf ? 0xde : u);
}

/* A few bytes that declare 2^31 elements (or a map of 65535 pairs, or a
 * nested claim): refused before msgpack allocates anything for them. */
static void test_huge_array(void)
{
    static const char huge[] = { (char)0xdd, (char)0x80, 0, 0, 0, 0x01 };
    static const char map16[] = { (char)0x93, 0x03, 0x01, (char)0xde, (char)0xff, (char)0xff };
    static const char nested[] = {
        (char)0x93, 0x03, 0x01, (char)0x91, (char)0xdc, 0x00, 0x10, 0x01
    };
    const char *bufs[] = { huge, map16, nested };
    size_t lens[] = { sizeof(huge), sizeof(map16), sizeof(nested) };
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    char err[RBTRACE_ERRLEN];
    msgpack_zone zone;
    size_t i;

    if (!cmd) abort();
    for (i = 0; i < 3; i++) {
        msgpack_zone_init(&zone, 256);
        CHECK(rbtrace_command_decode(bufs[i], lens[i], &zone, cmd, err) == RBTRACE_ERR);
        CHECK(strstr(err, "announces more than") != NULL);
        msgpack_zone_destroy(&zone);
    }
    free(cmd);
}

/* An empty string decodes with a pointer, never NULL (msgpack-c's). */
static void test_empty_string(void)
{
    static const char msg[] = { (char)0x92, 0x0a, (char)0xa0 };
    struct rbtrace_event *ev = malloc(sizeof(*ev));
    char err[RBTRACE_ERRLEN];
    msgpack_zone zone;
    msgpack_object obj;
    size_t off = 0;

    if (!ev) abort();
    msgpack_zone_init(&zone, 256);
    CHECK(msgpack_unpack(msg, sizeof(msg), &off, &zone, &obj) == MSGPACK_UNPACK_SUCCESS);
    CHECK(rbtrace_event_decode(&obj, ev, err) == RBTRACE_OK);
    CHECK(ev->text.len == 0 && ev->text.ptr != NULL);
    msgpack_zone_destroy(&zone);
    free(ev);
}

/* The scan finds a message's end, says PARTIAL while it is still coming,
 * and TOO_BIG as soon as its headers announce more than max bytes. */
static void test_scan(void)
{
    static const char call[] = { (char)0x94, 0x05, 0x01, 0x02, 0x03, 0x7f };
    static const char str8[] = { (char)0x92, 0x0a, (char)0xd9, 100, 'a', 'b' };
    static const char arr32[] = { (char)0xdd, (char)0xff, (char)0xff, (char)0xff, (char)0xff };
    static const char bad[] = { (char)0x92, (char)0xc1, 0x00 };
    size_t size = 0, n;

    CHECK(rbtrace_msgpack_scan(call, sizeof(call), 1024, &size) == RBTRACE_SCAN_WHOLE);
    CHECK(size == 5);
    for (n = 0; n < 5; n++)
        CHECK(rbtrace_msgpack_scan(call, n, 1024, &size) == RBTRACE_SCAN_PARTIAL);
    CHECK(rbtrace_msgpack_scan(call, 5, 4, &size) == RBTRACE_SCAN_TOO_BIG);
    CHECK(rbtrace_msgpack_scan(str8, sizeof(str8), 1024, &size) == RBTRACE_SCAN_PARTIAL);
    CHECK(rbtrace_msgpack_scan(str8, sizeof(str8), 100, &size) == RBTRACE_SCAN_TOO_BIG);
    CHECK(rbtrace_msgpack_scan(arr32, sizeof(arr32), 64u << 20, &size) == RBTRACE_SCAN_TOO_BIG);
    CHECK(rbtrace_msgpack_scan(arr32, 3, 64u << 20, &size) == RBTRACE_SCAN_PARTIAL);
    CHECK(rbtrace_msgpack_scan(arr32, 3, 3, &size) == RBTRACE_SCAN_TOO_BIG);
    CHECK(rbtrace_msgpack_scan(bad, sizeof(bad), 1024, &size) == RBTRACE_SCAN_INVALID);
}

static void test_fuzz(void)
{
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    struct rbtrace_event *ev = malloc(sizeof(*ev));
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char buf[96];
    int i;

    if (!cmd || !ev) abort();
    /* random bytes, biased to look like arrays of small ints and strings */
    for (i = 0; i < 50000; i++) {
        size_t len = rng() % sizeof(buf), k;
        for (k = 0; k < len; k++) {
            uint32_t r = rng();
            buf[k] = fuzz_tame((char)(r % 4 == 0       ? 0x90 + (r >> 8) % 8
                                          : r % 4 == 1 ? (r >> 8) % 16
                                                       : (r >> 8)));
        }
        fuzz_one(buf, len, cmd, ev);
    }
    /* random bytes after a CALL's or RETURN's first two: the fast path's */
    for (i = 0; i < 50000; i++) {
        size_t len = rng() % 32, k;
        for (k = 0; k < len; k++) {
            uint32_t r = rng();
            buf[k] = fuzz_tame((char)(r % 3 == 0 ? 0xcc + (r >> 8) % 4 : (r >> 8)));
        }
        if (len > 0) buf[0] = (char)0x94;
        if (len > 1) buf[1] = (char)(RBTRACE_EV_CALL + i % 2);
        fuzz_one(buf, len, cmd, ev);
    }
    CHECK(fuzz_fast_agrees);
    /* bit flips in valid messages */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rbtrace_event_pack_call_args(&pk, 1, 2, 3, 2);
    rbtrace_event_pack_expr(&pk, "self", 4, "\"hello\"", 7);
    rbtrace_event_pack_expr(&pk, "@test", 5, "123", 3);
    for (i = 0; i < 20000; i++) {
        char *copy = malloc(sb.size);
        if (!copy) abort();
        memcpy(copy, sb.data, sb.size);
        size_t at = rng() % sb.size;
        copy[at] = fuzz_tame((char)(copy[at] ^ (char)(1u << (rng() % 8))));
        fuzz_one(copy, sb.size, cmd, ev);
        free(copy);
    }
    msgpack_sbuffer_destroy(&sb);
    free(ev);
    free(cmd);
    CHECK(1);
}

int main(void)
{
    struct ev_fixture *f = malloc(sizeof(*f));

    if (!f) abort();
    test_commands();
    test_command_encode_refuses();
    test_command_malformed();
    test_command_result_format();
    test_command_bad_selector();
    test_event_attached(f);
    test_event_refused(f);
    test_event_detached(f);
    test_event_synced(f);
    test_event_method(f);
    test_event_call_return(f);
    test_event_call_args(f, 0);
    test_event_call_args(f, 2);
    test_event_call_args(f, RBTRACE_EXPRS_MAX);
    test_event_lost(f);
    test_event_eval_result(f);
    test_event_messages(f);
    test_event_slow(f);
    test_event_gc(f);
    test_event_raise(f);
    test_event_gvl(f);
    test_event_alloc(f);
    test_event_thread_name(f);
    test_event_malformed();
    test_fast_call_widths();
    test_fast_call_wide_fields();
    test_fast_call_next_widths();
    test_call_chain();
    test_fast_call_others();
    test_huge_array();
    test_scan();
    test_empty_string();
    test_fuzz();
    free(f);
    return check_report();
}
