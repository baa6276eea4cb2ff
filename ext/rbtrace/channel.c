/*
 * channel.c - how commands reach the app: the SIGURG handler, the parked
 * helper thread it wakes, the SysV message queue they drain for an ATTACH,
 * and the attached client's socket, which carries every later command.
 *
 * The queue is writable by any process of our user, so it is trusted with
 * nothing but ATTACH, which names a socket the session checks before it
 * attaches. Once attached, the client writes its commands (framed:
 * protocol.h) on the connection we made: nobody else can write there. The
 * writer thread, which polls that socket anyway, sees them come
 * (sock_readable) and wakes the helper thread, which reads them without
 * waiting (the socket is non-blocking) and carries them out; no app thread
 * ever reads the socket.
 *
 * Getting the job to run whatever the app is doing
 * (docs/DESIGN.md, "Getting the job to run"): the signal
 * handler only sets `pending` and posts a semaphore (both async-signal-
 * safe). A Ruby thread, started from Ruby by lib/rbtrace.rb and parked in
 * sem_wait without the GVL, wakes on it, takes the GVL and serves the
 * queue. That works while the main thread sleeps, blocks in read(2),
 * Queue#pop or IO.select, where a bare postponed job would never run.
 *
 * Postponed jobs: on Rubies that have rb_postponed_job_preregister (3.3+)
 * the handler also triggers a preregistered job, which drains the queue at
 * the next safe point of a busy app without waiting for a GVL hand-off. It
 * runs on an app thread, so it carries out only a first ATTACH (plain C)
 * and leaves every other command to the helper thread (command.c,
 * command_defer). Before 3.3 the handler registers no job at all: rb_postponed_job_
 * register_one called from a signal handler can race with a flush running
 * on another thread (https://bugs.ruby-lang.org/issues/19991) and corrupt
 * the job list, so there the helper thread alone serves commands.
 *
 * The queue is created on the first signal, mode 0600 with IPC_EXCL, and
 * is read only while its owner and creator are our euid and it grants
 * nothing to others. If another user's queue already sits under our key,
 * we never read it: a private queue serves instead (channel_queue_private).
 * Its whole life, from its making to its removal, is one section below
 * (channel_queue).
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "channel.h"
#include "emit.h"
#include "handoff.h"
#include "profile.h"
#include "protocol.h"
#include "command.h"
#include "writer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
static rb_postponed_job_handle_t channel_job = POSTPONED_JOB_HANDLE_INVALID;
#endif

static volatile int channel_unblocked;

/* SIGURG's disposition before rbtrace's handler replaced it, as Ruby's
 * trap names it ("SYSTEM_DEFAULT", "IGNORE"), or nil (another handler). */
static const char *channel_urg_before;

static void channel_sigurg(int sig, siginfo_t *info, void *ctx)
{
    int saved = errno;

    rbtrace.pending = 1;
    sem_post(&rbtrace.wake);
#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
    if (channel_job != POSTPONED_JOB_HANDLE_INVALID) rb_postponed_job_trigger(channel_job);
#endif
    errno = saved;
}

/* ---- the queue: its whole life, here alone ---- */

/*
 * Made at the first signal, keyed by our pid (or private, when someone
 * else's sits under our key). Checked at each signal after: a queue removed
 * under us (ipcrm) is gone, one that is no longer ours (its owner or mode
 * changed, its id someone else's) is left alone, and either way a new one
 * serves, so that a client is always answered. Forgotten in a forked child
 * (a new pid, a new queue); removed, if still ours, by the process that
 * made it, when it exits and before it execs.
 */
static struct {
    int id;      /* the queue we read, or -1 */
    pid_t pid;   /* the process that made or adopted it */
    int refused; /* a foreign queue under our key was reported */
} channel_q = { -1, 0, 0 };

/* An unexpected failure of the queue, said once on stderr. */
static void channel_report_errno(const char *what)
{
    static int reported;

    if (reported) return;
    reported = 1;
    fprintf(stderr, "rbtrace: %s on message queue of process %d: %s\n", what, (int)getpid(),
            strerror(errno));
}

enum channel_queue_state { CHANNEL_QUEUE_OURS, CHANNEL_QUEUE_GONE, CHANNEL_QUEUE_FOREIGN };

/* What queue qid is to us: ours (owner and creator our euid, nothing
 * granted to others), gone (removed), or someone else's. */
static enum channel_queue_state channel_queue_state(int qid)
{
    struct msqid_ds ds;
    uid_t me = geteuid();

    if (msgctl(qid, IPC_STAT, &ds) != 0)
        return errno == EIDRM || errno == EINVAL ? CHANNEL_QUEUE_GONE : CHANNEL_QUEUE_FOREIGN;
    if (ds.msg_perm.uid == me && ds.msg_perm.cuid == me && (ds.msg_perm.mode & 077) == 0)
        return CHANNEL_QUEUE_OURS;
    return CHANNEL_QUEUE_FOREIGN;
}

/*
 * Sends ourselves a marker and takes it back, by its own type (an ATTACH
 * already waiting stays), so that the kernel names us the queue's last
 * reader (lrpid). Only our euid can read a queue of ours, and only our pid
 * be its last reader: the client finds our private queue by it, and takes
 * a queue for stale only once that reader is gone (attach.c). 0, or -1.
 */
static int channel_queue_mark(int qid)
{
    struct rbtrace_msg marker;

    marker.mtype = RBTRACE_MARK_TYPE;
    marker.mtext[0] = 0;
    if (msgsnd(qid, &marker, 1, IPC_NOWAIT) != 0) return -1;
    if (msgrcv(qid, &marker, sizeof(marker.mtext), RBTRACE_MARK_TYPE, IPC_NOWAIT | MSG_NOERROR) < 0)
        return -1;
    return 0;
}

/* Someone else's queue sits under our key: a private queue (IPC_PRIVATE)
 * instead, marked, as the client looks for it by its last reader. */
static int channel_queue_private(void)
{
    int qid = msgget(IPC_PRIVATE, IPC_CREAT | 0600);

    if (qid >= 0 && channel_queue_mark(qid) != 0) {
        int err = errno;
        msgctl(qid, IPC_RMID, NULL);
        errno = err;
        return -1;
    }
    return qid;
}

/* Creates the queue keyed by our pid, or adopts one of ours left there by
 * an earlier process of our pid; else a private one. -1 when none can be
 * made (said once). */
static int channel_queue_open(void)
{
    key_t key = RBTRACE_QUEUE_KEY(getpid());
    int qid = msgget(key, IPC_CREAT | IPC_EXCL | 0600), keyed = 1;

    if (qid < 0 && errno == EEXIST) {
        qid = msgget(key, 0);
        if (qid < 0 || channel_queue_state(qid) != CHANNEL_QUEUE_OURS) {
            keyed = 0;
            if (!channel_q.refused)
                fprintf(stderr,
                        "rbtrace: ignoring message queue 0x%08x under the key of process "
                        "%d: it was created by another user or is open to others; commands "
                        "come through a private queue instead (remove it: ipcrm -Q 0x%08x)\n",
                        (unsigned)key, (int)getpid(), (unsigned)key);
            channel_q.refused = 1;
            qid = channel_queue_private();
        }
    }
    /* Best effort for the keyed queue: reading its first ATTACH marks it too. */
    if (qid >= 0 && keyed) (void)channel_queue_mark(qid);
    if (qid < 0) {
        if (!channel_q.refused)
            fprintf(stderr, "rbtrace: cannot create message queue 0x%08x: %s\n", (unsigned)key,
                    strerror(errno));
        channel_q.refused = 1;
        return -1;
    }
    channel_q.pid = getpid();
    return qid;
}

/* The queue to read at a signal: the one we have while it is ours, else a
 * new one (the first signal; ours removed or taken). -1 if none. */
static int channel_queue(void)
{
    if (channel_q.id >= 0 && channel_queue_state(channel_q.id) != CHANNEL_QUEUE_OURS)
        channel_q.id = -1; /* gone, or someone else's: never read (nor removed) again */
    if (channel_q.id < 0) channel_q.id = channel_queue_open();
    return channel_q.id;
}

/* A forked child: a new pid, so a new queue, made at its first signal. */
static void channel_queue_forget(void)
{
    channel_q.id = -1;
    channel_q.pid = 0;
    channel_q.refused = 0;
}

/* The queue this process made, removed if it is still ours, and forgotten:
 * at exit, and before exec (which runs neither end procs nor atexit; if
 * the exec fails, the next signal makes a new one). */
static void channel_queue_remove(void)
{
    if (channel_q.id >= 0 && channel_q.pid == getpid() &&
        channel_queue_state(channel_q.id) == CHANNEL_QUEUE_OURS &&
        msgctl(channel_q.id, IPC_RMID, NULL) != 0 && errno != EIDRM && errno != EINVAL)
        channel_report_errno("msgctl(IPC_RMID)");
    channel_q.id = -1;
}

/* ---- the attached client's socket ---- */

/* Makes room for len more bytes of the command. Returns 0, or -1. */
static int channel_command_grow(size_t len)
{
    size_t cap = rbtrace.command_cap ? rbtrace.command_cap : RBTRACE_MSG_PAYLOAD;
    char *grown;

    if (rbtrace.command_len + len <= rbtrace.command_cap) return 0;
    while (cap < rbtrace.command_len + len) cap *= 2;
    grown = realloc(rbtrace.command, cap);
    if (grown == NULL) return -1;
    rbtrace.command = grown;
    rbtrace.command_cap = cap;
    return 0;
}

/* One recv of at most len bytes, never waiting: >0 bytes read; 0 nothing
 * to read now; -1 the client hung up or the socket failed. */
static ssize_t channel_recv(void *buf, size_t len)
{
    for (;;) {
        ssize_t n = recv(rbtrace.sock, buf, len, MSG_DONTWAIT);
        if (n > 0) return n;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        return -1;
    }
}

/* The length just read is not one a client sends: the stream is broken. */
static void channel_bad_frame(uint32_t len)
{
    rbtrace_emit_message(RBTRACE_EV_ERROR,
                         "a command of %u bytes on the socket (at most %d): "
                         "the client's stream is broken; detaching",
                         (unsigned)len, RBTRACE_COMMAND_MAX);
    rbtrace_command_detach(1);
}

/*
 * Reads toward the next whole command: its length, then its bytes, never
 * more than RBTRACE_COMMAND_MAX of them. Returns the whole commands read:
 * 1 (in rbtrace.command, command_len bytes), or 0 when the socket has
 * nothing more for now; -1 when the session ended (hang-up, or a broken
 * stream).
 */
static int channel_read_frame(void)
{
    ssize_t n;

    while (rbtrace.frame_header_len < RBTRACE_FRAME_HEADER) {
        n = channel_recv(rbtrace.frame_header + rbtrace.frame_header_len,
                         RBTRACE_FRAME_HEADER - rbtrace.frame_header_len);
        if (n <= 0) return (int)n;
        rbtrace.frame_header_len += (size_t)n;
    }
    if (rbtrace.frame_len == 0) {
        const unsigned char *h = rbtrace.frame_header;
        uint32_t len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];

        if (len == 0 || len > RBTRACE_COMMAND_MAX) {
            channel_bad_frame(len);
            return -1;
        }
        rbtrace.frame_len = len;
        rbtrace.command_len = 0;
        if (channel_command_grow(len) != 0) {
            rbtrace_emit_message(RBTRACE_EV_ERROR,
                                 "out of memory for a command of %u bytes; "
                                 "detaching",
                                 (unsigned)len);
            rbtrace_command_detach(1);
            return -1;
        }
    }
    while (rbtrace.command_len < rbtrace.frame_len) {
        n = channel_recv(rbtrace.command + rbtrace.command_len,
                         rbtrace.frame_len - rbtrace.command_len);
        if (n <= 0) return (int)n;
        rbtrace.command_len += (size_t)n;
    }
    rbtrace.frame_header_len = 0;
    rbtrace.frame_len = 0;
    return 1;
}

/*
 * Carries out the commands the attached client sent, until its socket has
 * nothing more (the writer, which saw them come, then watches it again),
 * or the session ends. Helper thread, GVL held: the socket never blocks.
 */
static void channel_read_socket(void)
{
    int r;

    while (rbtrace.attached && rbtrace.sock_readable && !rbtrace.peer_gone) {
        r = channel_read_frame();
        if (r == 0) {
            rbtrace.sock_readable = 0;
            /* The writer watches the socket again only once it looks: now,
             * not at the end of a doze. */
            rbtrace_writer_nudge();
            return;
        }
        if (r < 0) {
            if (rbtrace.attached) rbtrace_command_detach(0); /* hung up */
            return;
        }
        rbtrace_command_execute(rbtrace.command, rbtrace.command_len, 1);
    }
}

/* ---- the queue's messages ---- */

/* Carries out every message waiting in the queue: an ATTACH, whole in one
 * message (protocol.h), or nothing. GVL held. */
static void channel_drain(void)
{
    struct rbtrace_msg msg;
    ssize_t n;

    for (;;) {
        /* MSG_NOERROR: an oversized message is cut (and then fails to
         * decode) rather than blocking the head of the queue for good. */
        n = msgrcv(channel_q.id, &msg, sizeof(msg.mtext), RBTRACE_MSG_TYPE,
                   IPC_NOWAIT | MSG_NOERROR);
        if (n < 0) {
            if (errno == EINTR) continue;
            /* Removed meanwhile: the next signal makes a new one. */
            if (errno != ENOMSG && errno != EIDRM && errno != EINVAL)
                channel_report_errno("msgrcv");
            return;
        }
        /* A part of a longer command (protocol 3's chunks) is not one. */
        if (n < 2 || msg.mtext[0] != RBTRACE_CHUNK_FIRST) continue;
        rbtrace_command_execute((const char *)msg.mtext + 1, (size_t)n - 1, 0);
    }
}

static VALUE channel_service_body(VALUE unused)
{
    if (!rbtrace.in_job) {
        rbtrace_command_check_peer();
        rbtrace_command_run_deferred();
        channel_read_socket();
        if (rbtrace_profile_drain_due()) rbtrace_profile_drain();
    }
    if (rbtrace.pending) {
        rbtrace.pending = 0;
        if (channel_queue() >= 0) channel_drain();
    }
    return Qnil;
}

static VALUE channel_service_done(VALUE unused)
{
    rbtrace.servicing = 0;
    rbtrace.servicing_thread = 0;
    rbtrace.in_job = 0;
    return Qnil;
}

/* Serves whatever woke us: a signal, or a client that went away. The flag
 * is cleared however the work ends, or nothing would be served again. */
static void channel_service(void)
{
    if (rbtrace.servicing) return;
    rbtrace.servicing = 1;
    /* The calls rbtrace's own Ruby code makes meanwhile (parsing a command's
     * selectors while an earlier command's hook is on) are not the app's:
     * the hooks and wrappers pass over this thread's (RBTRACE_OWN_CALL). */
    rbtrace.servicing_thread = rbtrace_thread_id();
    rb_ensure(channel_service_body, Qnil, channel_service_done, Qnil);
}

#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
static void channel_job_i(void *unused)
{
    rbtrace.in_job = 1;
    channel_service();
    rbtrace.in_job = 0;
}
#endif

/* ---- the helper thread ---- */

/* Whether a command waits for the helper (or a detach, or a signal's
 * queue); read without the GVL, after the semaphore that published what
 * it reads. */
static int channel_command_waiting(void)
{
    struct msqid_ds ds;

    if (rbtrace.deferred != NULL ||
        (rbtrace.attached && (rbtrace.peer_gone || rbtrace.sock_readable)))
        return 1;
    if (!rbtrace.pending) return 0;
    if (channel_q.id < 0) return 1; /* the first signal: the queue is made */
    if (msgctl(channel_q.id, IPC_STAT, &ds) != 0) return 1; /* gone: a new one is made */
    return ds.msg_qnum > 0;
}

/*
 * Parks the helper until there is work. Signals without a command (a
 * storm of SIGURG, a job that already drained the queue) cost the app
 * nothing: the helper goes back to sleep without asking for the GVL.
 */
static void *channel_wait_nogvl(void *unused)
{
    for (;;) {
        if (sem_wait(&rbtrace.wake) != 0) {
            if (errno == EINTR && !channel_unblocked) continue;
            return NULL;
        }
        if (channel_unblocked) return NULL;
        while (sem_trywait(&rbtrace.wake) == 0)
            ; /* one look serves every signal so far */
        if (channel_command_waiting()) return NULL;
        /* --profile's drain alone: the GVL in turn, no hand-off asked
         * (handoff.c): the samples can wait a time slice. */
        if (rbtrace.attached && rbtrace_profile_drain_due()) return RBTRACE_NOGVL_UNHURRIED;
    }
}

static void channel_unblock(void *unused)
{
    channel_unblocked = 1;
    sem_post(&rbtrace.wake);
}

/*
 * call-seq: RBTrace.helper_loop -> never returns
 *
 * Body of the parked helper thread (lib/rbtrace.rb starts it). Waits for
 * the signal handler without the GVL, then serves the queue.
 */
static VALUE channel_helper_loop_m(VALUE self)
{
    rbtrace.helper_thread = rbtrace_thread_id(); /* its GVL waits are not the app's (gvlwatch.c) */
    for (;;) {
        int state;

        channel_unblocked = 0;
        /* rbtrace_nogvl says when this thread starts waiting for the GVL. */
        if (rbtrace_nogvl(channel_wait_nogvl, NULL, channel_unblock, NULL, &state) != 0)
            rb_jump_tag(state); /* Thread#kill, exit */
        rb_thread_check_ints();
        do channel_service();
        while ((rbtrace.pending || rbtrace.deferred) && !rbtrace.servicing);
    }
    return Qnil;
}

/*
 * Whether SIGURG still reaches rbtrace: an app's trap("URG") replaces it
 * (asked by inplace.c's trap, before and after Ruby's). It must not raise
 * what Ruby's trap would not: a query of a valid signal cannot fail, but
 * if it did, the handler counts as still there (no warning, the app's
 * trap unchanged).
 */
int rbtrace_channel_handler_installed(void)
{
    struct sigaction cur;

    if (sigaction(SIGURG, NULL, &cur) != 0) return 1;
    return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == channel_sigurg;
}

/*
 * What Ruby's trap('URG', ...) would have returned as the old handler had
 * rbtrace not replaced SIGURG's: "SYSTEM_DEFAULT", "IGNORE" or nil (while
 * the app has not trapped URG: else Ruby returns the app's own). Ruby's
 * trap sees our handler and returns nil, so rbtrace's trap (inplace.c)
 * returns this instead.
 */
VALUE rbtrace_channel_handler_before(void)
{
    return channel_urg_before ? rb_str_new_cstr(channel_urg_before) : Qnil;
}

/* Removes our queue when the process that created it exits. Both an end
 * proc (Ruby runs those before re-raising a fatal signal such as SIGTERM,
 * which skips atexit) and atexit (exits that bypass Ruby's cleanup). */
static void channel_end_proc(VALUE unused)
{
    channel_queue_remove();
}

/* ---- exec ---- */

/*
 * Kernel#exec, Kernel.exec and Process.exec, in place of Ruby's own: the
 * queue is removed, then Ruby's exec (rb_f_exec) runs from this same frame.
 * So the app sees the method it had: a C method of Kernel (or Process)
 * named exec, of arity -1, and the same backtrace when exec fails.
 */
static VALUE channel_exec_m(int argc, VALUE *argv, VALUE self)
{
    int saved = errno;

    channel_queue_remove();
    errno = saved;
    return rb_f_exec(argc, argv);
}

/*
 * Puts channel_exec_m where Ruby's exec is, each place only if the method
 * there is still Ruby's own (an app's or a gem's exec, defined before
 * rbtrace loads, stays; its process may then leave the queue behind).
 * rb_method_basic_definition_p is asked of classes only (it caches into
 * the class it is given, which a module is not made for): Object for
 * Kernel#exec, what every object calls; Process.exec's singleton (Ruby
 * defines no Process#exec: Process.exec is a singleton method only, not a
 * module function). $VERBOSE is off meanwhile: Ruby would warn "method
 * redefined".
 */
static void channel_exec_install(void)
{
    ID id = rb_intern("exec");
    VALUE verbose = ruby_verbose;

    ruby_verbose = Qfalse;
#ifdef HAVE_RB_EXT_RACTOR_SAFE
    rb_ext_ractor_safe(true); /* as Ruby's own: else exec in a Ractor raises */
#endif
    if (rb_method_basic_definition_p(rb_cObject, id))
        rb_define_private_method(rb_mKernel, "exec", channel_exec_m, -1);
    if (rb_method_basic_definition_p(rb_singleton_class(rb_mKernel), id))
        rb_define_singleton_method(rb_mKernel, "exec", channel_exec_m, -1);
    if (rb_method_basic_definition_p(rb_singleton_class(rb_mProcess), id))
        rb_define_singleton_method(rb_mProcess, "exec", channel_exec_m, -1);
#ifdef HAVE_RB_EXT_RACTOR_SAFE
    rb_ext_ractor_safe(false);
#endif
    ruby_verbose = verbose;
}

/* A forked child: a new pid, so a new queue, created on its first signal. */
void rbtrace_channel_after_fork(void)
{
    channel_queue_forget();
    rbtrace.pending = 0;
    rbtrace.servicing = 0;
    rbtrace_channel_reset_socket();
    sem_destroy(&rbtrace.wake);
    sem_init(&rbtrace.wake, 0, 0);
}

void rbtrace_channel_init(void)
{
    struct sigaction sa, before;

    if (sem_init(&rbtrace.wake, 0, 0) != 0) rb_sys_fail("rbtrace: sem_init");
#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
    channel_job = rb_postponed_job_preregister(0, channel_job_i, NULL);
#endif
    if (atexit(channel_queue_remove) != 0) rb_raise(rb_eRuntimeError, "rbtrace: atexit failed");
    rb_set_end_proc(channel_end_proc, Qnil);

    rbtrace_handoff_install();
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = channel_sigurg;
    /* SA_RESTART: other C extensions do not expect EINTR from our signal. */
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGURG, &sa, &before) != 0) rb_sys_fail("rbtrace: sigaction(SIGURG)");
    if (!(before.sa_flags & SA_SIGINFO) && before.sa_handler == SIG_DFL)
        channel_urg_before = "SYSTEM_DEFAULT";
    else if (!(before.sa_flags & SA_SIGINFO) && before.sa_handler == SIG_IGN)
        channel_urg_before = "IGNORE";
}

void Init_rbtrace_channel(VALUE mod)
{
    rb_define_singleton_method(mod, "helper_loop", channel_helper_loop_m, 0);
    channel_exec_install();
}
