/*
 * seeds.c - writes the fuzzers' seed corpora from the real encoders
 * (ext/rbtrace/codec.c): fuzz/corpus/command/ gets one file per command
 * as the client sends it, fuzz/corpus/event/ a few streams as a target
 * sends them (the option byte, then events). `rake fuzz:seeds` runs it;
 * the files are committed, with what the fuzzers found since.
 *
 * Usage: seeds CORPUS_DIR   (CORPUS_DIR/command and CORPUS_DIR/event exist)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec.h"

static const char *seeds_dir;

/* Writes sb's bytes (after prefix, if any) to DIR/kind/name. */
static int seeds_write(const char *kind, const char *name, const msgpack_sbuffer *sb, int prefix)
{
    char path[4096];
    unsigned char p = (unsigned char)prefix;
    FILE *f;
    int ok;

    snprintf(path, sizeof(path), "%s/%s/%s", seeds_dir, kind, name);
    f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "seeds: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    ok = (prefix < 0 || fwrite(&p, 1, 1, f) == 1) &&
        (sb->size == 0 || fwrite(sb->data, sb->size, 1, f) == 1);
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "seeds: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static struct rbtrace_str str_of(const char *s)
{
    struct rbtrace_str r = { s, (uint32_t)strlen(s) };
    return r;
}

static int seeds_command(const char *name, const struct rbtrace_command *cmd)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = rbtrace_command_encode(&pk, cmd) == RBTRACE_OK ? seeds_write("command", name, &sb, -1)
                                                        : -1;
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static int seeds_commands(void)
{
    static struct rbtrace_command c; /* large */
    int rc = 0;

    memset(&c, 0, sizeof(c));
    c.client_pid = 4242;
    c.type = RBTRACE_CMD_ATTACH;
    c.protocol_version = RBTRACE_PROTOCOL_VERSION;
    c.text = str_of("/tmp/rbtrace-4242-AbCdEf/sock");
    rc |= seeds_command("attach", &c);
    c.protocol_version = 99;
    rc |= seeds_command("attach-version-99", &c);
    c.protocol_version = 0;
    c.text = str_of("");
    c.type = RBTRACE_CMD_DETACH;
    rc |= seeds_command("detach", &c);
    c.type = RBTRACE_CMD_FIREHOSE;
    rc |= seeds_command("firehose", &c);
    c.type = RBTRACE_CMD_GC;
    rc |= seeds_command("gc", &c);
    c.type = RBTRACE_CMD_RAISE;
    rc |= seeds_command("raise", &c);
    c.type = RBTRACE_CMD_DEVMODE;
    rc |= seeds_command("devmode", &c);
    c.type = RBTRACE_CMD_RESUME;
    rc |= seeds_command("resume", &c);
    c.type = RBTRACE_CMD_GVL;
    rc |= seeds_command("gvl", &c);
    c.type = RBTRACE_CMD_ALLOC;
    c.sample = 16;
    rc |= seeds_command("alloc", &c);
    c.sample = 0;
    c.type = RBTRACE_CMD_THREAD_NAMES;
    rc |= seeds_command("thread_names", &c);
    c.type = RBTRACE_CMD_SYNC;
    rc |= seeds_command("sync", &c);
    c.type = RBTRACE_CMD_METHODS;
    c.n_selectors = 3;
    c.selectors[0] = str_of("String#gsub(self, @x)");
    c.selectors[1] = str_of("Dir.pwd");
    c.selectors[2] = str_of("sleep");
    rc |= seeds_command("methods", &c);
    c.type = RBTRACE_CMD_SLOW;
    c.threshold_ns = 250000000ULL;
    c.cpu = 1;
    rc |= seeds_command("slow-cpu", &c);
    c.n_selectors = 0;
    c.cpu = 0;
    c.threshold_ns = 1ULL << 40;
    rc |= seeds_command("slow-all", &c);
    c.type = RBTRACE_CMD_EVAL;
    c.eval_id = 7;
    c.timeout_ms = 10000;
    c.text = str_of("p(1 + 1)");
    c.result_format = RBTRACE_RESULT_INSPECT;
    rc |= seeds_command("eval", &c);
    c.text = str_of("RBTrace::Reports.memory");
    c.result_format = RBTRACE_RESULT_TEXT;
    rc |= seeds_command("eval-text", &c);
    return rc;
}

/* A whole session as a target sends it. */
static void seeds_session(msgpack_packer *pk)
{
    char fast[RBTRACE_CALL_EVENT_MAX];
    struct rbtrace_call_chain chain;
    size_t n;

    rbtrace_event_pack_attached_features(pk, 4241, "3.4.5", 123456789ULL, 1700000000123456789ULL,
                                         RBTRACE_FEATURE_GVL);
    rbtrace_event_pack_message(pk, RBTRACE_EV_NOTICE, "tracing with global VM hooks", 28);
    rbtrace_event_pack_method(pk, 1, "Greeter#greet", 13);
    rbtrace_event_pack_method(pk, 2, "String#gsub", 11);
    rbtrace_event_pack_call_args(pk, 140000000001ULL, 1000, 1, 2);
    rbtrace_event_pack_expr(pk, "self", 4, "\"hello\"", 7);
    rbtrace_event_pack_expr(pk, "@test", 5, "123", 3);
    n = rbtrace_event_encode_call(fast, RBTRACE_EV_CALL, 140000000001ULL, 2000, 2);
    msgpack_pack_str_body(pk, fast, n); /* raw bytes: the hot path's encoding */
    rbtrace_event_pack_call(pk, RBTRACE_EV_RETURN, 140000000001ULL, 19000, 2);
    rbtrace_event_pack_call_next(pk, RBTRACE_EV_CALL_NEXT, 400, 2);
    rbtrace_event_pack_call_next(pk, RBTRACE_EV_RETURN_NEXT, 30000, 2);
    chain.started = 1;
    chain.thread_id = 140000000001ULL;
    chain.time_ns = 49400;
    n = rbtrace_event_encode_call_chained(fast, &chain, RBTRACE_EV_RETURN, 140000000001ULL, 52000,
                                          1);
    msgpack_pack_str_body(pk, fast, n); /* a RETURN_NEXT, as the hot path encodes it */
    rbtrace_event_pack_call(pk, RBTRACE_EV_CALL, 7, UINT64_MAX - 5, 300);
    rbtrace_event_pack_lost(pk, 17);
    rbtrace_event_pack_call(pk, RBTRACE_EV_RETURN, 7, UINT64_MAX, 300);
    rbtrace_event_pack_slow(pk, 7, 5000, 1, 250000000ULL, 2);
    rbtrace_event_pack_gc(pk, 7, 6000, 812000, 600000, 212000, "oldgen", "newobj");
    rbtrace_event_pack_raise(pk, 7, 7000, "ArgumentError", 13, "bad value", 9, "app.rb:12", 9, 0);
    rbtrace_event_pack_gvl(pk, 7, 8000, 12345000);
    rbtrace_event_pack_alloc(pk, 7, 2487);
    rbtrace_event_pack_alloc_site(pk, 3972, "String", 6, "app/report.rb", 13, 8, "Report#render",
                                  13);
    rbtrace_event_pack_thread_name(pk, 7, "puma srv tp 001", 15);
    rbtrace_event_pack_thread_name(pk, 9, "a]b\n\x1b[31m", 9);
    rbtrace_event_pack_forget(pk, 32768);
    rbtrace_event_pack_eval_result(pk, 1, RBTRACE_EVAL_OK, "2", 1);
    rbtrace_event_pack_eval_result(pk, 2, RBTRACE_EVAL_RAISED, "NameError: x\n\tfrom -e:1", 23);
    rbtrace_event_pack_message(pk, RBTRACE_EV_ERROR, "malformed command: field 2", 26);
    rbtrace_event_pack_detached(pk);
}

/* A --profile session with -m and --slow (the formats keep samples and
 * spans): frames, samples (one with no list: its thread's last stack),
 * a thread named with an escape sequence, calls, a slow call, a GC. */
static void seeds_profile(msgpack_packer *pk)
{
    static const uint64_t stack[] = { 3, 2, 1 }, deeper[] = { 4, 3, 2, 1 };

    rbtrace_event_pack_attached_features(pk, 4241, "3.4.5", 123456789ULL, 1700000000123456789ULL,
                                         RBTRACE_FEATURE_GVL);
    rbtrace_event_pack_synced(pk, 1);
    rbtrace_event_pack_profile_frame(pk, 1, "<main>", 6, "app.rb", 6, 1);
    rbtrace_event_pack_profile_frame(pk, 2, "Work#run", 8, "app.rb", 6, 4);
    rbtrace_event_pack_profile_frame(pk, 3, "Work#spin", 9, "app.rb", 6, 9);
    rbtrace_event_pack_profile_frame(pk, 4, "x\x1b]0;\"q\\", 8, "", 0, 0);
    rbtrace_event_pack_thread_name(pk, 7, "spin\x1b[2J", 8);
    rbtrace_event_pack_profile_sample(pk, 7, 1000, RBTRACE_STATE_RUNNING, 1, stack, 3);
    rbtrace_event_pack_profile_sample(pk, 7, 11000, RBTRACE_STATE_GVL, 2, NULL, 0);
    rbtrace_event_pack_profile_sample(pk, 9, 11500, RBTRACE_STATE_BLOCKED, 1, deeper, 4);
    rbtrace_event_pack_profile_missed(pk, 3);
    rbtrace_event_pack_method(pk, 1, "Work#spin", 9);
    rbtrace_event_pack_call(pk, RBTRACE_EV_CALL, 7, 12000, 1);
    rbtrace_event_pack_call(pk, RBTRACE_EV_CALL, 7, 12500, 1);
    rbtrace_event_pack_call(pk, RBTRACE_EV_RETURN, 7, 13000, 1);
    rbtrace_event_pack_slow(pk, 7, 12000, 1, 9000000ULL, 0);
    rbtrace_event_pack_gc(pk, 7, 14000, 812000, 600000, 212000, "", "newobj");
    rbtrace_event_pack_raise(pk, 9, 15000, "KeyError", 8, "k", 1, "app.rb:3", 8, 0);
    rbtrace_event_pack_gvl(pk, 9, 16000, 12345000);
    rbtrace_event_pack_profile_sample(pk, 7, 21000, RBTRACE_STATE_GC, 1, stack, 3);
    rbtrace_event_pack_detached(pk);
}

static int seeds_events(void)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc = 0;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    seeds_session(&pk);
    rc |= seeds_write("event", "session", &sb, 0x00);
    rc |= seeds_write("event", "session-t-n-r2-chunk3", &sb, 0x01 | 0x02 | (2 << 2) | (2 << 4));
    msgpack_sbuffer_clear(&sb);

    seeds_profile(&pk);
    rc |= seeds_write("event", "profile-session", &sb, 0x00);
    msgpack_sbuffer_clear(&sb);

    rbtrace_event_pack_refused(&pk, RBTRACE_REFUSED_BUSY, 4243,
                               "already traced by rbtrace pid 4243");
    rc |= seeds_write("event", "refused", &sb, 0x10);
    msgpack_sbuffer_clear(&sb);

    /* every width of the fast path's integers */
    rbtrace_event_pack_call(&pk, RBTRACE_EV_CALL, 1, 200, 70000);
    rbtrace_event_pack_call(&pk, RBTRACE_EV_CALL, 5000000000ULL, 1ULL << 62, 3);
    rbtrace_event_pack_call(&pk, RBTRACE_EV_RETURN, 5000000000ULL, (1ULL << 62) + 9, 3);
    rbtrace_event_pack_call(&pk, RBTRACE_EV_RETURN, 1, 999999, 70000);
    rc |= seeds_write("event", "calls-wide", &sb, 0x70);
    msgpack_sbuffer_clear(&sb);

    /* _NEXT events: every width, then one past 2^64 ns */
    rbtrace_event_pack_call(&pk, RBTRACE_EV_CALL, 9, 1000, 1);
    rbtrace_event_pack_call_next(&pk, RBTRACE_EV_CALL_NEXT, 100, 200);
    rbtrace_event_pack_call_next(&pk, RBTRACE_EV_CALL_NEXT, 70000, 3);
    rbtrace_event_pack_call_next(&pk, RBTRACE_EV_RETURN_NEXT, 5000000000ULL, 3);
    rbtrace_event_pack_call_next(&pk, RBTRACE_EV_RETURN_NEXT, 1ULL << 62, 200);
    rbtrace_event_pack_call_next(&pk, RBTRACE_EV_RETURN_NEXT, UINT64_MAX, 1);
    rc |= seeds_write("event", "calls-next", &sb, 0x30);
    msgpack_sbuffer_clear(&sb);

    /* a _NEXT with no call before it */
    rbtrace_event_pack_call_next(&pk, RBTRACE_EV_CALL_NEXT, 5, 1);
    rc |= seeds_write("event", "call-next-first", &sb, 0x00);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seeds CORPUS_DIR\n");
        return 2;
    }
    seeds_dir = argv[1];
    if (seeds_commands() != 0 || seeds_events() != 0) return 1;
    return 0;
}
