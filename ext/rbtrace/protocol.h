/*
 * protocol.h - the wire contract between the rbtrace extension (the target)
 * and the rbtrace client. Both sides include this header and nothing else
 * defines a message: change a message here, bump RBTRACE_PROTOCOL_VERSION.
 *
 * The client puts one ATTACH into a SysV message queue keyed by the
 * target's pid and signals the target, which connects to the socket the
 * ATTACH names (and checks who listens there). Every later command travels
 * client -> target over that connection: the queue, which any process of
 * the target's user can write, only wakes the target and names a socket,
 * and cannot reach into an attached session. Events travel target ->
 * client as a stream of msgpack arrays over the same connection.
 *
 * Every command and every event is one msgpack array whose first element
 * is its number (enum rbtrace_command_type / rbtrace_event_type). The fields
 * that follow are listed beside each number, in order, with their msgpack
 * types. Decoders reject a message whose fields are missing (other than
 * those marked optional) or mistyped; extra trailing fields are ignored so
 * that newer peers can add fields.
 */
#ifndef RBTRACE_PROTOCOL_H
#define RBTRACE_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* 4: commands after ATTACH come over the socket (3 sent them through the
 * queue, in chunks). 5: RAISE says whether it is a re-raise. 6: GVL
 * (the command and the event), ATTACHED's features. 7: ALLOC (the
 * command, the ALLOC and ALLOC_SITE events), THREAD_NAMES and THREAD_NAME.
 * 8: SYNC and SYNCED (a trace's client says "attached" once its modes are on).
 * 9: SYNCED says whether anything is traced (a trace of nothing fails).
 * 10: PROFILE (the command; the PROFILE_FRAME, PROFILE_SAMPLE and
 * PROFILE_MISSED events).
 * A target refuses an ATTACH of another version with
 * RBTRACE_REFUSED_VERSION, saying both versions. */
#define RBTRACE_PROTOCOL_VERSION 10

/*
 * Text that the extension's library holds (rbtrace.c) and no other: the
 * client looks for it in a process's rbtrace.so to tell this rbtrace from
 * the original gem (0.5.x and older), whose library has the same name and
 * whose client is another program (procfs.c). Never change it.
 */
#define RBTRACE_LIBRARY_MARK "rbtrace-library-mark: the extension of the C rbtrace client"

/*
 * Text the extension's library also holds, followed by the Ruby it was built
 * for ("3.4", its API version: the ABI an extension needs), so that --inject
 * picks a library that the target's Ruby can load (cli/inject.c).
 */
#define RBTRACE_BUILT_FOR_MARK "rbtrace-built-for-ruby: "

/* ---- the command queue ------------------------------------------------ */

/*
 * The target's queue key. Pids on Linux stay below 2^22, so the key is
 * unique per pid and never collides with the old gem's keys (-pid).
 */
#define RBTRACE_QUEUE_KEY(pid) ((key_t)(0x52000000 | ((pid)&0x00ffffff)))

/* Every queue message a client sends has this mtype. */
#define RBTRACE_MSG_TYPE 1
/* The target's own marker, read back at once when it makes or adopts a
 * queue, so that the kernel names it the queue's last reader (lrpid: what
 * proves a queue the target's, or stale once that pid is gone). */
#define RBTRACE_MARK_TYPE 2

/* Payload bytes in one queue message: well under Linux's MSGMAX (8192). */
#define RBTRACE_MSG_PAYLOAD 2048

/*
 * mtext[0] holds flags, mtext[1..] the ATTACH command, whole. The flags are
 * FIRST alone: protocol 3 sent longer commands in chunks, the first with
 * FIRST, all but the last with MORE; a target takes only a message that is
 * a whole command (so that an older target still reads a newer ATTACH,
 * and refuses it for its version).
 */
#define RBTRACE_CHUNK_MORE 0x01
#define RBTRACE_CHUNK_FIRST 0x02

/* A command longer than this is refused (the target drops it, with an error). */
#define RBTRACE_COMMAND_MAX (4 * 1024 * 1024)

struct rbtrace_msg {
    long mtype;                               /* RBTRACE_MSG_TYPE */
    unsigned char mtext[RBTRACE_MSG_PAYLOAD]; /* flags byte + command */
};

/* ---- commands on the socket ------------------------------------------ */

/*
 * After the attach, each command is a frame: its length in 4 bytes, big
 * endian (1 to RBTRACE_COMMAND_MAX), then the command. A target that reads
 * a length out of range says so (ERROR) and detaches: the stream is broken.
 */
#define RBTRACE_FRAME_HEADER 4

/* ---- commands: client -> target ---------------------------------------- */

/*
 * Every command is [type(uint), client_pid(uint), ...fields]. ATTACH comes
 * through the queue, every other command through the attached client's
 * socket: the target carries out no other command from the queue, and no
 * ATTACH from a socket. client_pid on the socket is the sender's own (the
 * connection, not the field, says who sent it).
 */
enum rbtrace_command_type {
    /* [1, client_pid, protocol_version(uint), socket_path(str)] */
    RBTRACE_CMD_ATTACH = 1,
    /* [2, client_pid] */
    RBTRACE_CMD_DETACH = 2,
    /* [3, client_pid, [selector(str), ...]]: selectors as the user wrote
     * them, trace expressions included ("String#gsub(self, @x)"). */
    RBTRACE_CMD_METHODS = 3,
    /* [4, client_pid] */
    RBTRACE_CMD_FIREHOSE = 4,
    /* [5, client_pid, eval_id(uint), code(str), timeout_ms(uint),
     *  result_format(uint, enum rbtrace_result_format, optional)]
     * result_format was added after version 1 as an optional trailing
     * field (no version bump): absent means RBTRACE_RESULT_INSPECT. */
    RBTRACE_CMD_EVAL = 5,
    /* [6, client_pid, threshold_ns(uint), cpu(bool), [selector(str), ...]]:
     * report calls that took at least threshold_ns, of wall time, or of the
     * thread's CPU time if cpu; only calls of the selectors (no trace
     * expressions), or of every method if the list is empty. */
    RBTRACE_CMD_SLOW = 6,
    /* [7, client_pid]: report each garbage collection (GC events) */
    RBTRACE_CMD_GC = 7,
    /* [8, client_pid]: report each exception raised (RAISE events) */
    RBTRACE_CMD_RAISE = 8,
    /* [9, client_pid]: the METHODS selectors that follow name their classes
     * by name: a class defined again under the same name (reloaded) is
     * traced again, and one not defined yet is traced once it is. */
    RBTRACE_CMD_DEVMODE = 9,
    /* [10, client_pid]: a program started by `rbtrace --exec` waits in
     * require 'rbtrace' until this arrives (its tracing is set up). */
    RBTRACE_CMD_RESUME = 10,
    /* [11, client_pid]: report each thread's every wait for the GVL (GVL
     * events), where ATTACHED's features have RBTRACE_FEATURE_GVL; a
     * target without it answers with an ERROR. */
    RBTRACE_CMD_GVL = 11,
    /* [12, client_pid, sample(uint)]: count the objects the app allocates
     * (ALLOC events), each sampled one (one in sample, at random: 1 counts
     * every object) counted as sample; at the detach, the sites that
     * allocated most (ALLOC_SITE events). sample 0 is refused (ERROR). */
    RBTRACE_CMD_ALLOC = 12,
    /* [13, client_pid]: name each thread of the trace (THREAD_NAME events)
     * from now on. */
    RBTRACE_CMD_THREAD_NAMES = 13,
    /* [14, client_pid]: answer SYNCED. The target carries out a client's
     * commands in order, so SYNCED tells the client that the commands it
     * sent before (the trace's modes) have been carried out: what happens
     * in the app from then on is traced. */
    RBTRACE_CMD_SYNC = 14,
    /* [15, client_pid, mode(uint, enum rbtrace_profile_mode), hz(uint)]:
     * sample the stack of every Ruby thread of the main Ractor hz times a
     * second (1 to RBTRACE_PROFILE_HZ_MAX) until the detach
     * (PROFILE_FRAME, PROFILE_SAMPLE and PROFILE_MISSED events). */
    RBTRACE_CMD_PROFILE = 15
};

enum rbtrace_profile_mode {
    RBTRACE_PROFILE_WALL = 0, /* every thread at every tick, whatever it does */
    RBTRACE_PROFILE_CPU = 1   /* threads by the CPU time they used (thread CPU clocks) */
};
#define RBTRACE_PROFILE_HZ_MAX 10000

/* PROFILE_SAMPLE's state of the thread when sampled. */
enum rbtrace_profile_state {
    RBTRACE_STATE_RUNNING = 0, /* it held the GVL, running Ruby or a C call */
    RBTRACE_STATE_GVL = 1,     /* it waited for the GVL (Ruby 3.2+) */
    RBTRACE_STATE_BLOCKED =
        2,               /* without the GVL: sleep, I/O, a lock (before 3.2: or waiting for it) */
    RBTRACE_STATE_GC = 3 /* it ran the garbage collector */
};
#define RBTRACE_STATE_MAX RBTRACE_STATE_GC

/* Most frames of one sample (deeper stacks keep their innermost). */
#define RBTRACE_PROFILE_FRAMES_MAX 128

/* ---- events: target -> client ------------------------------------------ */

/* Times are nanoseconds of CLOCK_MONOTONIC since the ATTACHED clock origin. */
enum rbtrace_event_type {
    /* [1, protocol_version(uint), target_pid(uint), ruby_version(str),
     *  clock_origin_ns(uint), wall_origin_ns(uint), features(uint, optional)]
     * wall_origin_ns is CLOCK_REALTIME at the same instant as the origin;
     * features the RBTRACE_FEATURE_* bits of what this target can do
     * (absent: none). */
    RBTRACE_EV_ATTACHED = 1,
    /* [2, reason(uint, enum rbtrace_refusal), client_pid(uint), message(str)] */
    RBTRACE_EV_REFUSED = 2,
    /* [3]: the target detached cleanly; nothing follows. */
    RBTRACE_EV_DETACHED = 3,
    /* [4, method_id(uint), name(str)]: names a method id once, before its
     * first CALL or RETURN. name is "Class#meth" or "Class.meth". */
    RBTRACE_EV_METHOD = 4,
    /* [5, thread_id(uint), time_ns(uint), method_id(uint)] */
    RBTRACE_EV_CALL = 5,
    /* [6, thread_id(uint), time_ns(uint), method_id(uint)] */
    RBTRACE_EV_RETURN = 6,
    /* [7, thread_id(uint), time_ns(uint), method_id(uint),
     *  [[expression(str), value(str)], ...]]: a CALL with trace expressions */
    RBTRACE_EV_CALL_ARGS = 7,
    /* [8, count(uint)]: events dropped because the client fell behind */
    RBTRACE_EV_LOST = 8,
    /* [9, eval_id(uint), status(uint, enum rbtrace_eval_status), text(str)] */
    RBTRACE_EV_EVAL_RESULT = 9,
    /* [10, message(str)]: a command failed in part or in whole */
    RBTRACE_EV_ERROR = 10,
    /* [11, message(str)]: something the user should know */
    RBTRACE_EV_NOTICE = 11,
    /* [12, thread_id(uint), time_ns(uint), method_id(uint), duration_ns(uint),
     *  depth(uint)]: a call slower than the SLOW threshold, sent when it
     * returns. time_ns is when it started; depth counts the watched calls
     * of its thread that were open around it (0: none). */
    RBTRACE_EV_SLOW = 12,
    /* [13, thread_id(uint), time_ns(uint), duration_ns(uint), mark_ns(uint),
     *  sweep_ns(uint), major_by(str), gc_by(str)]: one garbage collection,
     * sent once its sweeping ended. time_ns is its start; duration_ns the
     * time spent in the collector (marking + sweeping, which may come in
     * steps between which the app runs); major_by is "" for a minor GC,
     * else why it was major (GC.latest_gc_info's :major_by, e.g. "oldgen",
     * "force"); gc_by what started it (:gc_by, e.g. "newobj", "method"). */
    RBTRACE_EV_GC = 13,
    /* [14, thread_id(uint), time_ns(uint), class(str), message(str),
     *  location(str), reraise(uint)]: an exception raised; location is
     *  "path:line"; reraise is 0 for an exception's first raise, else how
     *  many times this same exception object has been raised again on this
     *  thread since (a `rescue => e; raise` through middleware): 1, 2, ... */
    RBTRACE_EV_RAISE = 14,
    /* [15, first_id(uint)]: the names of method ids below first_id are
     * forgotten (the target's table of them was full and started afresh):
     * they are not used again, and methods are named anew. Calls open
     * before it are not matched by later RETURNs. */
    RBTRACE_EV_FORGET = 15,
    /* [16, delta_ns(uint), method_id(uint)]: a CALL of the same thread as
     * the stream's last call event, delta_ns after it. The call events are
     * CALL, RETURN, CALL_ARGS, CALL_NEXT and RETURN_NEXT; a stream's first
     * call event is never a _NEXT. Most of a trace is in this form: 3 to 7
     * bytes an event where CALL takes 13 to 29 (thread ids are addresses,
     * times grow past 2^32 ns after 4 s). */
    RBTRACE_EV_CALL_NEXT = 16,
    /* [17, delta_ns(uint), method_id(uint)]: a RETURN, the same way */
    RBTRACE_EV_RETURN_NEXT = 17,
    /* [18, thread_id(uint), time_ns(uint), wait_ns(uint)]: the thread
     * waited wait_ns for the GVL from time_ns (READY to RESUMED), and now
     * runs. Sent by the thread as it takes the GVL, so before its next call
     * event: the wait belongs to the calls of that thread then open. Not a
     * call event (the _NEXT chain passes over it). The target answers the
     * GVL command with one of wait 0 once its hook is in place: waits are
     * measured from there on (a target that cannot, sends none). */
    RBTRACE_EV_GVL = 18,
    /* [19, thread_id(uint), count(uint)]: the thread allocated about count
     * objects (sampled, ALLOC's sample) since its last ALLOC. Sent before
     * the next call event of any thread, and when another thread starts
     * allocating: the objects belong to the calls of that thread then
     * open. Not a call event (the _NEXT chain passes over it). */
    RBTRACE_EV_ALLOC = 19,
    /* [20, count(uint), class(str), path(str), line(uint), label(str)]: one
     * of the sites that allocated most (by count, sampled), sent at the
     * detach, most first: the object's class ("" when Ruby had not given
     * it one yet: an internal, hidden object), where (the innermost Ruby
     * frame: path "" and line 0 if there was none), and that frame's method
     * ("Foo#bar", "block in Foo#bar"). */
    RBTRACE_EV_ALLOC_SITE = 20,
    /* [21, thread_id(uint), name(str)]: after THREAD_NAMES, the name
     * (Thread#name) of a thread, "" for none, sent before the thread's
     * first call event of the trace, and again before its first call event
     * after another thread's when the name changed meanwhile. At most
     * RBTRACE_THREAD_NAME_MAX bytes (cut, not necessarily at a character's
     * end). Not a call event (the _NEXT chain passes over it). */
    RBTRACE_EV_THREAD_NAME = 21,
    /* [22, tracing(uint)]: the answer to SYNC (every command sent before it
     * was carried out). tracing is 0 when the session traces nothing (every
     * selector failed, and no other mode is on: no --gc, --raise, --gvl,
     * --alloc, --slow, -f, and no --devmode waiting for its classes), else 1. */
    RBTRACE_EV_SYNCED = 22,
    /* [23, frame_id(uint), name(str), path(str), line(uint)]: names a
     * frame id once, before the first PROFILE_SAMPLE that has it: name as
     * stackprof names it ("Foo#bar", "block in Foo#bar", "Integer#times"),
     * path "" and line 0 for a C method. */
    RBTRACE_EV_PROFILE_FRAME = 23,
    /* [24, thread_id(uint), time_ns(uint), state(uint, enum
     *  rbtrace_profile_state), weight(uint), [frame_id(uint), ...]]: one
     * sample of a thread's stack, innermost frame first, standing for
     * weight ticks (cpu mode: the CPU time of weight ticks). An empty list
     * is the same stack as the thread's sample before. */
    RBTRACE_EV_PROFILE_SAMPLE = 24,
    /* [25, count(uint)]: samples missed (the target's sample buffer full,
     * a frame it could not name, the ring full). A thread that takes a
     * tick late, or a sampler that wakes late, is no miss: the next sample
     * has the weight of the ticks it stands for. */
    RBTRACE_EV_PROFILE_MISSED = 25
};

/* ATTACHED's features: what the target can do beyond every version's. */
enum rbtrace_feature {
    RBTRACE_FEATURE_GVL = 1 /* GVL waits: Ruby 3.2+'s thread event hooks */
};

enum rbtrace_refusal {
    RBTRACE_REFUSED_BUSY = 1,    /* another client (client_pid) is attached */
    RBTRACE_REFUSED_VERSION = 2, /* protocol versions differ */
    RBTRACE_REFUSED_PEER = 3     /* the socket's owner may not attach */
};

/* How an EVAL's result becomes the EVAL_RESULT text. */
enum rbtrace_result_format {
    RBTRACE_RESULT_INSPECT = 0, /* the result's #inspect (rbtrace -e) */
    RBTRACE_RESULT_TEXT = 1     /* the result, a String, as is (the reports) */
};
#define RBTRACE_RESULT_FORMAT_MAX RBTRACE_RESULT_TEXT

enum rbtrace_eval_status {
    RBTRACE_EVAL_OK = 0,     /* text is the result (see rbtrace_result_format) */
    RBTRACE_EVAL_RAISED = 1, /* text is "Class: message\n\tbacktrace" */
    RBTRACE_EVAL_SYNTAX = 2, /* text is the syntax error's message */
    RBTRACE_EVAL_TIMEOUT = 3 /* the code ran past its timeout; killed */
};

/* Longest value of a trace expression, in bytes, before "..." */
#define RBTRACE_VALUE_MAX 256

/* Longest thread name a THREAD_NAME carries, in bytes (longer ones cut). */
#define RBTRACE_THREAD_NAME_MAX 256

#endif
