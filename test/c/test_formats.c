/*
 * test_formats.c - the client's stream decoder (cli/stream.c) and its
 * formats (cli/formats/format*.c, calls.c, json.c) against exact expected text:
 * events encoded as the target encodes them, decoded by stream_next, fed
 * to each format, the output compared whole. Also the JSON escaper on the
 * app's worst bytes, and where a name splits into class and method.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "calls.h"
#include "check.h"
#include "cli.h"
#include "format.h"
#include "json.h"
#include "stream.h"

/* ---- json.c ---- */

static const char *jesc(const char *in, size_t n)
{
    static char out[1024];
    size_t len = json_escape(out, in, n);

    out[len] = '\0';
    return out;
}

#define JESC(lit) jesc((lit), sizeof(lit) - 1)

static void test_json_escape(void)
{
    char num[32];

    CHECK_STR(JESC("plain"), "plain");
    CHECK_STR(JESC("q\"b\\s"), "q\\\"b\\\\s");
    CHECK_STR(JESC("\n\t\r\b\x01\x1f\x7f"), "\\n\\t\\r\\u0008\\u0001\\u001f\\u007f");
    CHECK_STR(JESC("x\x1b]0;T\x07"), "x\\u001b]0;T\\u0007");
    CHECK_STR(JESC("h\xc3\xa9llo \xe6\x97\xa5"), "h\xc3\xa9llo \xe6\x97\xa5");
    CHECK_STR(JESC("c1 \xc2\x9b!"), "c1 \\u009b!"); /* CSI as C1 */
    CHECK_STR(JESC("bad \xff\xc3 \xc0\xaf"), "bad \\ufffd\\ufffd \\ufffd\\ufffd");
    CHECK_STR(JESC("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");            /* a surrogate */
    CHECK_STR(JESC("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd"); /* past U+10FFFF */
    CHECK_STR(JESC("cut \xe6\x97"), "cut \\ufffd\\ufffd");
    CHECK(json_escape(num, "", 0) == 0);
    CHECK(jesc("a\0b", 3)[1] == '\\' && !strcmp(jesc("a\0b", 3), "a\\u0000b"));
    num[json_us(num, 0)] = '\0';
    CHECK_STR(num, "0.000");
    num[json_us(num, 12345678)] = '\0';
    CHECK_STR(num, "12345.678");
    num[json_utoa(num, UINT64_MAX)] = '\0';
    CHECK_STR(num, "18446744073709551615");
}

static void split(const char *name, const char *want_class, const char *want_method)
{
    size_t class_len, method_off;
    char got[128];

    calls_split_name(name, strlen(name), &class_len, &method_off);
    snprintf(got, sizeof(got), "%.*s|%s", (int)class_len, name, name + method_off);
    snprintf(got + 64, 64, "%s|%s", want_class, want_method);
    CHECK_STR(got, got + 64);
}

static void test_split(void)
{
    split("Foo#bar", "Foo", "bar");
    split("Foo::Bar.baz?", "Foo::Bar", "baz?");
    split("Integer#+", "Integer", "+");
    split("Foo.==", "Foo", "==");
    split("#<Class:0x0001>#go", "#<Class:0x0001>", "go");
    split("#<Class:#<Foo:0x1>>.x", "#<Class:#<Foo:0x1>>", "x");
    split("go", "", "go");
}

/* ---- a trace through stream.c into a format ---- */

#define T0 1000000000ULL /* 1 s after the attach */
#define THREAD_A 0x7f0000001000ULL
#define THREAD_B 0x7f0000002000ULL

static void pack_to(msgpack_sbuffer *sb, void (*fn)(msgpack_packer *))
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    fn(&pk);
}

static void pack_names(msgpack_packer *pk)
{
    rbtrace_event_pack_method(pk, 1, "Foo#run", 7);
    rbtrace_event_pack_method(pk, 2, "Foo#step", 8);
    rbtrace_event_pack_method(pk, 3, "Odd#q\"\xff", 7);
}

static void pack_gc_raise(msgpack_packer *pk)
{
    rbtrace_event_pack_gc(pk, THREAD_A, T0 + 5000, 2000, 1500, 500, "", "newobj");
    rbtrace_event_pack_raise(pk, THREAD_B, T0 + 6000, "ArgumentError", 13, "bad\n", 4, "a.rb:3", 6,
                             0);
}

static void pack_lost(msgpack_packer *pk)
{
    rbtrace_event_pack_lost(pk, 7);
}

/*
 * The trace: on thread A, Foo#run { Foo#step { } Foo#step { } } (the
 * second step's events chained: CALL_NEXT, RETURN_NEXT); a GC; on thread B
 * Odd#q"\xff open, a raise, then 7 events lost; thread A's Foo#run open at
 * the end. Returns the bytes (malloc'd) and their length.
 */
static char *trace_bytes(size_t *len)
{
    struct rbtrace_call_chain chain;
    msgpack_sbuffer sb;
    char ev[RBTRACE_CALL_EVENT_MAX];
    size_t n;
    static const struct {
        enum rbtrace_event_type type;
        uint64_t thread, t, m;
    } calls[] = {
        { RBTRACE_EV_CALL, THREAD_A, T0, 1 },          { RBTRACE_EV_CALL, THREAD_A, T0 + 1000, 2 },
        { RBTRACE_EV_RETURN, THREAD_A, T0 + 3000, 2 }, { RBTRACE_EV_CALL, THREAD_A, T0 + 3500, 2 },
        { RBTRACE_EV_RETURN, THREAD_A, T0 + 4000, 2 }, { RBTRACE_EV_CALL, THREAD_B, T0 + 4500, 3 },
    };
    size_t i;

    memset(&chain, 0, sizeof(chain));
    msgpack_sbuffer_init(&sb);
    pack_to(&sb, pack_names);
    for (i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        n = rbtrace_event_encode_call_chained(ev, &chain, calls[i].type, calls[i].thread,
                                              calls[i].t, calls[i].m);
        rbtrace_call_chain_note(&chain, calls[i].thread, calls[i].t);
        msgpack_sbuffer_write(&sb, ev, n);
    }
    pack_to(&sb, pack_gc_raise);
    pack_to(&sb, pack_lost);
    *len = sb.size;
    return sb.data; /* the caller frees it */
}

/* The trace decoded (fed a byte at a time) and written in kind's format. */
static char *render_trace(enum options_format kind)
{
    struct format_opts opts;
    struct format *f;
    struct stream s;
    char *out = NULL, *bytes;
    size_t out_len = 0, len, head = 0, tail = 0, used;
    FILE *mem = open_memstream(&out, &out_len);

    memset(&opts, 0, sizeof(opts));
    opts.pid = 4242;
    opts.text.prefix = 2;
    bytes = trace_bytes(&len);
    if (!mem || stream_init(&s) != CLI_OK || format_open(kind, mem, &opts, &f) != CLI_OK) exit(2);
    format_set_wall_origin(f, 1700000000000000000ULL);
    while (tail < len) {
        tail++;
        for (;;) {
            enum stream_result rc = stream_next(&s, bytes + head, tail - head, &used);
            if (rc == STREAM_PARTIAL) break;
            CHECK(rc == STREAM_EVENT);
            if (rc != STREAM_EVENT) break;
            CHECK(format_event(f, s.ev) == CLI_OK);
            head += used;
        }
    }
    CHECK(head == len);
    CHECK(format_finish(f) == CLI_OK);
    CHECK(f->received == 8 && f->lost == 7);
    format_close(f);
    stream_free(&s);
    free(bytes);
    fclose(mem);
    return out;
}

static void test_json(void)
{
    char *out = render_trace(OPTIONS_FORMAT_JSON);

    CHECK_STR(
        out,
        "{\"kind\":\"attach\",\"pid\":4242,\"wall_time\":1700000000000000000}\n"
        "{\"kind\":\"thread\",\"thread\":1,\"thread_id\":139637976731648}\n"
        "{\"kind\":\"call\",\"thread\":1,\"name\":\"Foo#step\",\"class\":\"Foo\",\"method\":"
        "\"step\","
        "\"start\":1000001000,\"end\":1000003000,\"duration\":2000,\"self\":2000,\"depth\":1}\n"
        "{\"kind\":\"call\",\"thread\":1,\"name\":\"Foo#step\",\"class\":\"Foo\",\"method\":"
        "\"step\","
        "\"start\":1000003500,\"end\":1000004000,\"duration\":500,\"self\":500,\"depth\":1}\n"
        "{\"kind\":\"thread\",\"thread\":2,\"thread_id\":139637976735744}\n"
        "{\"kind\":\"gc\",\"thread\":1,\"start\":1000005000,\"end\":1000007000,\"duration\":2000,"
        "\"major\":false,\"major_by\":null,\"gc_by\":\"newobj\",\"mark\":1500,\"sweep\":500}\n"
        "{\"kind\":\"raise\",\"thread\":2,\"time\":1000006000,\"exception\":\"ArgumentError\","
        "\"message\":\"bad\\n\",\"at\":\"a.rb:3\",\"reraise\":0}\n"
        "{\"kind\":\"lost\",\"time\":1000007000,\"count\":7}\n");
    free(out);
}

static void test_chrome(void)
{
    char *out = render_trace(OPTIONS_FORMAT_CHROME);

    CHECK_STR(
        out,
        "{\"traceEvents\":[\n"
        "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":4242,\"tid\":0,\"args\":{\"name\":\"ruby "
        "4242\"}},\n"
        "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":4242,\"tid\":1,\"args\":{\"name\":\"thread "
        "1\"}},\n"
        "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":4242,\"tid\":1,\"args\":{\"sort_"
        "index\":1}},\n"
        "{\"ph\":\"X\",\"cat\":\"call\",\"name\":\"Foo#step\",\"pid\":4242,\"tid\":1,\"ts\":"
        "1000001.000,\"dur\":2.000},\n"
        "{\"ph\":\"X\",\"cat\":\"call\",\"name\":\"Foo#step\",\"pid\":4242,\"tid\":1,\"ts\":"
        "1000003.500,\"dur\":0.500},\n"
        "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":4242,\"tid\":2,\"args\":{\"name\":\"thread "
        "2\"}},\n"
        "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":4242,\"tid\":2,\"args\":{\"sort_"
        "index\":2}},\n"
        "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":4242,\"tid\":0,\"args\":{\"name\":\"GC\"}},"
        "\n"
        "{\"ph\":\"X\",\"cat\":\"gc\",\"name\":\"GC "
        "minor\",\"pid\":4242,\"tid\":0,\"ts\":1000005.000,\"dur\":2.000,"
        "\"args\":{\"major_by\":null,\"gc_by\":\"newobj\",\"mark_us\":1.500,\"sweep_us\":0.500}},\n"
        "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"raise\",\"name\":\"raise "
        "ArgumentError\",\"pid\":4242,\"tid\":2,"
        "\"ts\":1000006.000,\"args\":{\"message\":\"bad\\n\",\"at\":\"a.rb:3\",\"reraise\":0}},\n"
        "{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"lost\",\"name\":\"7 events "
        "lost\",\"pid\":4242,\"tid\":0,"
        "\"ts\":1000007.000,\"args\":{\"count\":7}}\n"
        "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"rbtrace " RBTRACE_VERSION
        "\"}}\n");
    free(out);
}

static void test_folded(void)
{
    char *out = render_trace(OPTIONS_FORMAT_FOLDED);

    /* the lost events dropped the open calls: Foo#run has no self time */
    CHECK_STR(out, "Foo#run 0\nFoo#run;Foo#step 3\nOdd#q\"\\xff 0\n");
    free(out);
}

static void test_summary(void)
{
    char *out = render_trace(OPTIONS_FORMAT_SUMMARY);

    /* Foo#step: 2 calls, 2000 and 500 ns; the raise came on thread 2
     * inside Odd#q", whose call never returned (no row) */
    CHECK_STR(out,
              "*** 2 threads, 0.000007 s traced, 7 events lost\n"
              "method                                        calls      total       self       mean"
              "        p50        p99        max  raises\n"
              "Foo#step                                          2   0.000003   0.000003   0.000001"
              "   0.000001   0.000002   0.000002       0\n");
    free(out);
}

static void test_text(void)
{
    char *out = render_trace(OPTIONS_FORMAT_TEXT);

    CHECK_STR(out,
              "Foo#run\n"
              "  Foo#step <0.000002>\n"
              "  Foo#step <0.000000>\n" /* 500 ns: printf's %.6f rounds it down */
              "[t2] Odd#q\"\\xff\n"
              "[t1]   GC minor by newobj <0.000002> (mark 0.000002, sweep 0.000000)\n"
              "[t2]   raise ArgumentError: bad\\n at a.rb:3\n"
              "*** 7 events lost\n");
    free(out);
}

/* Bytes that are no event stop the stream; an event it cannot resolve is
 * skipped with a reason. */
static void test_stream_errors(void)
{
    struct stream s;
    char ev[RBTRACE_CALL_EVENT_MAX], bad = (char)0xc1;
    size_t used = 99, n;

    if (stream_init(&s) != CLI_OK) exit(2);
    CHECK(stream_next(&s, &bad, 1, &used) == STREAM_BROKEN && used == 0);
    CHECK_STR(s.errstr, "invalid msgpack");
    n = rbtrace_event_encode_call_next(ev, RBTRACE_EV_RETURN_NEXT, 5, 1);
    CHECK(stream_next(&s, ev, n, &used) == STREAM_BAD_EVENT && used == n);
    CHECK(s.errstr[0] != '\0');
    CHECK(stream_next(&s, ev, n - 1, &used) == STREAM_PARTIAL && used == 0);
    CHECK(stream_next(&s, ev, 0, &used) == STREAM_PARTIAL);
    stream_free(&s);
}

/* One event, as the stream would hand it over. */
static void feed(struct format *f, enum rbtrace_event_type type, uint64_t thread, uint64_t time_ns,
                 uint64_t id_or_wait, const char *name)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.thread_id = thread;
    ev.time_ns = time_ns;
    if (type == RBTRACE_EV_GVL) ev.duration_ns = id_or_wait;
    else if (type == RBTRACE_EV_ALLOC) ev.count = id_or_wait;
    else ev.method_id = id_or_wait;
    if (name) {
        ev.text.ptr = name;
        ev.text.len = (uint32_t)strlen(name);
    }
    CHECK(format_event(f, &ev) == CLI_OK);
}

/* --gvl in json: a call's "gvl" holds its callees' waits and those of the
 * calls that lost their returns; waits over the threshold get a line; a
 * short wait of an unseen thread adds no thread. */
static void test_json_gvl(void)
{
    struct format_opts opts;
    struct format *f;
    char *out = NULL;
    size_t out_len = 0;
    FILE *mem = open_memstream(&out, &out_len);

    memset(&opts, 0, sizeof(opts));
    opts.pid = 4242;
    opts.text.gvl = 1;
    opts.text.gvl_threshold_ns = 1000000;
    if (!mem || format_open(OPTIONS_FORMAT_JSON, mem, &opts, &f) != CLI_OK) exit(2);
    feed(f, RBTRACE_EV_METHOD, 0, 0, 1, "Foo#run");
    feed(f, RBTRACE_EV_METHOD, 0, 0, 2, "Foo#step");
    feed(f, RBTRACE_EV_GVL, 9, 10, 0, NULL); /* the target's answer */
    feed(f, RBTRACE_EV_CALL, 7, 100, 1, NULL);
    feed(f, RBTRACE_EV_CALL, 7, 200, 2, NULL);
    feed(f, RBTRACE_EV_GVL, 7, 300, 2000000, NULL); /* long: a line */
    feed(f, RBTRACE_EV_RETURN, 7, 2400000, 2, NULL);
    feed(f, RBTRACE_EV_CALL, 7, 2500000, 2, NULL);
    feed(f, RBTRACE_EV_GVL, 7, 2600000, 500, NULL); /* short, in a call that loses its return */
    feed(f, RBTRACE_EV_RETURN, 7, 3000000, 1, NULL);
    CHECK(format_finish(f) == CLI_OK);
    format_close(f);
    fclose(mem);
    CHECK_STR(
        out,
        "{\"kind\":\"thread\",\"thread\":1,\"thread_id\":7}\n"
        "{\"kind\":\"gvl\",\"thread\":1,\"start\":300,\"end\":2000300,\"duration\":2000000}\n"
        "{\"kind\":\"call\",\"thread\":1,\"name\":\"Foo#step\",\"class\":\"Foo\",\"method\":"
        "\"step\","
        "\"start\":200,\"end\":2400000,\"duration\":2399800,\"self\":2399800,\"depth\":1,\"gvl\":"
        "2000000}\n"
        "{\"kind\":\"call\",\"thread\":1,\"name\":\"Foo#run\",\"class\":\"Foo\",\"method\":\"run\","
        "\"start\":100,\"end\":3000000,\"duration\":2999900,\"self\":600100,\"depth\":0,\"gvl\":"
        "2000500}\n");
    free(out);
}

/* --alloc: the events of a call Foo#run with a callee Foo#step that
 * allocate 5 (before the callee), 7 (in it) and 3 objects; 11 on another
 * thread with no call open, and 2 before any call, are no call's. */
static void feed_alloc(struct format *f)
{
    struct rbtrace_event site;

    feed(f, RBTRACE_EV_METHOD, 0, 0, 1, "Foo#run");
    feed(f, RBTRACE_EV_METHOD, 0, 0, 2, "Foo#step");
    feed(f, RBTRACE_EV_ALLOC, 7, 0, 2, NULL);
    feed(f, RBTRACE_EV_CALL, 7, 100, 1, NULL);
    feed(f, RBTRACE_EV_ALLOC, 7, 0, 5, NULL);
    feed(f, RBTRACE_EV_CALL, 7, 200, 2, NULL);
    feed(f, RBTRACE_EV_ALLOC, 8, 0, 11, NULL);
    feed(f, RBTRACE_EV_ALLOC, 7, 0, 7, NULL);
    feed(f, RBTRACE_EV_RETURN, 7, 300, 2, NULL);
    feed(f, RBTRACE_EV_ALLOC, 7, 0, 3, NULL);
    feed(f, RBTRACE_EV_RETURN, 7, 400, 1, NULL);
    memset(&site, 0, sizeof(site));
    site.type = RBTRACE_EV_ALLOC_SITE;
    site.count = 12;
    site.line = 4;
    site.text2.ptr = "a\x1b.rb"; /* the app's bytes: escaped */
    site.text2.len = 5;
    site.text3.ptr = "Foo#step";
    site.text3.len = 8;
    CHECK(format_event(f, &site) == CLI_OK);
}

/* --alloc in text, json and the summary: inclusive counts, the report. */
static void test_alloc_formats(void)
{
    struct format_opts opts;
    struct format *f;
    char *out = NULL;
    size_t out_len = 0;
    FILE *mem = open_memstream(&out, &out_len);

    memset(&opts, 0, sizeof(opts));
    opts.text.alloc = 1;
    opts.text.alloc_sample = 1;
    opts.text.no_duration = 1;
    opts.text.prefix = 2;
    if (!mem || format_open(OPTIONS_FORMAT_TEXT, mem, &opts, &f) != CLI_OK) exit(2);
    feed_alloc(f);
    CHECK(format_finish(f) == CLI_OK);
    format_close(f);
    fclose(mem);
    CHECK_STR(out,
              "Foo#run\n"
              "  Foo#step alloc 7\n"
              "Foo#run alloc 15\n"
              "\n"
              "*** allocations (--alloc-sample 1: every object counted)\n"
              "*** traced methods that allocated most (inside their calls, callees included):\n"
              "            15  Foo#run  (1 call)\n"
              "             7  Foo#step  (1 call)\n"
              "*** sites that allocated most:\n"
              "            12  (hidden)  a\\x1b.rb:4  in Foo#step\n");
    free(out);

    out = NULL;
    mem = open_memstream(&out, &out_len);
    opts.text.no_duration = 0;
    if (!mem || format_open(OPTIONS_FORMAT_JSON, mem, &opts, &f) != CLI_OK) exit(2);
    feed_alloc(f);
    CHECK(format_finish(f) == CLI_OK);
    format_close(f);
    fclose(mem);
    CHECK(
        strstr(
            out,
            "\"name\":\"Foo#step\",\"class\":\"Foo\",\"method\":\"step\",\"start\":200,\"end\":300,"
            "\"duration\":100,\"self\":100,\"depth\":1,\"alloc\":7}") != NULL);
    CHECK(strstr(out, "\"depth\":0,\"alloc\":15}") != NULL);
    CHECK(strstr(out,
                 "{\"kind\":\"alloc_site\",\"count\":12,\"class\":null,\"path\":\"a\\u001b.rb\","
                 "\"line\":4,\"label\":\"Foo#step\"}\n") != NULL);
    free(out);

    out = NULL;
    mem = open_memstream(&out, &out_len);
    if (!mem || format_open(OPTIONS_FORMAT_SUMMARY, mem, &opts, &f) != CLI_OK) exit(2);
    feed_alloc(f);
    CHECK(format_finish(f) == CLI_OK);
    format_close(f);
    fclose(mem);
    CHECK(strstr(out, "raises      alloc\n") != NULL);
    CHECK(strstr(out, "       0         15\n") != NULL);
    CHECK(strstr(out, "       0          7\n") != NULL);
    CHECK(strstr(out,
                 "*** sites that allocated most:\n            12  (hidden)  a\\x1b.rb:4  in "
                 "Foo#step\n") != NULL);
    free(out);
}

/* A RAISE on thread 1 at time_ns; reraise: the codec's number (0: a first raise). */
static void feed_raise(struct format *f, uint64_t time_ns, uint64_t reraise)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_RAISE;
    ev.thread_id = 1;
    ev.time_ns = time_ns;
    ev.number = reraise;
    ev.text.ptr = "E";
    ev.text.len = 1;
    CHECK(format_event(f, &ev) == CLI_OK);
}

/* The summary of what feed_fn feeds, with opts. */
static char *summary_of(const struct format_opts *opts, void (*feed_fn)(struct format *))
{
    struct format *f;
    char *out = NULL;
    size_t out_len = 0;
    FILE *mem = open_memstream(&out, &out_len);

    if (!mem || format_open(OPTIONS_FORMAT_SUMMARY, mem, opts, &f) != CLI_OK) exit(2);
    feed_fn(f);
    CHECK(format_finish(f) == CLI_OK);
    format_close(f);
    fclose(mem);
    return out;
}

#define LONG_NAME "ActiveRecord::ConnectionAdapters::AbstractAdapter#with_instrumenter"

/* An exception raised in Inner, re-raised in Outer and again in Top (rescue
 * => e; raise): one raise, Inner's; a name longer than the column. */
static void feed_reraises(struct format *f)
{
    feed(f, RBTRACE_EV_METHOD, 0, 0, 1, "Top#run");
    feed(f, RBTRACE_EV_METHOD, 0, 0, 2, LONG_NAME);
    feed(f, RBTRACE_EV_METHOD, 0, 0, 3, "Inner#go");
    feed(f, RBTRACE_EV_CALL, 1, 100, 1, NULL);
    feed(f, RBTRACE_EV_CALL, 1, 200, 2, NULL);
    feed(f, RBTRACE_EV_CALL, 1, 300, 3, NULL);
    feed_raise(f, 400, 0);
    feed(f, RBTRACE_EV_RETURN, 1, 500, 3, NULL);
    feed_raise(f, 600, 1);
    feed(f, RBTRACE_EV_RETURN, 1, 700, 2, NULL);
    feed_raise(f, 800, 2);
    feed(f, RBTRACE_EV_RETURN, 1, 900, 1, NULL);
}

/* The raises of name's row in a summary (its last column); -1 if none. */
static long summary_raises(const char *out, const char *name)
{
    const char *row = out, *nl, *last;

    for (; (nl = strchr(row, '\n')) != NULL; row = nl + 1) {
        if (strncmp(row, name, strlen(name)) != 0 || row[strlen(name)] != ' ') continue;
        for (last = nl; last > row && last[-1] != ' '; last--) {
        }
        return strtol(last, NULL, 10);
    }
    return -1;
}

/* --summary: a re-raise is not another raise; a name longer than the
 * method column widens it for every row, the columns stay aligned. */
static void test_summary_reraise_and_names(void)
{
    struct format_opts opts;
    char *out, *line, *nl;
    size_t width = 0;

    memset(&opts, 0, sizeof(opts));
    opts.text.prefix = 2;
    out = summary_of(&opts, feed_reraises);
    CHECK(summary_raises(out, "Inner#go") == 1);
    CHECK(summary_raises(out, LONG_NAME) == 0);
    CHECK(summary_raises(out, "Top#run") == 0);
    /* every line after the first (the header, the rows) equally long */
    line = strchr(out, '\n') + 1;
    for (; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        if (!width) width = (size_t)(nl - line);
        CHECK((size_t)(nl - line) == width);
    }
    CHECK(width == strlen(LONG_NAME) + 11 * 7 + 8); /* the name, 7 columns " %10s", " %7s" */
    free(out);
}

/* --gvl 5 alone: waits of threads 7 (10 and 20 ms) and 8 (1 ms: short,
 * of a thread never seen otherwise). */
static void feed_gvl_only(struct format *f)
{
    feed(f, RBTRACE_EV_GVL, 7, 1000000000, 10000000, NULL);
    feed(f, RBTRACE_EV_GVL, 8, 1100000000, 1000000, NULL);
    feed(f, RBTRACE_EV_GVL, 7, 2000000000, 20000000, NULL);
}

/* --summary --gvl without -m: the threads and span of the waits, and a
 * line of the waits longer than the threshold. */
static void test_summary_gvl(void)
{
    struct format_opts opts;
    char *out;

    memset(&opts, 0, sizeof(opts));
    opts.text.gvl = 1;
    opts.text.gvl_threshold_ns = 5000000;
    out = summary_of(&opts, feed_gvl_only);
    {
        char *table = strstr(out, "method ");

        CHECK(table != NULL);
        if (table) *table = '\0'; /* the lines before the table */
    }
    CHECK_STR(out,
              "*** 1 thread, 1.020000 s traced, 0 events lost\n"
              "*** GVL waits longer than 5 ms: 2, 0.030000 s in all, longest 0.020000 s\n");
    free(out);
}

/* A summary of one process's calls, dumped as multi.c's sessions dump it. */
static char *summary_dump_of(uint64_t wall_origin, int second)
{
    struct format_opts opts;
    struct format *f;
    char *out = NULL;
    size_t out_len = 0;
    FILE *mem = open_memstream(&out, &out_len);

    memset(&opts, 0, sizeof(opts));
    if (!mem || format_open(OPTIONS_FORMAT_SUMMARY, mem, &opts, &f) != CLI_OK) exit(2);
    format_set_wall_origin(f, wall_origin);
    if (!second) { /* Foo#a: 1 and 3 ms, on one thread */
        feed(f, RBTRACE_EV_METHOD, 0, 0, 1, "Foo#a");
        feed(f, RBTRACE_EV_CALL, 7, 1000000, 1, NULL);
        feed(f, RBTRACE_EV_RETURN, 7, 2000000, 1, NULL);
        feed(f, RBTRACE_EV_CALL, 7, 3000000, 1, NULL);
        feed(f, RBTRACE_EV_RETURN, 7, 6000000, 1, NULL);
    } else { /* other ids: Foo#a 2 ms; Odd\xff 7 ms on a second thread */
        feed(f, RBTRACE_EV_METHOD, 0, 0, 5, "Foo#a");
        feed(f, RBTRACE_EV_METHOD, 0, 0, 6, "Odd\xff");
        feed(f, RBTRACE_EV_CALL, 7, 0, 5, NULL);
        feed(f, RBTRACE_EV_RETURN, 7, 2000000, 5, NULL);
        feed(f, RBTRACE_EV_CALL, 8, 2000000, 6, NULL);
        feed(f, RBTRACE_EV_RETURN, 8, 9000000, 6, NULL);
    }
    CHECK(format_summary_dump(f, mem) == CLI_OK);
    format_close(f);
    fclose(mem);
    return out;
}

/* Merges the dump that follows the table in text. */
static void merge_dump(struct format *all, char *text)
{
    char *dump = strstr(text, "rbtrace-summary 2\n");
    FILE *in = dump ? fmemopen(dump, strlen(dump), "r") : NULL;

    CHECK(in && format_summary_merge(all, in) == CLI_OK);
    if (in) fclose(in);
}

/* Two processes' dumps merged: rows matched by name, not id; the
 * histograms added (p50 of 1, 2 and 3 ms is 2 ms's bucket, 2.097151 ms);
 * the span from the first event of all to the last on the wall clock. */
static void test_summary_merge(void)
{
    const uint64_t wall = 1700000000000000000ULL;
    char *a = summary_dump_of(wall, 0), *b = summary_dump_of(wall + 10000000, 1);
    struct format_opts opts;
    struct format *all;
    char *out = NULL, bad[] = "rbtrace-summary 2\nrow 1 2 3 4 5 0 6z\n";
    size_t out_len = 0;
    FILE *mem = open_memstream(&out, &out_len), *in;

    memset(&opts, 0, sizeof(opts));
    if (!mem || format_open(OPTIONS_FORMAT_SUMMARY, mem, &opts, &all) != CLI_OK) exit(2);
    merge_dump(all, a);
    merge_dump(all, b);
    CHECK(format_finish(all) == CLI_OK);
    format_close(all);
    fclose(mem);
    CHECK_STR(
        out,
        "*** 2 processes, 3 threads, 0.018000 s traced, 0 events lost\n"
        "method                                        calls      total       self       mean"
        "        p50        p99        max  raises\n"
        "Odd\\xff                                           1   0.007000   0.007000   0.007000"
        "   0.007000   0.007000   0.007000       0\n"
        "Foo#a                                             3   0.006000   0.006000   0.002000"
        "   0.002097   0.003000   0.003000       0\n");
    free(out);
    free(a);
    free(b);

    if (format_open(OPTIONS_FORMAT_SUMMARY, stdout, &opts, &all) != CLI_OK) exit(2);
    in = fmemopen(bad, strlen(bad), "r");
    CHECK(in && format_summary_merge(all, in) == CLI_ERR);
    CHECK_STR(all->errstr, "a process's summary has a bad name");
    if (in) fclose(in);
    format_close(all);
}

/* A summary with --alloc (feed_alloc's calls and site), dumped; second:
 * one more site, of a String in b.rb. */
static char *summary_alloc_dump_of(int second)
{
    struct format_opts opts;
    struct format *f;
    struct rbtrace_event site;
    char *out = NULL;
    size_t out_len = 0;
    FILE *mem = open_memstream(&out, &out_len);

    memset(&opts, 0, sizeof(opts));
    opts.text.alloc = 1;
    opts.text.alloc_sample = 1;
    if (!mem || format_open(OPTIONS_FORMAT_SUMMARY, mem, &opts, &f) != CLI_OK) exit(2);
    format_set_wall_origin(f, 1700000000000000000ULL);
    feed_alloc(f);
    if (second) {
        memset(&site, 0, sizeof(site));
        site.type = RBTRACE_EV_ALLOC_SITE;
        site.count = 30;
        site.line = 9;
        site.text.ptr = "String";
        site.text.len = 6;
        site.text2.ptr = "b.rb";
        site.text2.len = 4;
        CHECK(format_event(f, &site) == CLI_OK);
    }
    CHECK(format_summary_dump(f, mem) == CLI_OK);
    format_close(f);
    fclose(mem);
    return out;
}

/* The combined summary of dumps (NUL-ended texts, NULL last) with --alloc;
 * the caller frees it. */
static char *summary_alloc_merged(char **dumps)
{
    struct format_opts opts;
    struct format *all;
    char *out = NULL;
    size_t out_len = 0;
    FILE *mem = open_memstream(&out, &out_len);

    memset(&opts, 0, sizeof(opts));
    opts.text.alloc = 1;
    opts.text.alloc_sample = 1;
    if (!mem || format_open(OPTIONS_FORMAT_SUMMARY, mem, &opts, &all) != CLI_OK) exit(2);
    for (; *dumps; dumps++) merge_dump(all, *dumps);
    CHECK(format_finish(all) == CLI_OK);
    format_close(all);
    fclose(mem);
    return out;
}

/* Past 2^32 calls in one bucket (two processes of 5e9 calls each: 6e9 of
 * ~1 us, bucket 63, and 4e9 of ~0.15 s, bucket 200): p50 is the 1 us
 * bucket's, p99 the other's; the combined dump keeps the count whole. */
static void test_summary_big_counts(void)
{
    char one[] = "rbtrace-summary 2\nprocess 1 0 0 1 2\n"
                 "row 5000000000 1 1 200000000 0 0 466f6f2361 63:3000000000 200:2000000000\n";
    char two[sizeof(one)];
    struct format_opts opts;
    struct format *all;
    char *out = NULL, *dump = NULL, name[64], p50[32], p99[32];
    size_t out_len = 0, dump_len = 0;
    FILE *mem = open_memstream(&out, &out_len), *dmem = open_memstream(&dump, &dump_len);
    unsigned long long calls = 0;
    const char *row, *head;

    memcpy(two, one, sizeof(one));
    memset(&opts, 0, sizeof(opts));
    if (!mem || !dmem || format_open(OPTIONS_FORMAT_SUMMARY, mem, &opts, &all) != CLI_OK) exit(2);
    merge_dump(all, one);
    merge_dump(all, two);
    CHECK(format_summary_dump(all, dmem) == CLI_OK);
    fclose(dmem);
    CHECK(strstr(dump, " 63:6000000000 200:4000000000\n") != NULL);
    CHECK(format_finish(all) == CLI_OK);
    format_close(all);
    fclose(mem);
    row = strstr(out, "\nFoo#a ");
    CHECK(row && sscanf(row, " %63s %llu %*s %*s %*s %31s %31s", name, &calls, p50, p99) == 4);
    CHECK(calls == 10000000000ULL);
    /* the calls column as wide as its 11 digits: the header as long as the row */
    head = strstr(out, "method ");
    CHECK(row && head && strchr(row + 1, '\n') - (row + 1) == strchr(head, '\n') - head);
    CHECK_STR(p50, "0.000001");
    CHECK_STR(p99, "0.150995");
    free(out);
    free(dump);
}

/* 1000 threads, their calls interleaved (each call returns after the
 * others' calls began): every thread found again (calls.c's hash, grown
 * several times), every call whole. */
static void feed_many_threads(struct format *f)
{
    uint64_t t;

    feed(f, RBTRACE_EV_METHOD, 0, 0, 1, "W#a");
    for (t = 0; t < 1000; t++) feed(f, RBTRACE_EV_CALL, t << 32 | 7, 100 + t, 1, NULL);
    for (t = 0; t < 1000; t++) feed(f, RBTRACE_EV_RETURN, t << 32 | 7, 2100 + t, 1, NULL);
}

static void test_summary_many_threads(void)
{
    struct format_opts opts;
    char *out;

    memset(&opts, 0, sizeof(opts));
    out = summary_of(&opts, feed_many_threads);
    CHECK(strncmp(out, "*** 1000 threads, 0.000003 s traced", 35) == 0);
    CHECK(strstr(out,
                 "\nW#a                                            1000   0.002000   0.002000") !=
          NULL);
    free(out);
}

/* A dump line merged alone: CLI_ERR with errstr as said. */
static void check_bad_dump(const char *text, const char *errstr)
{
    struct format_opts opts;
    struct format *all;
    FILE *in = fmemopen((void *)text, strlen(text), "r");

    memset(&opts, 0, sizeof(opts));
    if (!in || format_open(OPTIONS_FORMAT_SUMMARY, stdout, &opts, &all) != CLI_OK) exit(2);
    CHECK(format_summary_merge(all, in) == CLI_ERR);
    CHECK_STR(all->errstr, errstr);
    fclose(in);
    format_close(all);
}

/* --alloc in the combined summary: the dump carries each row's alloc and
 * the sites (their escaped fields in hex); one dump merged alone gives one
 * process's alloc column and sites; two sum the rows' alloc and merge the
 * sites (the same site in both: one, counted twice), most first. */
static void test_summary_merge_alloc(void)
{
    char *a = summary_alloc_dump_of(0), *b = summary_alloc_dump_of(1), *out;
    char nul_dump[] = "rbtrace-summary 2\nprocess 1 0 0 0 0\nrow 1 5 5 5 0 3 610062 5:1\n";
    char *one[] = { a, NULL }, *both[] = { a, b, NULL }, *nul_name[] = { nul_dump, NULL };

    CHECK(strstr(a, "\nsite 12 4 - 615c7831622e7262 466f6f2373746570\n") != NULL);
    CHECK(strstr(b, "\nsite 30 9 537472696e67 622e7262 -\n") != NULL);
    CHECK(strstr(a, "\nrow 1 300 200 300 0 15 466f6f2372756e ") != NULL);

    out = summary_alloc_merged(one);
    CHECK(strstr(out, "raises      alloc\n") != NULL);
    CHECK(strstr(out, "       0         15\n") != NULL);
    CHECK(strstr(out, "       0          7\n") != NULL);
    CHECK(strstr(out,
                 "*** allocations (--alloc-sample 1: every object counted)\n"
                 "*** sites that allocated most:\n"
                 "            12  (hidden)  a\\x1b.rb:4  in Foo#step\n") != NULL);
    free(out);

    out = summary_alloc_merged(both);
    CHECK(strstr(out, "*** 2 processes, 2 threads, ") != NULL);
    CHECK(strstr(out, "\nFoo#run                                           2 ") != NULL);
    CHECK(strstr(out, "       0         30\n") != NULL);
    CHECK(strstr(out, "       0         14\n") != NULL);
    CHECK(strstr(out,
                 "*** sites that allocated most:\n"
                 "            30  String  b.rb:9\n"
                 "            24  (hidden)  a\\x1b.rb:4  in Foo#step\n") != NULL);
    free(out);
    free(a);
    free(b);

    /* a method's name may hold a NUL byte (a site's fields, escaped, not) */
    out = summary_alloc_merged(nul_name);
    CHECK(strstr(out, "\na\\x00b                                            1 ") != NULL);
    CHECK(strstr(out, "       0          3\n") != NULL);
    free(out);

    check_bad_dump("rbtrace-summary 1\n", "a process's summary is not one");
    check_bad_dump("rbtrace-summary 2\nrow 1 2 3 4 5 - 0:1\n", "a process's summary has a bad row");
    check_bad_dump("rbtrace-summary 2\nsite 1 2 zz - -\n",
                   "a process's summary has a bad allocation site");
    check_bad_dump("rbtrace-summary 2\nsite 1 2 00 - -\n",
                   "a process's summary has a bad allocation site");
    check_bad_dump("rbtrace-summary 2\nsite 1 2 - -\n",
                   "a process's summary has a bad allocation site");
    check_bad_dump("rbtrace-summary 2\nsite 1 2 - - - x\n",
                   "a process's summary has a bad allocation site");
    check_bad_dump("rbtrace-summary 2\nsite 1 2 - 610062 -\n",
                   "a process's summary has a bad allocation site");
    check_bad_dump("rbtrace-summary 2\nsites 1\n",
                   "a process's summary has a line it does not know");
}

/* ---- --profile's pprof file (format_pprof.c) ---- */

/* A protobuf field read back: its number, and its varint or its bytes. */
struct pb_field {
    uint32_t num;
    uint64_t v;
    const unsigned char *data;
    size_t len;
};

static uint64_t pb_varint_at(const unsigned char **p, const unsigned char *end)
{
    uint64_t v = 0;
    int shift = 0;

    while (*p < end && shift < 64) {
        unsigned char b = *(*p)++;

        v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (b < 0x80) break;
    }
    return v;
}

/* The next field in [*p, end): 1, or 0 at the end (or on a wire type our
 * encoder never writes, which fails a check). */
static int pb_field_at(const unsigned char **p, const unsigned char *end, struct pb_field *f)
{
    uint64_t key;

    if (*p >= end) return 0;
    key = pb_varint_at(p, end);
    f->num = (uint32_t)(key >> 3);
    f->data = NULL;
    f->len = 0;
    if ((key & 7) == 0) {
        f->v = pb_varint_at(p, end);
        return 1;
    }
    CHECK((key & 7) == 2);
    if ((key & 7) != 2) return 0;
    f->len = (size_t)pb_varint_at(p, end);
    CHECK(f->len <= (size_t)(end - *p));
    if (f->len > (size_t)(end - *p)) return 0;
    f->data = *p;
    *p += f->len;
    return 1;
}

/* A message's varint field num (0 if absent). */
static uint64_t pb_uint_of(const unsigned char *data, size_t len, uint32_t num, int *present)
{
    const unsigned char *p = data;
    struct pb_field f;

    if (present) *present = 0;
    while (pb_field_at(&p, data + len, &f))
        if (f.num == num && !f.data) {
            if (present) *present = 1;
            return f.v;
        }
    return 0;
}

static void pack_frame(struct format *f, uint64_t id, const char *name, const char *path,
                       uint64_t line)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_PROFILE_FRAME;
    ev.method_id = id;
    ev.text.ptr = name;
    ev.text.len = (uint32_t)strlen(name);
    ev.text2.ptr = path;
    ev.text2.len = (uint32_t)strlen(path);
    ev.line = line;
    CHECK(format_event(f, &ev) == CLI_OK);
}

static void pack_sample(struct format *f, uint64_t thread, uint64_t time_ns, uint64_t weight,
                        const uint64_t *frames, uint32_t n)
{
    struct rbtrace_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.type = RBTRACE_EV_PROFILE_SAMPLE;
    ev.thread_id = thread;
    ev.time_ns = time_ns;
    ev.status = RBTRACE_STATE_RUNNING;
    ev.count = weight;
    ev.n_frames = n;
    memcpy(ev.frames, frames, n * sizeof(frames[0]));
    CHECK(format_event(f, &ev) == CLI_OK);
}

/*
 * The file pprof reads: a location (in mapping 1) and a function for each
 * frame the samples name, and only those (the frames' array has unnamed
 * slots); a frame never named one "(unknown frame)" location, so that no
 * sample names a location the file lacks (pprof refuses such a file); no
 * system_name (pprof would "demangle" <main>); the first sample's wall
 * time and the span of the samples (first to last, and a period).
 */
static void test_pprof(void)
{
    static const uint64_t s1[] = { 1, 2 }, s2[] = { 99, 2 }, s3[] = { 5 };
    const uint64_t origin = 1700000000ULL * 1000000000ULL;
    struct format_opts opts;
    struct format *f = NULL;
    FILE *out = tmpfile();
    unsigned char gz[4096], raw[8192];
    const unsigned char *p, *end;
    struct pb_field fld;
    char strings[32][32];
    uint64_t locs[16], sample_locs[16], time_nanos = 0, duration = 0, period = 0;
    size_t n_strings = 0, n_locs = 0, n_sample_locs = 0, n_mappings = 0, gz_len, i, k;
    int unknown = 0, unnamed = 0, system_name = 0, mapped = 1, present, found;
    z_stream z;

    memset(&opts, 0, sizeof(opts));
    opts.profile = 1;
    opts.hz = 100;
    opts.profile_mode = RBTRACE_PROFILE_WALL;
    CHECK(out != NULL);
    if (!out || format_open(OPTIONS_FORMAT_PPROF, out, &opts, &f) != CLI_OK) {
        CHECK(0);
        return;
    }
    format_set_wall_origin(f, origin);
    /* ids 1, 2 and 5: the frames' array grows to 8, 3, 4, 6 and 7 unnamed */
    pack_frame(f, 1, "Foo#run", "a.rb", 3);
    pack_frame(f, 2, "<main>", "a.rb", 1);
    pack_frame(f, 5, "Bar#x", "", 0);
    pack_sample(f, THREAD_A, T0, 2, s1, 2);
    pack_sample(f, THREAD_B, T0 + 10000000, 1, s3, 1);
    pack_sample(f, THREAD_A, T0 + 20000000, 1, s2, 2); /* 99: never named */
    CHECK(format_finish(f) == CLI_OK);
    format_close(f);
    rewind(out);
    gz_len = fread(gz, 1, sizeof(gz), out);
    fclose(out);

    memset(&z, 0, sizeof(z));
    CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK);
    z.next_in = gz;
    z.avail_in = (uInt)gz_len;
    z.next_out = raw;
    z.avail_out = sizeof(raw);
    CHECK(inflate(&z, Z_FINISH) == Z_STREAM_END);
    end = raw + (sizeof(raw) - z.avail_out);
    inflateEnd(&z);

    for (p = raw; pb_field_at(&p, end, &fld);) {
        switch (fld.num) {
        case 6: /* string_table */
            if (n_strings < 32) {
                snprintf(strings[n_strings], sizeof(strings[0]), "%.*s", (int)fld.len, fld.data);
                n_strings++;
            }
            break;
        case 3: /* mapping */
            n_mappings++;
            CHECK(pb_uint_of(fld.data, fld.len, 1, NULL) == 1);
            CHECK(pb_uint_of(fld.data, fld.len, 7, NULL) == 1); /* has_functions */
            break;
        case 4: /* location */
            if (n_locs < 16) locs[n_locs++] = pb_uint_of(fld.data, fld.len, 1, NULL);
            if (pb_uint_of(fld.data, fld.len, 2, NULL) != 1) mapped = 0;
            break;
        case 5: /* function */
            pb_uint_of(fld.data, fld.len, 3, &present);
            system_name |= present;
            break;
        case 2: { /* sample: its location ids, packed */
            const unsigned char *q = fld.data, *qend = fld.data + fld.len;
            struct pb_field sf;

            while (pb_field_at(&q, qend, &sf)) {
                const unsigned char *r = sf.data;

                if (sf.num != 1 || !sf.data) continue;
                while (r < sf.data + sf.len && n_sample_locs < 16)
                    sample_locs[n_sample_locs++] = pb_varint_at(&r, sf.data + sf.len);
            }
            break;
        }
        case 9:
            time_nanos = fld.v;
            break;
        case 10:
            duration = fld.v;
            break;
        case 12:
            period = fld.v;
            break;
        default:
            break;
        }
    }
    for (i = 0; i < n_strings; i++) {
        unknown += !strcmp(strings[i], "(unknown frame)");
        unnamed += !strncmp(strings[i], "(frame ", 7);
    }
    CHECK(n_strings > 1 && strings[0][0] == '\0');
    CHECK(unknown == 1);
    CHECK(unnamed == 0);
    CHECK(!system_name);
    CHECK(n_mappings == 1);
    CHECK(mapped);
    CHECK(n_locs == 4); /* 1, 2, 5 and the unknown one */
    CHECK(n_sample_locs == 5);
    for (i = 0; i < n_sample_locs; i++) {
        for (found = 0, k = 0; k < n_locs; k++) found |= sample_locs[i] == locs[k];
        CHECK(found);
    }
    CHECK(period == 10000000);
    CHECK(time_nanos == origin + T0);
    CHECK(duration == 20000000 + 10000000);
}

int main(void)
{
    test_json_escape();
    test_split();
    test_stream_errors();
    test_text();
    test_json();
    test_json_gvl();
    test_alloc_formats();
    test_chrome();
    test_folded();
    test_summary();
    test_summary_reraise_and_names();
    test_summary_gvl();
    test_summary_merge();
    test_summary_merge_alloc();
    test_summary_big_counts();
    test_summary_many_threads();
    test_pprof();
    return check_report();
}
