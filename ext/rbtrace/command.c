/*
 * command.c - carries out commands: attach (connect to the client's
 * socket, check who is there), detach, method selectors, firehose, eval.
 * ATTACH comes from the queue; every other command from the attached
 * client's socket (channel.c).
 *
 * Runs with the GVL, on the helper thread (or a postponed job on 3.3+).
 * Every Ruby call is made under rbtrace_protect: an exception must never
 * escape into the helper thread's loop or an app thread.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "codec.h"
#include "command.h"
#include "devmode.h"
#include "emit.h"
#include "profile.h"
#include "gcwatch.h"
#include "gvlwatch.h"
#include "allocwatch.h"
#include "threadnames.h"
#include "trace.h"
#include "writer.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static ID id_eval_for_client;

/* ---- attach ---- */

/* Does connect's errno mean that the client is simply gone? No socket
 * (removed), or nobody listening on it (the client killed). */
static int command_socket_gone(int err)
{
    return err == ENOENT || err == ECONNREFUSED;
}

/* Connects to the client's socket; -1 if it is not there or not ours. */
static int command_connect(const struct rbtrace_str *path)
{
    struct sockaddr_un addr;
    struct ucred cred;
    socklen_t cred_len = sizeof(cred);
    int fd;

    if (path->len == 0 || path->len >= sizeof(addr.sun_path)) return -1;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path->ptr, path->len);

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "rbtrace: cannot create a socket to reach the tracer: %s\n",
                strerror(errno));
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        /* Said here: the client only sees that we never connected. But not
         * for a client that went away (it gave up waiting and removed its
         * socket, or was killed and left it): it told its user already,
         * and the app's log is no place for it. */
        if (!command_socket_gone(errno))
            fprintf(stderr,
                    "rbtrace: cannot connect to the tracer's socket %s: %s (is the "
                    "rbtrace client still running, and may this process reach its socket?)\n",
                    addr.sun_path, strerror(errno));
        goto close_fd;
    }
    /* The listener must be our own user (or root): nobody else may read
     * our events, whatever path the command named. */
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) goto close_fd;
    if (cred.uid != geteuid() && cred.uid != 0) {
        fprintf(stderr, "rbtrace: refused to attach to a tracer of uid %d (pid %d)\n",
                (int)cred.uid, (int)cred.pid);
        goto close_fd;
    }
    return fd;

close_fd:
    close(fd);
    return -1;
}

/* Tells a client why it may not attach, then hangs up. */
static void command_refuse(int fd, enum rbtrace_refusal reason, pid_t client, const char *why)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    size_t off = 0;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rbtrace_event_pack_refused(&pk, reason, (uint32_t)client, why);
    while (off < sb.size) {
        ssize_t n = send(fd, sb.data + off, sb.size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += (size_t)n;
    }
    msgpack_sbuffer_destroy(&sb);
    close(fd);
}

/*
 * Whether the attached client is gone: its pid no longer exists, or, for a
 * client outside our PID namespace (an rbtrace on the host, tracing us in a
 * container: it has no pid here and sends 0), its connection hung up
 * (docs/DESIGN.md, "Containers").
 */
static int command_client_gone(void)
{
    struct pollfd p = { rbtrace.sock, POLLRDHUP, 0 };

    if (rbtrace.client_pid != 0) return kill(rbtrace.client_pid, 0) != 0 && errno == ESRCH;
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

/* Is the attached client still there? A dead one is forgotten. */
static int command_busy(void)
{
    if (!rbtrace.attached) return 0;
    if (command_client_gone()) {
        rbtrace_command_detach(0);
        return 0;
    }
    return 1;
}

static void command_attach(const struct rbtrace_command *cmd)
{
    char why[256];
    int fd, flags, err;

    /* The attached client's ATTACH again: nothing to do. Clients outside
     * our PID namespace all send 0: not one of them. */
    if (rbtrace.attached && cmd->client_pid != 0 && cmd->client_pid == (uint32_t)rbtrace.client_pid)
        return;
    fd = command_connect(&cmd->text);
    if (fd < 0) return;
    if (command_busy()) {
        if (rbtrace.client_pid != 0)
            snprintf(why, sizeof(why), "already traced by rbtrace pid %d", (int)rbtrace.client_pid);
        else snprintf(why, sizeof(why), "already traced by an rbtrace outside this PID namespace");
        command_refuse(fd, RBTRACE_REFUSED_BUSY, rbtrace.client_pid, why);
        return;
    }
    if (cmd->protocol_version != RBTRACE_PROTOCOL_VERSION) {
        snprintf(why, sizeof(why),
                 "protocol version %u, but this process speaks %d: use the "
                 "rbtrace client of the gem version the app loaded (rbtrace " RBTRACE_VERSION ")",
                 cmd->protocol_version, RBTRACE_PROTOCOL_VERSION);
        command_refuse(fd, RBTRACE_REFUSED_VERSION, 0, why);
        return;
    }
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || rbtrace_emit_open() != 0) {
        command_refuse(fd, RBTRACE_REFUSED_PEER, 0, "out of memory or descriptors in the target");
        return;
    }
    rbtrace_channel_reset_socket(); /* before the writer watches it */
    rbtrace.sock = fd;
    rbtrace.client_pid = (pid_t)cmd->client_pid;
    rbtrace.clock_origin_ns = rbtrace_clock_ns();
    rbtrace.attached = 1;
    if (rbtrace_writer_start() != 0) {
        err = errno;
        fprintf(stderr, "rbtrace: cannot start the writer thread: %s\n", strerror(err));
        snprintf(why, sizeof(why),
                 "process %d cannot start its writer thread: %s (short of "
                 "file descriptors or threads? try again once it has fewer)",
                 (int)getpid(), strerror(err));
        rbtrace.attached = 0;
        rbtrace.sock = -1;
        rbtrace_emit_close();
        command_refuse(fd, RBTRACE_REFUSED_PEER, 0, why);
        return;
    }
    rbtrace_emit_attached(rbtrace_gvl_supported() ? RBTRACE_FEATURE_GVL : 0);
}

/* ---- detach ---- */

/* Removes every hook, delivers what is left and closes the session. An
 * interrupt that arrived while waiting for the writer is re-raised only
 * once all of that is done. */
void rbtrace_command_detach(int tell_client)
{
    int state = 0, stop_state;

    if (!rbtrace.attached) return;
    rbtrace_emit_end_calls();
    rbtrace_trace_clear();
    /* --alloc's sites, its hook gone: naming them allocates. */
    rbtrace_alloc_report(tell_client && !rbtrace.peer_gone);
    if (tell_client && !rbtrace.peer_gone) rbtrace_emit_detached(rbtrace_gc_take_other(), &state);
    rbtrace_writer_stop(&stop_state);
    if (state == 0) state = stop_state;
    rbtrace.attached = 0;
    close(rbtrace.sock);
    rbtrace.sock = -1;
    rbtrace.client_pid = 0;
    rbtrace_emit_close();
    if (state) rb_jump_tag(state);
}

/* Detaches if the writer saw the client go away. */
void rbtrace_command_check_peer(void)
{
    if (rbtrace.attached && rbtrace.peer_gone) rbtrace_command_detach(0);
}

/* In a forked child: the writer thread did not survive fork; the socket
 * and hooks did. Drop them all without touching the parent's session. */
void rbtrace_command_after_fork(void)
{
    rbtrace_command_drop_deferred();
    if (!rbtrace.attached) return;
    rbtrace_trace_clear();
    rbtrace_alloc_report(0);
    rbtrace_writer_after_fork();
    rbtrace.attached = 0;
    close(rbtrace.sock);
    rbtrace.sock = -1;
    rbtrace.client_pid = 0;
    rbtrace_emit_close();
}

/* ---- eval ---- */

struct command_eval_arg {
    const struct rbtrace_command *cmd;
    VALUE result;
};

static VALUE command_eval_i(VALUE p)
{
    struct command_eval_arg *arg = (struct command_eval_arg *)p;
    VALUE code = rb_utf8_str_new(arg->cmd->text.ptr, arg->cmd->text.len);

    return rb_funcall(rbtrace_mRBTrace, id_eval_for_client, 3, code,
                      rb_float_new(arg->cmd->timeout_ms / 1000.0),
                      UINT2NUM(arg->cmd->result_format));
}

static void command_eval(const struct rbtrace_command *cmd)
{
    struct command_eval_arg arg = { cmd, Qnil };
    VALUE res;
    int state = 0;

    res = rbtrace_protect(command_eval_i, (VALUE)&arg, &state, NULL);
    if (state || !RB_TYPE_P(res, T_ARRAY) || RARRAY_LEN(res) != 2 ||
        !RB_INTEGER_TYPE_P(RARRAY_AREF(res, 0)) || !RB_TYPE_P(RARRAY_AREF(res, 1), T_STRING)) {
        rbtrace_emit_eval_result(cmd->eval_id, RBTRACE_EVAL_RAISED,
                                 rb_str_new_cstr("rbtrace: the eval helper failed"));
        return;
    }
    rbtrace_emit_eval_result(cmd->eval_id, (enum rbtrace_eval_status)NUM2INT(RARRAY_AREF(res, 0)),
                             RARRAY_AREF(res, 1));
}

/* ---- dispatch ---- */

static VALUE command_selectors(const struct rbtrace_command *cmd)
{
    VALUE list = rb_ary_new_capa(cmd->n_selectors);
    uint32_t i;

    for (i = 0; i < cmd->n_selectors; i++)
        rb_ary_push(list, rb_utf8_str_new(cmd->selectors[i].ptr, cmd->selectors[i].len));
    return list;
}

/* Carries out a command: an ATTACH from the queue, any other from the
 * attached client's socket (rbtrace_command_execute sorts them). */
static void command_dispatch(const struct rbtrace_command *cmd)
{
    switch (cmd->type) {
    case RBTRACE_CMD_ATTACH:
        command_attach(cmd);
        break;
    case RBTRACE_CMD_DETACH:
        rbtrace_command_detach(1);
        break;
    case RBTRACE_CMD_METHODS:
        rbtrace_trace_add(command_selectors(cmd));
        break;
    case RBTRACE_CMD_FIREHOSE:
        rbtrace_trace_firehose();
        break;
    case RBTRACE_CMD_SLOW:
        rbtrace_trace_slow(cmd->threshold_ns, cmd->cpu, command_selectors(cmd));
        break;
    case RBTRACE_CMD_GC:
        rbtrace_trace_gc();
        break;
    case RBTRACE_CMD_RAISE:
        rbtrace_trace_raise();
        break;
    case RBTRACE_CMD_GVL:
        rbtrace_gvl_start();
        break;
    case RBTRACE_CMD_ALLOC:
        rbtrace_alloc_start(cmd->sample);
        break;
    case RBTRACE_CMD_THREAD_NAMES:
        rbtrace_thread_names_start();
        break;
    case RBTRACE_CMD_PROFILE:
        rbtrace_profile_start(cmd->mode, cmd->hz);
        break;
    case RBTRACE_CMD_DEVMODE:
        rbtrace_devmode_start();
        break;
    case RBTRACE_CMD_RESUME:
        rbtrace.resumed = 1;
        break;
    case RBTRACE_CMD_SYNC:
        rbtrace_emit_synced(rbtrace_trace_any());
        break;
    case RBTRACE_CMD_EVAL:
        command_eval(cmd);
        break;
    default:
        break;
    }
}

static VALUE command_dispatch_i(VALUE cmd)
{
    command_dispatch((const struct rbtrace_command *)cmd);
    return Qnil;
}

/*
 * A postponed job runs on an app thread, in the middle of its work, where
 * Ruby code must not run (it could swallow the app's own Thread#raise or
 * Timeout) and nothing may wait. It carries out only a first ATTACH, which
 * is plain C; an ATTACH while attached (refused: a connect, which may
 * wait), and any after one that was left, go to the helper thread in
 * order. Only the queue is read in a job (channel.c), and it brings no other
 * command (rbtrace_command_execute). Whether cmd is one to leave so
 * (command_defer leaves it).
 */
static int command_must_defer(const struct rbtrace_command *cmd)
{
    if (!rbtrace.in_job) return 0;
    if (cmd->type == RBTRACE_CMD_ATTACH && !rbtrace.attached && rbtrace.deferred == NULL) return 0;
    return 1;
}

/* Leaves a command (its msgpack bytes) for the helper thread: 0, or -1 if
 * no memory was left (it is dropped; the client times out and says so). */
static int command_defer(const char *buf, size_t len)
{
    struct rbtrace_deferred *d;

    d = malloc(sizeof(*d) + len);
    if (d == NULL) return -1;
    d->next = NULL;
    d->len = len;
    memcpy(d->data, buf, len);
    if (rbtrace.deferred == NULL) rbtrace.deferred_tail = &rbtrace.deferred;
    *rbtrace.deferred_tail = d;
    rbtrace.deferred_tail = &d->next;
    rbtrace_channel_wake();
    return 0;
}

/* Carries out the commands a postponed job left. Helper thread only. */
void rbtrace_command_run_deferred(void)
{
    struct rbtrace_deferred *d;

    while ((d = rbtrace.deferred) != NULL) {
        rbtrace.deferred = d->next;
        rbtrace_command_execute(d->data, d->len, 0);
        free(d);
    }
}

/* A forked child does not carry out its parent's commands. */
void rbtrace_command_drop_deferred(void)
{
    struct rbtrace_deferred *d;

    while ((d = rbtrace.deferred) != NULL) {
        rbtrace.deferred = d->next;
        free(d);
    }
}

/*
 * Decodes and carries out one whole command, from the attached client's
 * socket or (from_socket 0) from the queue. Only the attached client steers
 * the session, and only through its socket: the queue, which any process of
 * our user can write, carries an ATTACH and nothing else (a command there
 * naming the client's pid is not the client's); a socket's ATTACH means
 * nothing. Decided here, once. A malformed command is the client's to hear
 * of only when it came on its socket.
 */
void rbtrace_command_execute(const char *buf, size_t len, int from_socket)
{
    static struct rbtrace_command cmd; /* large; the GVL serialises use */
    char err[RBTRACE_ERRLEN];
    msgpack_zone zone;
    int state = 0;
    VALUE e = Qnil;

    if (!msgpack_zone_init(&zone, 4096)) return;
    if (rbtrace_command_decode(buf, len, &zone, &cmd, err) != RBTRACE_OK) {
        if (from_socket && rbtrace.attached)
            rbtrace_emit_message(RBTRACE_EV_ERROR, "malformed command: %s", err);
        goto destroy_zone;
    }
    if (from_socket ? !rbtrace.attached || cmd.type == RBTRACE_CMD_ATTACH
                    : cmd.type != RBTRACE_CMD_ATTACH)
        goto destroy_zone;
    if (command_must_defer(&cmd)) {
        (void)command_defer(buf, len); /* -1: dropped, said by the client's time-out */
        goto destroy_zone;
    }
    rbtrace_protect(command_dispatch_i, (VALUE)&cmd, &state, &e);
    if (state) {
        if (rbtrace.attached) {
            VALUE msg = rbtrace_protect(rb_inspect, e, &state, NULL);
            if (state) msg = rb_str_new_cstr("(exception)");
            rbtrace_emit_message(RBTRACE_EV_ERROR, "command failed: %.*s", (int)RSTRING_LEN(msg),
                                 RSTRING_PTR(msg));
        }
    }
destroy_zone:
    msgpack_zone_destroy(&zone);
}

/*
 * call-seq: RBTrace.client_gone? -> true or false
 *
 * Whether the attached client went away (the writer saw its socket hang
 * up) and the detach is still to come: an eval waiting for its code stops
 * waiting (lib/rbtrace/evaluator.rb), so that the helper detaches at once.
 */
static VALUE command_client_gone_p_m(VALUE self)
{
    return rbtrace.attached && rbtrace.peer_gone ? Qtrue : Qfalse;
}

/*
 * The process exits while traced: the writer delivers what the ring holds
 * (giving up after WRITER_DRAIN_MS if the client does not read), so that
 * the calls made just before the exit reach the client, which then sees the
 * socket close and says the process exited. Without it the last events of
 * a short program (--exec) died with the writer thread.
 */
static void command_end_proc(VALUE unused)
{
    int state;

    if (rbtrace.attached && !rbtrace.peer_gone) rbtrace_writer_stop(&state);
}

void Init_rbtrace_command(VALUE mod)
{
    id_eval_for_client = rb_intern("eval_for_client");
    rb_define_singleton_method(mod, "client_gone?", command_client_gone_p_m, 0);
    rb_set_end_proc(command_end_proc, Qnil);
}
