/*
 * codec.h - encoding and decoding of the messages protocol.h defines.
 * Pure C over buffers and msgpack objects: no I/O, no Ruby. Shared by the
 * extension and the client, unit-tested and fuzzed on its own.
 *
 * Decoders return RBTRACE_OK, or RBTRACE_ERR with a message in err.
 * Decoded strings point into the msgpack data they came from: they are not
 * NUL-terminated and live as long as that data.
 */
#ifndef RBTRACE_CODEC_H
#define RBTRACE_CODEC_H

#include <endian.h>
#include <string.h>
#include <msgpack.h>
#include "protocol.h"

#define RBTRACE_OK 0
#define RBTRACE_ERR (-1)

/* Room for a decoder's error message. */
#define RBTRACE_ERRLEN 160

/* A string inside a msgpack buffer. */
struct rbtrace_str {
    const char *ptr;
    uint32_t len;
};

/* Most selectors one METHODS command may carry. */
#define RBTRACE_SELECTORS_MAX 256

struct rbtrace_command {
    enum rbtrace_command_type type;
    uint32_t client_pid;
    uint32_t protocol_version; /* ATTACH */
    struct rbtrace_str text;   /* ATTACH: socket path; EVAL: code */
    uint32_t eval_id;          /* EVAL */
    uint32_t timeout_ms;       /* EVAL */
    uint32_t result_format;    /* EVAL: enum rbtrace_result_format, 0 if absent */
    uint64_t threshold_ns;     /* SLOW */
    uint64_t sample;           /* ALLOC: one object in sample is counted */
    uint32_t mode;             /* PROFILE: enum rbtrace_profile_mode */
    uint32_t hz;               /* PROFILE */
    int cpu;                   /* SLOW: CPU time rather than wall time */
    uint32_t n_selectors;      /* METHODS, SLOW */
    struct rbtrace_str selectors[RBTRACE_SELECTORS_MAX];
};

/* Most expression/value pairs one CALL_ARGS event may carry. */
#define RBTRACE_EXPRS_MAX 32

struct rbtrace_event {
    enum rbtrace_event_type type;
    uint64_t thread_id;       /* CALL, RETURN, CALL_ARGS (0 in a _NEXT), SLOW, GC,
                                    RAISE, GVL, THREAD_NAME */
    uint64_t time_ns;         /* CALL, RETURN, CALL_ARGS; _NEXT: delta_ns */
    uint64_t method_id;       /* METHOD, CALL, RETURN, CALL_ARGS, _NEXT */
    uint64_t number;          /* ATTACHED: protocol version; LOST: count;
                                    SYNCED: tracing (0: nothing is traced);
                                    REFUSED: reason; EVAL_RESULT: eval id;
                                    RAISE: reraise (0: a first raise) */
    uint64_t pid;             /* ATTACHED: target pid; REFUSED: client pid */
    uint64_t clock_origin_ns; /* ATTACHED */
    uint64_t wall_origin_ns;  /* ATTACHED */
    uint64_t features;        /* ATTACHED: RBTRACE_FEATURE_* bits (0 if absent) */
    uint64_t duration_ns;     /* SLOW, GC; GVL: the wait */
    uint64_t count;           /* ALLOC, ALLOC_SITE: objects (sampled) */
    uint64_t line;            /* ALLOC_SITE */
    uint64_t depth;           /* SLOW */
    uint64_t mark_ns;         /* GC */
    uint64_t sweep_ns;        /* GC */
    uint32_t status;          /* EVAL_RESULT */
    struct rbtrace_str text;  /* ATTACHED: ruby version; METHOD: name;
                                    REFUSED, ERROR, NOTICE: message;
                                    EVAL_RESULT: result text;
                                    GC: major_by; RAISE: class;
                                    ALLOC_SITE: class;
                                    THREAD_NAME: the name ("" for none) */
    struct rbtrace_str text2; /* GC: gc_by; RAISE: message; ALLOC_SITE: path */
    struct rbtrace_str text3; /* RAISE: location; ALLOC_SITE: label */
    uint32_t n_exprs;         /* CALL_ARGS */
    struct rbtrace_str exprs[RBTRACE_EXPRS_MAX];
    struct rbtrace_str values[RBTRACE_EXPRS_MAX];
    /* PROFILE_SAMPLE (thread_id, time_ns, state in status, count: weight):
     * its frame ids, innermost first. After exprs: not cleared per event. */
    uint32_t n_frames;
    uint64_t frames[RBTRACE_PROFILE_FRAMES_MAX];
};

/* ---- framing ---- */

/* What rbtrace_msgpack_scan found at the start of a buffer. */
enum rbtrace_scan {
    RBTRACE_SCAN_WHOLE,   /* a whole message, *size bytes long */
    RBTRACE_SCAN_PARTIAL, /* the buffer ends before the message does */
    RBTRACE_SCAN_TOO_BIG, /* it announces more items or bytes than max could hold */
    RBTRACE_SCAN_INVALID  /* a byte msgpack never uses (0xc1) */
};

/*
 * Finds where the msgpack message at the start of buf (len bytes) ends,
 * without building any object: call it before msgpack_unpack, which
 * allocates every element an array announces before it reads one. A
 * message longer than max bytes is TOO_BIG as soon as its headers say so.
 * Sets *size only for WHOLE.
 */
enum rbtrace_scan rbtrace_msgpack_scan(const char *buf, size_t len, size_t max, size_t *size);

/* ---- commands ---- */

/* Encodes cmd as one msgpack array. */
int rbtrace_command_encode(msgpack_packer *pk, const struct rbtrace_command *cmd);

/* Decodes one whole command from buf. The command's strings point into
 * zone, which the caller initialises before and destroys after. */
int rbtrace_command_decode(const char *buf, size_t len, msgpack_zone *zone,
                           struct rbtrace_command *cmd, char *err);

/* ---- events ---- */

/* One encoder per event; each packs one msgpack array. */
void rbtrace_event_pack_attached(msgpack_packer *pk, uint32_t target_pid, const char *ruby_version,
                                 uint64_t clock_origin_ns, uint64_t wall_origin_ns);
/* ATTACHED with the features field (the target's; the above leaves it out). */
void rbtrace_event_pack_attached_features(msgpack_packer *pk, uint32_t target_pid,
                                          const char *ruby_version, uint64_t clock_origin_ns,
                                          uint64_t wall_origin_ns, uint64_t features);
void rbtrace_event_pack_refused(msgpack_packer *pk, enum rbtrace_refusal reason,
                                uint32_t client_pid, const char *message);
void rbtrace_event_pack_detached(msgpack_packer *pk);
void rbtrace_event_pack_synced(msgpack_packer *pk, uint32_t tracing);
void rbtrace_event_pack_profile_frame(msgpack_packer *pk, uint64_t frame_id, const char *name,
                                      size_t name_len, const char *path, size_t path_len,
                                      uint64_t line);
/* PROFILE_SAMPLE: frames innermost first (n may be 0: the same stack) */
void rbtrace_event_pack_profile_sample(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                                       uint32_t state, uint64_t weight, const uint64_t *frames,
                                       uint32_t n);
/* PROFILE_MISSED: samples missed since the last one said */
void rbtrace_event_pack_profile_missed(msgpack_packer *pk, uint64_t count);
void rbtrace_event_pack_method(msgpack_packer *pk, uint64_t method_id, const char *name,
                               size_t name_len);
void rbtrace_event_pack_call(msgpack_packer *pk, enum rbtrace_event_type type, uint64_t thread_id,
                             uint64_t time_ns, uint64_t method_id);
/* CALL_NEXT or RETURN_NEXT (type) */
void rbtrace_event_pack_call_next(msgpack_packer *pk, enum rbtrace_event_type type,
                                  uint64_t delta_ns, uint64_t method_id);
/* A msgpack unsigned integer in its shortest form, as msgpack-c packs it.
 * Inline, with the two encoders below: they run inside every traced call.
 * Always: with link-time optimisation GCC made it an out-of-line function
 * once the encoders had a few more callers.
 * __builtin_memcpy: ruby.h defines memcpy as a wrapper of its own, which
 * GCC may leave as a call (and a stack protector for the copied value). */
static inline __attribute__((always_inline)) size_t rbtrace_put_uint(char *out, uint64_t v)
{
    if (v < 128) {
        out[0] = (char)v;
        return 1;
    }
    if (v <= UINT8_MAX) {
        out[0] = (char)0xcc;
        out[1] = (char)v;
        return 2;
    }
    if (v <= UINT16_MAX) {
        uint16_t v16 = htobe16((uint16_t)v);
        out[0] = (char)0xcd;
        __builtin_memcpy(out + 1, &v16, 2);
        return 3;
    }
    if (v <= UINT32_MAX) {
        uint32_t v32 = htobe32((uint32_t)v);
        out[0] = (char)0xce;
        __builtin_memcpy(out + 1, &v32, 4);
        return 5;
    }
    {
        uint64_t v64 = htobe64(v);
        out[0] = (char)0xcf;
        __builtin_memcpy(out + 1, &v64, 8);
        return 9;
    }
}

/* The hot path's form of rbtrace_event_pack_call: the same bytes, written
 * straight into out (at least RBTRACE_CALL_EVENT_MAX bytes) without the
 * packer's callbacks. Returns the length. Always inline: called out of line
 * (GCC did, once trace.c grew), the firehose's hook needs a stack frame on
 * every event, even those that never take this way (bench/RESULTS.md,
 * per_call_callgrind: 13 instructions an event). */
#define RBTRACE_CALL_EVENT_MAX 29
static inline __attribute__((always_inline)) size_t
rbtrace_event_encode_call(char *out, enum rbtrace_event_type type, uint64_t thread_id,
                          uint64_t time_ns, uint64_t method_id)
{
    size_t n = 0;

    out[n++] = (char)0x94; /* fixarray of 4 */
    n += rbtrace_put_uint(out + n, type);
    n += rbtrace_put_uint(out + n, thread_id);
    n += rbtrace_put_uint(out + n, time_ns);
    n += rbtrace_put_uint(out + n, method_id);
    return n;
}

/*
 * The stream's last call event (CALL, RETURN, CALL_ARGS, CALL_NEXT,
 * RETURN_NEXT): what a _NEXT event's thread and time are relative to. The
 * target keeps one for what it has put in the stream, the client one for
 * what it has read; each notes every call event as it goes in or comes out.
 */
struct rbtrace_call_chain {
    uint64_t thread_id; /* 0 until a call event is noted (the target's
                                thread ids are never 0) */
    uint64_t time_ns;
    int started; /* a call event has been seen (the client's
                                test: a stream may carry thread 0) */
};

static inline void rbtrace_call_chain_note(struct rbtrace_call_chain *c, uint64_t thread_id,
                                           uint64_t time_ns)
{
    c->thread_id = thread_id;
    c->time_ns = time_ns;
    c->started = 1;
}

/* CALL_NEXT or RETURN_NEXT, the same bytes as rbtrace_event_pack_call_next. */
static inline __attribute__((always_inline)) size_t
rbtrace_event_encode_call_next(char *out, enum rbtrace_event_type type, uint64_t delta_ns,
                               uint64_t method_id)
{
    size_t n = 0;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* A busy loop's usual event: both fields fixints, the four bytes in one
     * store (one test where each field took a compare and a jump). */
    if (__builtin_expect((delta_ns | method_id) < 128, 1)) {
        uint32_t word = 0x93u | (uint32_t)type << 8 | (uint32_t)delta_ns << 16 |
            (uint32_t)method_id << 24;

        __builtin_memcpy(out, &word, sizeof(word));
        return sizeof(word);
    }
#endif
    out[n++] = (char)0x93; /* fixarray of 3 */
    out[n++] = (char)type; /* 16 or 17: a fixint */
    n += rbtrace_put_uint(out + n, delta_ns);
    n += rbtrace_put_uint(out + n, method_id);
    return n;
}

/*
 * The hot path's encoder: a CALL or RETURN (type) of thread_id (never 0)
 * at time_ns, as a _NEXT when it follows the chain's last call event on
 * the same thread and not before it, else in full. A chain that has seen
 * no call event (all zero) has thread 0, so no test of started is needed.
 * Returns the length (at most RBTRACE_CALL_EVENT_MAX). The chain is not
 * changed: note the event once it is in the stream. Always inline: GCC
 * made it a function of its own.
 */
static inline __attribute__((always_inline)) size_t
rbtrace_event_encode_call_chained(char *out, const struct rbtrace_call_chain *c,
                                  enum rbtrace_event_type type, uint64_t thread_id,
                                  uint64_t time_ns, uint64_t method_id)
{
    if (thread_id == c->thread_id && time_ns >= c->time_ns)
        return rbtrace_event_encode_call_next(
            out, type == RBTRACE_EV_CALL ? RBTRACE_EV_CALL_NEXT : RBTRACE_EV_RETURN_NEXT,
            time_ns - c->time_ns, method_id);
    return rbtrace_event_encode_call(out, type, thread_id, time_ns, method_id);
}

/*
 * The client's side of the chain, for every decoded event in stream order:
 * turns a CALL_NEXT or RETURN_NEXT into the CALL or RETURN it stands for
 * (thread and absolute time), and notes every call event. Other events
 * pass unchanged. RBTRACE_ERR for a _NEXT with no call event before it,
 * or whose time would pass 2^64 ns.
 */
int rbtrace_call_chain_resolve(struct rbtrace_call_chain *c, struct rbtrace_event *ev, char *err);

/* LOST, the same way: the same bytes as rbtrace_event_pack_lost. */
#define RBTRACE_LOST_EVENT_MAX 11
static inline size_t rbtrace_event_encode_lost(char *out, uint64_t count)
{
    out[0] = (char)0x92; /* fixarray of 2 */
    out[1] = RBTRACE_EV_LOST;
    return 2 + rbtrace_put_uint(out + 2, count);
}

/* Starts a CALL_ARGS event; the caller then packs n_exprs pairs with
 * rbtrace_event_pack_expr. */
void rbtrace_event_pack_call_args(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                                  uint64_t method_id, uint32_t n_exprs);
void rbtrace_event_pack_expr(msgpack_packer *pk, const char *expr, size_t expr_len,
                             const char *value, size_t value_len);
void rbtrace_event_pack_lost(msgpack_packer *pk, uint64_t count);
void rbtrace_event_pack_forget(msgpack_packer *pk, uint64_t first_id);
void rbtrace_event_pack_eval_result(msgpack_packer *pk, uint32_t eval_id,
                                    enum rbtrace_eval_status status, const char *text,
                                    size_t text_len);
void rbtrace_event_pack_slow(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                             uint64_t method_id, uint64_t duration_ns, uint64_t depth);
void rbtrace_event_pack_gc(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                           uint64_t duration_ns, uint64_t mark_ns, uint64_t sweep_ns,
                           const char *major_by, const char *gc_by);
void rbtrace_event_pack_raise(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                              const char *klass, size_t klass_len, const char *message,
                              size_t message_len, const char *location, size_t location_len,
                              uint64_t reraise);
/* THREAD_NAME: name[0, len), the caller cut to RBTRACE_THREAD_NAME_MAX */
void rbtrace_event_pack_thread_name(msgpack_packer *pk, uint64_t thread_id, const char *name,
                                    size_t len);
void rbtrace_event_pack_gvl(msgpack_packer *pk, uint64_t thread_id, uint64_t time_ns,
                            uint64_t wait_ns);

/* GVL, the same bytes as rbtrace_event_pack_gvl, written in place (no
 * packer: the target's thread hook calls nothing that might allocate). */
#define RBTRACE_GVL_EVENT_MAX 29
static inline size_t rbtrace_event_encode_gvl(char *out, uint64_t thread_id, uint64_t time_ns,
                                              uint64_t wait_ns)
{
    size_t n = 0;

    out[n++] = (char)0x94;           /* fixarray of 4 */
    out[n++] = (char)RBTRACE_EV_GVL; /* a fixint */
    n += rbtrace_put_uint(out + n, thread_id);
    n += rbtrace_put_uint(out + n, time_ns);
    n += rbtrace_put_uint(out + n, wait_ns);
    return n;
}
void rbtrace_event_pack_alloc(msgpack_packer *pk, uint64_t thread_id, uint64_t count);
void rbtrace_event_pack_alloc_site(msgpack_packer *pk, uint64_t count, const char *klass,
                                   size_t klass_len, const char *path, size_t path_len,
                                   uint64_t line, const char *label, size_t label_len);

/* ALLOC, the same bytes as rbtrace_event_pack_alloc, written in place (no
 * packer: the target's allocation hook runs inside Ruby's allocator). */
#define RBTRACE_ALLOC_EVENT_MAX 20
static inline size_t rbtrace_event_encode_alloc(char *out, uint64_t thread_id, uint64_t count)
{
    size_t n = 0;

    out[n++] = (char)0x93;             /* fixarray of 3 */
    out[n++] = (char)RBTRACE_EV_ALLOC; /* a fixint */
    n += rbtrace_put_uint(out + n, thread_id);
    n += rbtrace_put_uint(out + n, count);
    return n;
}
/* ERROR or NOTICE */
void rbtrace_event_pack_message(msgpack_packer *pk, enum rbtrace_event_type type,
                                const char *message, size_t len);

/* Decodes one unpacked event. Strings point into obj's zone. */
int rbtrace_event_decode(const msgpack_object *obj, struct rbtrace_event *ev, char *err);

/*
 * The client's fast path for its hottest events: decodes the CALL, RETURN,
 * CALL_NEXT or RETURN_NEXT at the start of buf straight from its bytes
 * (as rbtrace_event_decode would: a _NEXT as it is, unresolved), with no msgpack
 * objects. Returns the events it decoded: 1, having set only ev->type,
 * thread_id, time_ns and method_id, and *used to the message's length; or
 * 0 when the message is something else, or encoded in a way this does not
 * handle (decode it with rbtrace_event_decode); -1 when buf ends before the
 * message does. Only a return of 1 touches ev and *used.
 */
int rbtrace_event_decode_call_bytes(const char *buf, size_t len, struct rbtrace_event *ev,
                                    size_t *used);

#endif
