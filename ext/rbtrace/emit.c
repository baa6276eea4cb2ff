/*
 * emit.c - turns what the hooks and commands saw into protocol events in
 * the ring buffer that the writer thread drains.
 *
 * The hot path (rbtrace_emit_call, inline from emit.h) runs inside
 * the app's traced calls: it encodes a CALL or RETURN by hand, in place in
 * the ring. No malloc, no Ruby allocation, no syscall, no lock but the GVL
 * the caller holds. Rarer events of the hot path (names, expressions) are
 * packed by msgpack-c into a static scratch buffer, used only while the
 * GVL is held throughout; events that may wait for room (eval results,
 * messages, DETACHED) are packed into a buffer of their own. A method is
 * named once per (class, method) pair with a METHOD event; later events
 * carry its small id only. The table of pairs grows (a rare mmap on the
 * hot path) up to RBTRACE_METHOD_SLOTS_MAX, then starts afresh after a
 * FORGET event. A call or return of the same thread as the call event
 * before it goes out as a CALL_NEXT or RETURN_NEXT (3 to 7 bytes: time
 * since that event, method id). When the ring is full the
 * event is dropped and counted; the count goes out as a LOST event before
 * the next event that fits.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "codec.h"
#include "emit.h"
#include "handoff.h"
#include "ractors.h"
#include "ring.h"
#include "writer.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* Largest event built in the scratch buffer (calls with expressions). */
#define EMIT_SCRATCH 16384

/* Longest method name sent; longer ones are cut. */
#define EMIT_NAME_MAX 512

struct emit_buffer {
    char data[EMIT_SCRATCH];
    size_t len;
    int overflow;
};

static struct emit_buffer scratch;
static msgpack_packer scratch_pk;
#ifndef HAVE_RB_CLASS_ATTACHED_OBJECT
static ID id_attached; /* where Rubies before 3.2 keep a singleton's object */
#endif

static int emit_buffer_write(void *data, const char *buf, size_t len)
{
    struct emit_buffer *b = data;

    if (len > EMIT_SCRATCH - b->len) {
        b->overflow = 1;
        return -1;
    }
    memcpy(b->data + b->len, buf, len);
    b->len += len;
    return 0;
}

static void emit_begin(void)
{
    scratch.len = 0;
    scratch.overflow = 0;
}

/* Sends one encoded event, or counts it lost. Returns 0 if it was sent.
 * A pending loss report goes out first, and only together with the event,
 * so that a full ring does not fill up with reports. */
static int emit_push(const char *data, size_t len)
{
    char lost[RBTRACE_LOST_EVENT_MAX];
    size_t lost_len = 0;

    if (rbtrace.big_event || !rbtrace.attached || rbtrace.sealed) goto drop;
    if (rbtrace.lost) lost_len = rbtrace_event_encode_lost(lost, rbtrace.lost);
    if (rbtrace_ring_space(&rbtrace.ring, lost_len + len) < lost_len + len) goto drop;
    if (lost_len) {
        rbtrace_ring_push(&rbtrace.ring, lost, lost_len);
        rbtrace.lost = 0;
    }
    rbtrace_ring_push(&rbtrace.ring, data, len);
    return 0;

drop:
    rbtrace.lost++;
    return -1;
}

/* Sends the scratch event, or counts it lost. Returns 0 if it was sent. */
static int emit_commit(void)
{
    if (scratch.overflow) {
        rbtrace.lost++;
        return -1;
    }
    return emit_push(scratch.data, scratch.len);
}

/* ---- method names ---- */

static size_t emit_append(char *out, size_t at, const char *s, size_t len)
{
    if (len > EMIT_NAME_MAX - at) len = EMIT_NAME_MAX - at;
    memcpy(out + at, s, len);
    return at + len;
}

/* Appends klass's name without allocating: the permanent class path. */
static size_t emit_append_class(char *out, size_t at, VALUE klass)
{
    VALUE name = rb_mod_name(klass);
    char anon[48];

    if (RB_TYPE_P(name, T_STRING))
        return emit_append(out, at, RSTRING_PTR(name), RSTRING_LEN(name));
    snprintf(anon, sizeof(anon), "#<%s:%p>", RB_TYPE_P(klass, T_MODULE) ? "Module" : "Class",
             (void *)klass);
    return emit_append(out, at, anon, strlen(anon));
}

static VALUE emit_attached_object(VALUE singleton)
{
#ifdef HAVE_RB_CLASS_ATTACHED_OBJECT
    return rb_class_attached_object(singleton);
#else
    return rb_ivar_get(singleton, id_attached);
#endif
}

/* "Class#method", "Class.method" for singleton methods, or "method". */
static size_t emit_format_name(char *out, VALUE klass, ID mid)
{
    VALUE mname = mid ? rb_id2str(mid) : Qnil;
    size_t at = 0;

    if (klass && klass != Qnil && (RB_TYPE_P(klass, T_CLASS) || RB_TYPE_P(klass, T_MODULE))) {
        if (FL_TEST(klass, FL_SINGLETON)) {
            VALUE obj = emit_attached_object(klass);
            at = emit_append_class(
                out, at,
                RB_TYPE_P(obj, T_CLASS) || RB_TYPE_P(obj, T_MODULE) ? obj : rb_obj_class(obj));
            at = emit_append(out, at, ".", 1);
        } else {
            at = emit_append_class(out, at, klass);
            at = emit_append(out, at, "#", 1);
        }
    }
    if (RB_TYPE_P(mname, T_STRING))
        return emit_append(out, at, RSTRING_PTR(mname), RSTRING_LEN(mname));
    return emit_append(out, at, "(unknown)", 9);
}

static size_t emit_slot_of(VALUE klass, ID mid, size_t slots)
{
    uint64_t h = ((uint64_t)klass >> 3) * 0x9E3779B97F4A7C15ull ^
        (uint64_t)mid * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h >> 32) & (slots - 1);
}

/* The table is mmap'd, not malloc'd, so that the end of a session gives
 * its pages back to the system (malloc would keep them in its heap). */
static struct rbtrace_method_slot *emit_table_alloc(size_t slots)
{
    void *p = mmap(NULL, slots * sizeof(struct rbtrace_method_slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

static void emit_table_free(struct rbtrace_method_slot *table, size_t slots)
{
    /* munmap fails only for a bad range, which ours never is. */
    if (table) (void)munmap(table, slots * sizeof(*table));
}

/* Doubles the table (anonymous pages come zeroed: empty slots); -1 if
 * it is as large as it may be or no memory is left. */
static int emit_table_grow(void)
{
    size_t slots = (size_t)rbtrace.method_slots * 2, i;
    struct rbtrace_method_slot *table;

    if (slots > RBTRACE_METHOD_SLOTS_MAX || (table = emit_table_alloc(slots)) == NULL) return -1;
    for (i = 0; i < rbtrace.method_slots; i++) {
        const struct rbtrace_method_slot *old = &rbtrace.methods[i];
        size_t j;

        if (old->id == 0) continue;
        for (j = emit_slot_of(old->klass, old->mid, slots); table[j].id; j = (j + 1) & (slots - 1))
            ;
        table[j] = *old;
    }
    emit_table_free(rbtrace.methods, rbtrace.method_slots);
    rbtrace.methods = table;
    rbtrace.method_slots = (uint32_t)slots;
    return 0;
}

/* Full, and as large as it may be (or no memory left to grow it): forget
 * every pair. Ids keep growing, so an old one never means a new method;
 * the client is told to drop the names of the old ones (emit_forget_due)
 * before the next is named. */
static void emit_table_clear(void)
{
    memset(rbtrace.methods, 0, sizeof(*rbtrace.methods) * rbtrace.method_slots);
    rbtrace.methods_used = 0;
    rbtrace.forget_from = rbtrace.next_method_id;
}

/* Sends a due FORGET; -1 if it is still due (no room). */
static int emit_forget_due(void)
{
    if (rbtrace.forget_from == 0) return 0;
    emit_begin();
    rbtrace_event_pack_forget(&scratch_pk, rbtrace.forget_from);
    if (emit_commit() != 0) return -1;
    rbtrace.forget_from = 0;
    return 0;
}

struct rbtrace_recent_slot rbtrace_recent_methods[RBTRACE_RECENT_METHODS];

/* The pairs a table of slots holds before it grows or starts afresh. */
#define EMIT_TABLE_FILL(slots) ((slots) / 4 * 3)

/* The classes of the table's pairs, in the order they were named (the
 * table holds at most EMIT_NAMED_MAX pairs before it starts afresh):
 * what rbtrace_emit_mark keeps. mmap'd, like the table. */
#define EMIT_NAMED_MAX EMIT_TABLE_FILL(RBTRACE_METHOD_SLOTS_MAX)
static VALUE *named_classes;

/*
 * The table's key for klass, and in *kept the class rbtrace_emit_mark
 * keeps for it. A singleton class of an object that is not a class or
 * module (def obj.x, define_singleton_method, OpenStruct's accessors)
 * lives only as long as its object, and keeping it would keep the object,
 * with all it holds: such a pair's key is the object's class with bit 0
 * set (no object's address has it), as its name says ("Class.method").
 * Any other class is its own key.
 */
static VALUE emit_key_of(VALUE klass, VALUE *kept)
{
    if (RB_TYPE_P(klass, T_CLASS) && FL_TEST(klass, FL_SINGLETON)) {
        VALUE obj = emit_attached_object(klass);

        if (!RB_TYPE_P(obj, T_CLASS) && !RB_TYPE_P(obj, T_MODULE)) {
            *kept = rb_obj_class(obj);
            return *kept | 1;
        }
    }
    *kept = klass;
    return klass;
}

/* rbtrace_emit_method_id (emit.h) when the pair is not a recent
 * one: the table, or a new name. Out of line, so that the hot path keeps
 * no name buffer (and no stack protector) of its own. */
__attribute__((noinline)) uint32_t rbtrace_emit_method_id_lookup(VALUE klass, ID mid)
{
    struct rbtrace_method_slot *slot;
    size_t i;
    char name[EMIT_NAME_MAX];
    size_t len;
    VALUE kept, key = emit_key_of(klass, &kept);

    /* The recent pairs hold only classes that are their own keys: they
     * are matched against the class the VM gives. */
    i = emit_slot_of(key, mid, rbtrace.method_slots);
    for (;;) {
        slot = &rbtrace.methods[i];
        if (slot->id == 0) break;
        if (slot->klass == key && slot->mid == mid) {
            if (key == klass) *rbtrace_recent_method(klass, mid) = *slot;
            return slot->id;
        }
        i = (i + 1) & (rbtrace.method_slots - 1);
    }
    /* A new pair: the table may first have to grow, or start afresh. */
    if (rbtrace.methods_used >= EMIT_TABLE_FILL(rbtrace.method_slots)) {
        if (emit_table_grow() != 0) {
            emit_table_clear();
            memset(rbtrace_recent_methods, 0, sizeof(rbtrace_recent_methods));
        }
        for (i = emit_slot_of(key, mid, rbtrace.method_slots); rbtrace.methods[i].id;
             i = (i + 1) & (rbtrace.method_slots - 1))
            ;
        slot = &rbtrace.methods[i];
    }
    if (emit_forget_due() != 0) return 0;
    len = emit_format_name(name, klass, mid);
    emit_begin();
    rbtrace_event_pack_method(&scratch_pk, rbtrace.next_method_id, name, len);
    if (emit_commit() != 0) return 0;
    slot->klass = key;
    slot->mid = mid;
    slot->id = rbtrace.next_method_id++;
    named_classes[rbtrace.methods_used++] = kept;
    if (key == klass) *rbtrace_recent_method(klass, mid) = *slot;
    return slot->id;
}

/* ---- events ---- */

/* rbtrace_emit_recent_call's, where the clock needs a call: out of line,
 * so that the hook keeps no stack frame for it. */
__attribute__((noinline)) void rbtrace_emit_call_at_now(char *out, enum rbtrace_event_type type,
                                                        uint32_t id)
{
    rbtrace_emit_call_at(out, type, id, rbtrace_clock_ns() - rbtrace.clock_origin_ns);
}

/* A CALL or RETURN that cannot be encoded in place (emit.h). A full
 * ring (a client that stopped reading) costs no encoding. */
__attribute__((noinline)) void rbtrace_emit_call_pushed(enum rbtrace_event_type type, uint64_t time,
                                                        uint32_t id)
{
    const size_t room = RBTRACE_CALL_EVENT_MAX + RBTRACE_LOST_EVENT_MAX;
    char bytes[RBTRACE_CALL_EVENT_MAX];
    uint64_t thread = rbtrace_thread_id();

    if (rbtrace_alloc_pending)
        rbtrace_emit_alloc_pending(); /* --alloc: the objects before it, first */
    if (rbtrace_ring_space(&rbtrace.ring, room) < room) {
        rbtrace.lost++;
        return;
    }
    if (emit_push(
            bytes,
            rbtrace_event_encode_call_chained(bytes, &rbtrace.chain, type, thread, time, id)) == 0)
        rbtrace_call_chain_note(&rbtrace.chain, thread, time);
}

/* A CALL with the values of its trace expressions (Arrays of Strings),
 * encoded once they are computed: nothing is held while they are. A call
 * from before the session's start (a detach and a new attach came while
 * its expressions were evaluated) is not this session's. */
void rbtrace_emit_call_args(VALUE klass, ID mid, uint64_t now, VALUE exprs, VALUE values)
{
    uint64_t thread = rbtrace_thread_id(), time = now - rbtrace.clock_origin_ns;
    uint32_t id;
    long i, n = RARRAY_LEN(exprs);

    if (rbtrace.calls_ended || now < rbtrace.clock_origin_ns) return;
    /* first: before the scratch is ours, and the method's id taken after */
    if (rbtrace.thread_names && rbtrace.attached && rbtrace_emit_thread_name_before(now)) return;
    if (rbtrace_alloc_pending)
        rbtrace_emit_alloc_pending(); /* --alloc: the objects before it, first */
    id = rbtrace.attached ? rbtrace_emit_method_id(klass, mid) : 0;
    if (id == 0) {
        rbtrace.lost++;
        return;
    }
    if (n > RBTRACE_EXPRS_MAX) n = RBTRACE_EXPRS_MAX;
    emit_begin();
    rbtrace_event_pack_call_args(&scratch_pk, thread, time, id, (uint32_t)n);
    for (i = 0; i < n; i++) {
        VALUE e = RARRAY_AREF(exprs, i), v = RARRAY_AREF(values, i);
        rbtrace_event_pack_expr(&scratch_pk, RSTRING_PTR(e), RSTRING_LEN(e), RSTRING_PTR(v),
                                RSTRING_LEN(v));
    }
    if (scratch.overflow) {
        /* Too long even after truncation: send the call without values. */
        emit_begin();
        rbtrace_event_pack_call(&scratch_pk, RBTRACE_EV_CALL, thread, time, id);
    }
    if (emit_commit() == 0) rbtrace_call_chain_note(&rbtrace.chain, thread, time);
}

/* A call event preceded by its thread's name: the checks and the method's
 * id once more after it (rbtrace_emit_thread_name_before). Out of line:
 * a few per GVL hand-off, and only with --thread-names. */
void rbtrace_emit_call_named(rb_event_flag_t event, VALUE klass, ID mid, uint64_t now)
{
    uint32_t id;

    if (rbtrace_emit_thread_name_before(now)) return;
    if (rbtrace_emit_call_refused() || (id = rbtrace_emit_method_id(klass, mid)) == 0) {
        rbtrace.lost++;
        return;
    }
    rbtrace_emit_call_of(event, id, now);
}

/* A call slower than the --slow threshold (slow.c). */
void rbtrace_emit_slow(VALUE klass, ID mid, uint64_t start_ns, uint64_t duration_ns, uint32_t depth)
{
    uint32_t id;

    if (rbtrace.calls_ended) return;
    /* first: the method's id is taken after it (rbtrace_emit_thread_name_before) */
    if (rbtrace.thread_names && rbtrace.attached) {
        rbtrace_thread_name_note(rbtrace_thread_id());
        if (rbtrace.calls_ended) return;
    }
    id = rbtrace.attached ? rbtrace_emit_method_id(klass, mid) : 0;
    if (id == 0) {
        rbtrace.lost++;
        return;
    }
    emit_begin();
    rbtrace_event_pack_slow(&scratch_pk, rbtrace_thread_id(), start_ns - rbtrace.clock_origin_ns,
                            id, duration_ns, depth);
    emit_commit();
}

/* A thread's name (threadnames.c), before its call event. */
int rbtrace_emit_thread_name(uint64_t thread, const char *name, size_t len)
{
    emit_begin();
    rbtrace_event_pack_thread_name(&scratch_pk, thread, name, len);
    return emit_commit();
}

/* One garbage collection (gcwatch.c), from a postponed job. */
void rbtrace_emit_gc(uint64_t thread, uint64_t start_ns, uint64_t mark_ns, uint64_t sweep_ns,
                     const char *major_by, const char *gc_by)
{
    if (!rbtrace.attached) return;
    emit_begin();
    rbtrace_event_pack_gc(&scratch_pk, thread, start_ns - rbtrace.clock_origin_ns,
                          mark_ns + sweep_ns, mark_ns, sweep_ns, major_by, gc_by);
    emit_commit();
}

/* --profile (profile.c): a frame's name, once; 0 if sent. */
int rbtrace_emit_profile_frame(uint64_t frame_id, const char *name, size_t name_len,
                               const char *path, size_t path_len, uint64_t line)
{
    if (!rbtrace.attached) return -1;
    if (name_len > EMIT_NAME_MAX) name_len = EMIT_NAME_MAX;
    if (path_len > EMIT_NAME_MAX) path_len = EMIT_NAME_MAX;
    emit_begin();
    rbtrace_event_pack_profile_frame(&scratch_pk, frame_id, name, name_len, path, path_len, line);
    return emit_commit();
}

/* --profile: one sample (time since the clock origin already); 0 if sent. */
int rbtrace_emit_profile_sample(uint64_t thread, uint64_t time_ns, uint32_t state, uint64_t weight,
                                const uint64_t *frames, uint32_t n)
{
    if (!rbtrace.attached) return -1;
    emit_begin();
    rbtrace_event_pack_profile_sample(&scratch_pk, thread, time_ns, state, weight, frames, n);
    return emit_commit();
}

/* --profile: samples missed; 0 if sent. */
int rbtrace_emit_profile_missed(uint64_t count)
{
    if (!rbtrace.attached) return -1;
    emit_begin();
    rbtrace_event_pack_profile_missed(&scratch_pk, count);
    return emit_commit();
}

/* An exception raised (raisewatch.c): class, message, location Strings;
 * reraise as in protocol.h's RAISE. */
void rbtrace_emit_raise(uint64_t now, VALUE klass, VALUE message, VALUE location, uint64_t reraise)
{
    if (!rbtrace.attached) return;
    if (!RB_TYPE_P(klass, T_STRING) || !RB_TYPE_P(message, T_STRING) ||
        !RB_TYPE_P(location, T_STRING))
        return;
    if (rbtrace.thread_names) rbtrace_thread_name_note(rbtrace_thread_id());
    emit_begin();
    rbtrace_event_pack_raise(&scratch_pk, rbtrace_thread_id(), now - rbtrace.clock_origin_ns,
                             RSTRING_PTR(klass), RSTRING_LEN(klass), RSTRING_PTR(message),
                             RSTRING_LEN(message), RSTRING_PTR(location), RSTRING_LEN(location),
                             reraise);
    emit_commit();
}

/*
 * Events of any size (messages, eval results, DETACHED), from a Ruby thread
 * that holds the GVL, never on the hot path.
 *
 * Only the thread carrying out a command, outside a postponed job, waits
 * for room (emit_may_wait): it is rbtrace's own, and what it pushes is what
 * its client waits on. While it waits, without the GVL, every other thread
 * runs on and drops its events (counted): hooks see big_event. An app
 * thread (a --devmode notice at the end of a class body, a --slow notice)
 * never waits on the client: waiting would stall the app, and a second
 * pusher waiting meanwhile would clear big_event under the first, or push
 * into the middle of its event. A postponed job (3.3+, channel.c) never
 * waits either: an interrupt that ended the wait (an app's Timeout) could
 * only be re-raised inside the job, whose runner swallows it. Those push
 * the whole event at once, or drop it and count it, as the hooks do.
 */
static int emit_may_wait(void)
{
    return rbtrace.servicing && !rbtrace.in_job && rbtrace.servicing_thread == rbtrace_thread_id();
}

/* A waiting push (emit_may_wait's thread). Gives up if the writer stops. */
struct emit_wait_arg {
    size_t need;
    uint64_t head;          /* the ring's head: no producer moves it now */
    volatile int unblocked; /* set by emit_wait_unblock */
};

/* Free bytes, without the GVL: reads tail only (tail_seen is the GVL
 * holder's), from a head that no producer moves while big_event is set. */
static size_t emit_space_nogvl(const struct emit_wait_arg *arg)
{
    uint64_t tail = __atomic_load_n(&rbtrace.ring.tail, __ATOMIC_ACQUIRE);
    return rbtrace.ring.size - (size_t)(arg->head - tail);
}

static void *emit_wait_nogvl(void *p)
{
    struct emit_wait_arg *arg = p;
    struct timespec ts = { 0, 1000000 };
    int waited_ms = 0;

    while (emit_space_nogvl(arg) < arg->need && !rbtrace.peer_gone && !arg->unblocked &&
           rbtrace.writer_running && waited_ms < 10000) {
        nanosleep(&ts, NULL);
        waited_ms++;
    }
    return NULL;
}

static void emit_wait_unblock(void *p)
{
    ((struct emit_wait_arg *)p)->unblocked = 1;
}

/* Returns 0 (pushed, or dropped and counted), or -1 when an interrupt
 * ended a wait: its state in *state, to re-raise (docs/DESIGN.md, "Errors"). */
static int emit_push_big(const char *data, size_t len, int *state)
{
    struct emit_wait_arg arg;
    size_t done = 0;

    *state = 0;
    if (!rbtrace.attached || rbtrace.sealed) return 0;
    if (rbtrace.big_event) {
        /* Never: only one thread waits (emit_may_wait). Dropped rather
         * than pushed into the middle of the other event. */
        rbtrace.lost++;
        return 0;
    }
    rbtrace.big_event = 1;
    while (done < len) {
        size_t chunk = len - done, space = rbtrace_ring_space(&rbtrace.ring, chunk);
        if (chunk > rbtrace.ring.size / 2) chunk = rbtrace.ring.size / 2;
        if (space < chunk) {
            arg.need = chunk;
            arg.head = rbtrace.ring.head;
            arg.unblocked = 0;
            /* An interrupt for this thread (kill at exit) ends the wait;
             * it is re-raised once the state is consistent again. */
            if (rbtrace_nogvl(emit_wait_nogvl, &arg, emit_wait_unblock, &arg, state) != 0 ||
                rbtrace_ring_space(&rbtrace.ring, chunk) < chunk)
                break;
        }
        rbtrace_ring_push(&rbtrace.ring, data + done, chunk);
        done += chunk;
    }
    rbtrace.big_event = 0;
    /* Big events are the ones a client waits on: deliver them now. */
    if (done > 0) rbtrace_writer_nudge();
    if (done < len) {
        /* The stream cannot be resynchronised after half an event. */
        rbtrace.peer_gone = 1;
        rbtrace_channel_wake();
    }
    return *state ? -1 : 0;
}

/* Reports dropped events from a thread that may wait for room; -1 as
 * emit_push_big. */
static int emit_lost_big(int *state)
{
    char lost[RBTRACE_LOST_EVENT_MAX];
    uint64_t count = rbtrace.lost;

    *state = 0;
    if (count == 0) return 0;
    rbtrace.lost = 0;
    return emit_push_big(lost, rbtrace_event_encode_lost(lost, count), state);
}

/* Pushes (and frees) a packed event, after any loss report; -1 when an
 * interrupt arrived while waiting, its state in *state (never on a thread
 * that may not wait, which pushes it whole now or drops it). */
static int emit_sbuffer_push(msgpack_sbuffer *sb, int *state)
{
    int rc = 0;

    *state = 0;
    if (!emit_may_wait()) {
        /* A client waits on these: deliver them now. */
        if (emit_push(sb->data, sb->size) == 0) rbtrace_writer_nudge();
    } else {
        rc = emit_lost_big(state);
        if (rc == 0) rc = emit_push_big(sb->data, sb->size, state);
    }
    msgpack_sbuffer_destroy(sb);
    return rc;
}

/* Returns 0 once the message is in the ring, -1 if it was dropped (a
 * thread that may not wait, with the ring full: counted as lost). */
int rbtrace_emit_message(enum rbtrace_event_type type, const char *fmt, ...)
{
    char text[1024];
    msgpack_sbuffer sb;
    msgpack_packer pk;
    va_list ap;
    uint64_t lost = rbtrace.lost;
    int n, state;

    va_start(ap, fmt);
    n = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n >= sizeof(text)) n = sizeof(text) - 1;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rbtrace_event_pack_message(&pk, type, text, (size_t)n);
    if (emit_sbuffer_push(&sb, &state) != 0) rb_jump_tag(state);
    return rbtrace.attached && rbtrace.lost <= lost ? 0 : -1;
}

void rbtrace_emit_eval_result(uint32_t eval_id, enum rbtrace_eval_status status, VALUE text)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int state;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rbtrace_event_pack_eval_result(&pk, eval_id, status, RSTRING_PTR(text), RSTRING_LEN(text));
    RB_GC_GUARD(text);
    if (emit_sbuffer_push(&sb, &state) != 0) rb_jump_tag(state);
}

/*
 * A GVL wait of thread, from start_ns (CLOCK_MONOTONIC) for wait_ns. Called
 * by gvlwatch.c's thread hook as the thread takes the GVL: encoded in
 * place, pushed with no Ruby call, no allocation and no system call.
 */
void rbtrace_emit_gvl(uint64_t thread, uint64_t start_ns, uint64_t wait_ns)
{
    char buf[RBTRACE_GVL_EVENT_MAX];
    uint64_t at = start_ns > rbtrace.clock_origin_ns ? start_ns - rbtrace.clock_origin_ns : 0;

    if (!rbtrace.attached) return;
    emit_push(buf, rbtrace_event_encode_gvl(buf, thread, at, wait_ns));
}

/*
 * --alloc: thread allocated count objects (sampled) since its last ALLOC.
 * Called by allocwatch.c's hook, inside Ruby's allocator, and before a
 * call event: encoded in place, no Ruby call, no allocation.
 */
uint64_t rbtrace_alloc_pending, rbtrace_alloc_pending_thread;

/* The pending count goes out, as its thread's ALLOC. */
void rbtrace_emit_alloc_pending(void)
{
    uint64_t n = rbtrace_alloc_pending;

    rbtrace_alloc_pending = 0;
    if (n) rbtrace_emit_alloc(rbtrace_alloc_pending_thread, n);
}

void rbtrace_emit_alloc(uint64_t thread, uint64_t count)
{
    char buf[RBTRACE_ALLOC_EVENT_MAX];

    if (!rbtrace.attached) return;
    emit_push(buf, rbtrace_event_encode_alloc(buf, thread, count));
}

/* --alloc: one of the top sites, at the detach (hook gone, GVL held). */
void rbtrace_emit_alloc_site(uint64_t count, const char *klass, size_t klass_len, const char *path,
                             size_t path_len, uint64_t line, const char *label, size_t label_len)
{
    emit_begin();
    rbtrace_event_pack_alloc_site(&scratch_pk, count, klass, klass_len, path, path_len, line, label,
                                  label_len);
    if (emit_commit() == 0) rbtrace_writer_nudge();
}

/* ATTACHED, with the features the session can offer (RBTRACE_FEATURE_*),
 * which the commands (command.c) know from the modes above. */
void rbtrace_emit_attached(uint32_t features)
{
    struct timespec wall;
    uint64_t wall_ns = 0;

    if (clock_gettime(CLOCK_REALTIME, &wall) == 0)
        wall_ns = (uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec;
    emit_begin();
    rbtrace_event_pack_attached_features(&scratch_pk, (uint32_t)getpid(), ruby_description,
                                         rbtrace.clock_origin_ns, wall_ns, features);
    if (emit_commit() == 0) rbtrace_writer_nudge();
}

/*
 * SYNCED, in order after every event the commands before it caused (the
 * "not traced" errors), and never dropped: the client says it is attached
 * only when it comes (protocol.h). From the helper thread, which may wait.
 */
void rbtrace_emit_synced(int tracing)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int state;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rbtrace_event_pack_synced(&pk, tracing != 0);
    if (emit_sbuffer_push(&sb, &state) != 0) rb_jump_tag(state);
}

/*
 * The trace ends where the detach begins: removing the wrappers one by one
 * calls Module#method_removed after each, where Ruby may run other
 * threads, which would otherwise record calls with half the wrappers gone
 * (an outer call unwrapped, its inner calls still wrapped). Calls and
 * returns from here on are not recorded, nor counted as lost.
 */
void rbtrace_emit_end_calls(void)
{
    rbtrace.calls_ended = 1;
}

/*
 * The last events of a session: the final loss count, then DETACHED, after
 * which the ring takes nothing more. The app's threads run again while the
 * writer drains (its join gives up the GVL), and a call that entered a
 * wrapper before the detach would otherwise still record its return,
 * after DETACHED, and without the calls it made once the wrappers were
 * gone. other_gcs: the collections other Ractors ran meanwhile, unseen
 * (gcwatch.c, told by the caller). Returns 0, or -1 when an interrupt came
 * while waiting for room: its state in *state, to re-raise after the detach.
 */
int rbtrace_emit_detached(uint64_t other_gcs, int *state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int rc;

    uint64_t other = rbtrace_ractors_take_other();
    char text[160];
    int n;

    /* Not the shared scratch: pushing may give up the GVL, and a thread
     * still returning from a traced call could reuse the scratch. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    /* Told once, with the session's total (ractors.c). */
    if (other &&
        (n = snprintf(text, sizeof(text),
                      "%llu calls in other Ractors not traced (rbtrace "
                      "traces the main Ractor only)",
                      (unsigned long long)other)) > 0)
        rbtrace_event_pack_message(&pk, RBTRACE_EV_NOTICE, text,
                                   (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
    /* Likewise the collections other Ractors' threads ran (gcwatch.c). */
    if (other_gcs &&
        (n = snprintf(text, sizeof(text),
                      "%llu garbage collections run by other Ractors "
                      "not shown (rbtrace sees the main Ractor's only)",
                      (unsigned long long)other_gcs)) > 0)
        rbtrace_event_pack_message(&pk, RBTRACE_EV_NOTICE, text,
                                   (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1);
    rbtrace_event_pack_detached(&pk);
    rc = emit_sbuffer_push(&sb, state);
    rbtrace.sealed = 1;
    return rc;
}

/*
 * The method table's classes are compared by address: they are kept alive,
 * and in place (rb_gc_mark pins), while the table names them, until the
 * session ends or the table starts afresh. Otherwise a class freed (an
 * anonymous one, a constant removed) or moved (GC.compact) would leave its
 * address to another class, which would be shown under the first one's
 * name. (A plain object's singleton class is not kept: emit_key_of.)
 * Marked from the list of the pairs' classes: a walk of the table would
 * cost every GC, minor ones too, a pass over 8,192 slots or more.
 */
void rbtrace_emit_mark(void)
{
    uint32_t i;

    if (named_classes == NULL) return;
    for (i = 0; i < rbtrace.methods_used; i++) rb_gc_mark(named_classes[i]);
}

static void emit_named_classes_free(void)
{
    /* munmap fails only for a bad range, which ours never is. */
    if (named_classes) (void)munmap(named_classes, EMIT_NAMED_MAX * sizeof(VALUE));
    named_classes = NULL;
}

/* Allocates the ring and the method table for a new session. */
int rbtrace_emit_open(void)
{
    rbtrace.methods = emit_table_alloc(RBTRACE_METHOD_SLOTS);
    if (rbtrace.methods == NULL) return -1;
    rbtrace.method_slots = RBTRACE_METHOD_SLOTS;
    rbtrace.methods_used = 0;
    named_classes = mmap(NULL, EMIT_NAMED_MAX * sizeof(VALUE), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (named_classes == MAP_FAILED) named_classes = NULL;
    if (named_classes == NULL || rbtrace_ring_init(&rbtrace.ring, RBTRACE_RING_SIZE) != 0) {
        emit_named_classes_free();
        emit_table_free(rbtrace.methods, rbtrace.method_slots);
        rbtrace.methods = NULL;
        return -1;
    }
    memset(&rbtrace.chain, 0, sizeof(rbtrace.chain));
    rbtrace.next_method_id = 1;
    rbtrace.forget_from = 0;
    memset(rbtrace_recent_methods, 0, sizeof(rbtrace_recent_methods));
    rbtrace.lost = 0;
    rbtrace_ractors_take_other();
    rbtrace.big_event = 0;
    rbtrace.sealed = 0;
    rbtrace.calls_ended = 0;
    msgpack_packer_init(&scratch_pk, &scratch, emit_buffer_write);
#ifndef HAVE_RB_CLASS_ATTACHED_OBJECT
    id_attached = rb_intern("__attached__");
#endif
    return 0;
}

void rbtrace_emit_close(void)
{
    rbtrace_ring_free(&rbtrace.ring);
    emit_table_free(rbtrace.methods, rbtrace.method_slots);
    rbtrace.methods = NULL;
    rbtrace.methods_used = 0;
    emit_named_classes_free();
}
