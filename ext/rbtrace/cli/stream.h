/*
 * stream.h - the client's decoder of the target's event stream.
 *
 * Pure: bytes in, decoded events out (struct rbtrace_event), no I/O. The
 * session reads the socket and hands stream_next what it has; the
 * fuzzer (fuzz/fuzz_event.c) hands it whatever bytes it likes. Both run
 * this code, so what the fuzzer finds is in what the client ships.
 *
 * Each call decodes the one event at the start of the bytes:
 *   - CALL and RETURN (and their _NEXT forms), nearly every event of a
 *     trace, straight from their bytes (rbtrace_event_decode_call_bytes);
 *   - anything else through msgpack objects, once its end is found
 *     (rbtrace_msgpack_scan): msgpack-c unpacks only a whole event, whose
 *     announced items all fit in its bytes, so a few bytes announcing 2^32
 *     elements cannot make it allocate gigabytes;
 *   - CALL_NEXT and RETURN_NEXT are resolved against the last call event
 *     (the call chain, codec.h): the event handed out is a CALL or RETURN
 *     with its thread and absolute time.
 */
#ifndef RBTRACE_CLI_STREAM_H
#define RBTRACE_CLI_STREAM_H

#include <stddef.h>
#include "codec.h"

/* An event larger than this is malformed (the biggest real ones carry
 * RBTRACE_EXPRS_MAX values of RBTRACE_VALUE_MAX bytes, or an eval result). */
#define STREAM_EVENT_MAX (64 * 1024 * 1024)

/* What stream_next found. */
enum stream_result {
    STREAM_EVENT,     /* an event, in s->ev; *used bytes long */
    STREAM_PARTIAL,   /* the bytes end before the event does: read more */
    STREAM_BAD_EVENT, /* a whole event (*used bytes) that cannot be decoded or
                         resolved: errstr says why; the stream may go on after it */
    STREAM_BROKEN     /* bytes that are no event at all (no end can be found):
                         errstr says why; nothing after them can be trusted */
};

struct stream {
    struct rbtrace_event *ev;        /* the last event decoded (~2 KiB: on the heap) */
    int fast;                        /* it came through the fast path */
    struct rbtrace_call_chain chain; /* the last call event (for the _NEXT ones) */
    msgpack_zone zone;               /* the objects of the last event decoded */
    int zone_ready;                  /* by the generic path; zone is initialised */
    char errstr[RBTRACE_ERRLEN];
};

/* CLI_OK, or CLI_ERR (out of memory, s is then safe to stream_free). */
int stream_init(struct stream *s);
void stream_free(struct stream *s);

/*
 * Decodes the event at the start of p[0, avail). On STREAM_EVENT, s->ev is
 * valid until the next call, and its strings point into p or into s's
 * zone; on STREAM_EVENT and STREAM_BAD_EVENT *used is the event's length,
 * otherwise 0.
 */
static inline enum stream_result stream_next(struct stream *s, const char *p, size_t avail,
                                             size_t *used);

/* stream_next's path for anything but a whole CALL or RETURN (fast, the
 * result of rbtrace_event_decode_call_bytes). */
enum stream_result stream_next_other(struct stream *s, const char *p, size_t avail, size_t *used,
                                     int fast);

/* Inline: the client's hot path. The fast path first: CALL and RETURN
 * straight from their bytes, resolved against the chain. */
static inline enum stream_result stream_next(struct stream *s, const char *p, size_t avail,
                                             size_t *used)
{
    int fast;

    *used = 0;
    fast = avail ? rbtrace_event_decode_call_bytes(p, avail, s->ev, used) : -1;
    if (fast <= 0) return stream_next_other(s, p, avail, used, fast);
    s->fast = 1;
    if (rbtrace_call_chain_resolve(&s->chain, s->ev, s->errstr) == RBTRACE_OK) return STREAM_EVENT;
    return STREAM_BAD_EVENT;
}

#endif
