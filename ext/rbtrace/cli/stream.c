/*
 * stream.c - the target's event stream, decoded one event at a time
 * (stream.h). No I/O: the caller owns the bytes and where they come from.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "stream.h"

int stream_init(struct stream *s)
{
    memset(s, 0, sizeof(*s));
    s->ev = malloc(sizeof(*s->ev));
    s->zone_ready = msgpack_zone_init(&s->zone, MSGPACK_ZONE_CHUNK_SIZE);
    if (s->ev && s->zone_ready) return CLI_OK;
    snprintf(s->errstr, sizeof(s->errstr), "out of memory");
    return CLI_ERR;
}

void stream_free(struct stream *s)
{
    free(s->ev);
    s->ev = NULL;
    if (s->zone_ready) msgpack_zone_destroy(&s->zone);
    s->zone_ready = 0;
}

static enum stream_result stream_fail(struct stream *s, enum stream_result rc, const char *why)
{
    snprintf(s->errstr, sizeof(s->errstr), "%s", why);
    return rc;
}

/* A _NEXT event made whole; STREAM_BAD_EVENT if there is no call before it. */
static enum stream_result stream_resolve(struct stream *s)
{
    if (rbtrace_call_chain_resolve(&s->chain, s->ev, s->errstr) == RBTRACE_OK) return STREAM_EVENT;
    return STREAM_BAD_EVENT;
}

/* Any event but the fast path's, through msgpack objects. */
static enum stream_result stream_generic(struct stream *s, const char *p, size_t avail,
                                         size_t *used)
{
    msgpack_object obj;
    size_t off = 0, size = 0;

    switch (rbtrace_msgpack_scan(p, avail, STREAM_EVENT_MAX, &size)) {
    case RBTRACE_SCAN_WHOLE:
        break;
    case RBTRACE_SCAN_PARTIAL:
        return STREAM_PARTIAL;
    case RBTRACE_SCAN_TOO_BIG:
        return stream_fail(s, STREAM_BROKEN, "an event larger than 64 MiB");
    case RBTRACE_SCAN_INVALID:
        return stream_fail(s, STREAM_BROKEN, "invalid msgpack");
    }
    msgpack_zone_clear(&s->zone); /* the previous event's objects; keeps its memory */
    if (msgpack_unpack(p, size, &off, &s->zone, &obj) != MSGPACK_UNPACK_SUCCESS)
        return stream_fail(s, STREAM_BROKEN, "invalid msgpack (nested too deep, or out of memory)");
    *used = off;
    if (rbtrace_event_decode(&obj, s->ev, s->errstr) != RBTRACE_OK) return STREAM_BAD_EVENT;
    return stream_resolve(s);
}

enum stream_result stream_next_other(struct stream *s, const char *p, size_t avail, size_t *used,
                                     int fast)
{
    s->fast = 0;
    s->errstr[0] = '\0';
    if (fast < 0) return STREAM_PARTIAL; /* the rest of a CALL or RETURN is still to come */
    return stream_generic(s, p, avail, used);
}
