/*
 * attach.c - reaching a target: pid checks, the private socket, the
 * target's message queue, and the target's connection.
 *
 * Security: we send ATTACH only into a queue that belongs to the target's
 * user and grants nothing to others; we read events only from a
 * connection whose peer (SO_PEERCRED) is the target itself, and send every
 * later command on it, where no other process can interleave its own.
 *
 * A target in a container (namespaces of its own: container.h) is reached
 * the same way, through its namespaces: its queue in its IPC namespace,
 * keyed by its own pid, our socket in its $TMPDIR.
 */
#define _GNU_SOURCE /* accept4, pipe2, struct ucred */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "attach.h"
#include "escape.h"
#include "procfs.h"

/* Between SIGURGs while we wait for the queue or a queue slot. */
#define ATTACH_RESIGNAL_MS 50
/* How often a wait checks that the target still exists. */
#define ATTACH_TICK_MS 200
/* The socket's name in our private directory. */
#define ATTACH_SOCK_NAME "sock"

static int attach_fail(struct attach *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int attach_fail(struct attach *a, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(a->errstr, sizeof(a->errstr), fmt, ap);
    va_end(ap);
    return CLI_ERR;
}

/* fmt, then ": strerror(errno)". */
static int attach_fail_errno(struct attach *a, const char *what)
{
    return attach_fail(a, "%s: %s", what, strerror(errno));
}

void attach_init(struct attach *a, pid_t pid, int timeout_ms, volatile sig_atomic_t *stop,
                 int wake_fd)
{
    memset(a, 0, sizeof(*a));
    msgpack_sbuffer_init(&a->held);
    a->pid = pid;
    a->timeout_ms = timeout_ms;
    a->stop = stop;
    a->wake_fd = wake_fd;
    a->listen_fd = -1;
    a->conn_fd = -1;
    a->dir_fd = -1;
    a->cdir.root_fd = -1;
    a->cdir.parent_fd = -1;
    a->cdir.dir_fd = -1;
    a->qid = -1;
    a->ct.ns_pid = pid;
}

pid_t attach_client_pid(const struct attach *a)
{
    return a->ct.pid_ns ? 0 : getpid();
}

static double attach_timeout_s(const struct attach *a)
{
    return a->timeout_ms / 1000.0;
}

/* ---- the target ---- */

int attach_target_alive(const struct attach *a)
{
    return procfs_alive(a->pid);
}

/*
 * Whether queue ds is one of rbtrace's, ours, and proved stale: its target
 * is gone. The key's pid is no proof: it is the pid the target saw, in a
 * PID namespace that may not be ours (docker --ipc=host, unshare --pid
 * share our IPC namespace), where it names another process or none. The
 * proof is the queue's last reader (lrpid), which only its target can be
 * (it marks the queue as it makes it: channel.c): the kernel shows it as
 * our PID namespace sees it, whichever it lived in, and while that number
 * names no process here, that process is gone. A reader we cannot see
 * (lrpid 0: a target in a PID namespace beside or above ours) proves
 * nothing, and its queue stays.
 */
static int attach_queue_is_stale(const struct msqid_ds *ds)
{
    key_t key = ds->msg_perm.__key;
    pid_t pid = (pid_t)(key & 0x00ffffff);

    if (pid == 0 || RBTRACE_QUEUE_KEY(pid) != key) return 0;
    if (ds->msg_perm.uid != geteuid() || ds->msg_perm.cuid != geteuid()) return 0;
    if ((ds->msg_perm.mode & 0777) != 0600) return 0;
    return ds->msg_lrpid > 0 && kill(ds->msg_lrpid, 0) < 0 && errno == ESRCH;
}

/*
 * A target killed with SIGKILL cannot remove its queue: remove the queues
 * of ours whose process is gone (docs/DESIGN.md, "Detaching and faults").
 * Best effort, Linux's MSG_INFO/MSG_STAT walk over every queue.
 */
static void attach_sweep_stale_queues(void)
{
    struct msginfo info;
    struct msqid_ds ds;
    int max, i;

    max = msgctl(0, MSG_INFO, (struct msqid_ds *)(void *)&info);
    for (i = 0; i <= max; i++) {
        int qid = msgctl(i, MSG_STAT, &ds);
        if (qid >= 0 && attach_queue_is_stale(&ds) && msgctl(qid, IPC_RMID, NULL) < 0 &&
            errno != EIDRM && errno != EINVAL)
            fprintf(stderr, "rbtrace: could not remove the stale message queue 0x%x: %s\n",
                    (unsigned)ds.msg_perm.__key, strerror(errno));
    }
}

/*
 * The process loaded the original rbtrace gem (0.5.x or older), whose
 * protocol and client differ: it would never answer. Said at once, without
 * signalling it, with the library's path (the app's text: escaped).
 */
static int attach_old_gem(struct attach *a, const char *path)
{
    char version[64], shown[120 * ESCAPE_MAX_PER_BYTE + 1];
    size_t len = strnlen(path, 120);

    procfs_gem_version(path, version, sizeof(version));
    shown[escape_text(shown, path, len, 0)] = '\0';
    return attach_fail(a,
                       "process %d runs the original rbtrace gem (%s%s, %s), not this "
                       "rbtrace: this client cannot trace it. Use that gem's own client (in the "
                       "app's directory: bundle exec rbtrace -p %d), or have the app load this "
                       "rbtrace (gem 'rbtrace', '>= 0.6') and restart it",
                       (int)a->pid, version[0] ? version : "0.5.x or older",
                       len < strlen(path) ? "..." : "", shown, (int)a->pid);
}

int attach_check_target(struct attach *a)
{
    int pid = (int)a->pid;
    char old[4096];

    attach_sweep_stale_queues(); /* in our IPC namespace: before joining another */
    container_probe(a->pid, &a->ct);
    if (a->ct.other && !container_privileged()) {
        container_refusal(a->pid, &a->ct, a->errstr, sizeof(a->errstr));
        return CLI_ERR;
    }
    if (kill(a->pid, 0) < 0) {
        if (errno == ESRCH)
            return attach_fail(a, "no process with pid %d (check the pid with ps)", pid);
        if (errno == EPERM)
            return attach_fail(a,
                               "not permitted to trace process %d: it runs as another user "
                               "(run rbtrace as that user, or as root)",
                               pid);
        return attach_fail_errno(a, "could not signal the process");
    }
    switch (procfs_rbtrace_library(a->pid, old, sizeof(old))) {
    case PROCFS_LIB_NONE:
        return attach_fail(
            a,
            "process %d has not loaded rbtrace: load it now with --inject (rbtrace "
            "-p %d --inject ..., as root or with CAP_SYS_PTRACE: it stops one thread "
            "for about a millisecond), or add require 'rbtrace' to the app, or "
            "start it with RUBYOPT=-rrbtrace",
            pid, pid);
    case PROCFS_LIB_OLD_GEM:
        return attach_old_gem(a, old);
    default: /* ours, or the maps unreadable: the attach will tell */
        return CLI_OK;
    }
}

int attach_signal(struct attach *a)
{
    if (kill(a->pid, SIGURG) == 0) return CLI_OK;
    if (errno == ESRCH) return attach_fail(a, "process %d exited", (int)a->pid);
    return attach_fail_errno(a, "could not signal the process");
}

/* ---- the private socket ---- */

/*
 * As root tracing another user's process, the target must enter our
 * directory and connect to our socket: give both to the target's owner
 * (the directory stays 0700). Done after bind, through the directory's fd:
 * once the directory is that user's, they may rename it and put something
 * else at its path, so we never go through that path again but to rmdir
 * (which follows no symlink).
 */
static int attach_share_dir(struct attach *a)
{
    char proc[64];
    struct stat st;

    if (geteuid() != 0) return CLI_OK;
    snprintf(proc, sizeof(proc), "/proc/%d", (int)a->pid);
    if (stat(proc, &st) < 0) return attach_fail_errno(a, "could not stat the process");
    if (st.st_uid == 0) return CLI_OK;
    if (fchownat(a->dir_fd, ATTACH_SOCK_NAME, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
        return attach_fail_errno(a, "could not give the socket to the process's user");
    if (fchown(a->dir_fd, st.st_uid, st.st_gid) < 0)
        return attach_fail_errno(a, "could not give the socket directory to the process's user");
    return CLI_OK;
}

/* Our directory in the target's container, in its $TMPDIR (its root
 * opened by attach_listen: container.c); we bind through our fd of it, and
 * send the path the target sees. a->dir is where the host sees it, for
 * messages (removed through a->cdir's fds). */
static int attach_make_container_dir(struct attach *a)
{
    struct container_dir *d = &a->cdir;
    struct sockaddr_un sun;
    int rc = container_make_dir(a->pid, d, a->errstr, sizeof(a->errstr));

    if (d->name[0]) snprintf(a->dir, sizeof(a->dir), "/proc/%d/root%s", (int)a->pid, d->app_path);
    if (rc != 0) return CLI_ERR;
    a->dir_fd = d->dir_fd;
    d->dir_fd = -1; /* a->dir_fd's now */
    snprintf(a->bind_path, sizeof(a->bind_path), "/proc/self/fd/%d/" ATTACH_SOCK_NAME, a->dir_fd);
    if (strlen(d->app_path) + sizeof("/" ATTACH_SOCK_NAME) > sizeof(sun.sun_path) ||
        (size_t)snprintf(a->sock_path, sizeof(a->sock_path), "%s/" ATTACH_SOCK_NAME, d->app_path) >=
            sizeof(a->sock_path))
        return attach_fail(a, "the socket path in the container is too long");
    return CLI_OK;
}

static int attach_make_dir(struct attach *a)
{
    const char *tmp = getenv("TMPDIR");
    struct sockaddr_un sun;
    int n;

    if (a->ct.mnt_ns) return attach_make_container_dir(a);
    if (!tmp || !*tmp) tmp = "/tmp";
    n = snprintf(a->dir, sizeof(a->dir), "%s/rbtrace-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= sizeof(a->dir) ||
        (size_t)n + sizeof("/" ATTACH_SOCK_NAME) > sizeof(sun.sun_path)) {
        a->dir[0] = '\0';
        return attach_fail(a, "TMPDIR (%s) is too long for a socket path: set a shorter one", tmp);
    }
    if (!mkdtemp(a->dir)) {
        int e = errno;
        a->dir[0] = '\0';
        errno = e;
        return attach_fail(a, "could not create a directory in %s: %s", tmp, strerror(e));
    }
    a->dir_fd = open(a->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (a->dir_fd < 0) return attach_fail_errno(a, "could not open the socket directory");
    n = snprintf(a->sock_path, sizeof(a->sock_path), "%s/" ATTACH_SOCK_NAME, a->dir);
    if (n < 0 || (size_t)n >= sizeof(a->sock_path)) { /* checked above; for the compiler */
        a->sock_path[0] = '\0';
        return attach_fail(a, "the socket path is too long");
    }
    return CLI_OK;
}

/* The directory, the socket, bind and listen. */
static int attach_bind_listen(struct attach *a)
{
    struct sockaddr_un sun;
    const char *path;

    if (attach_make_dir(a) != CLI_OK) return CLI_ERR;
    a->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (a->listen_fd < 0) return attach_fail_errno(a, "could not create a socket");
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    path = a->bind_path[0] ? a->bind_path : a->sock_path;
    memcpy(sun.sun_path, path, strlen(path) + 1);
    if (bind(a->listen_fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        int e = errno;
        a->sock_path[0] = '\0'; /* nothing to unlink */
        errno = e;
        return attach_fail_errno(a, "could not bind the socket");
    }
    if (listen(a->listen_fd, 4) < 0) return attach_fail_errno(a, "could not listen on the socket");
    return CLI_OK;
}

/*
 * For a target in a container, its root is opened first, as root
 * (/proc/PID/root); the rest is done as the app's user (container_become):
 * the directory only where that user may make one, and in another user
 * namespace listen(2), which records who listens for the app's SO_PEERCRED,
 * translated into its namespace.
 */
int attach_listen(struct attach *a)
{
    int become = (a->ct.mnt_ns || a->ct.user_ns) && geteuid() == 0, rc;

    if (a->ct.mnt_ns && container_open_root(a->pid, &a->cdir, a->errstr, sizeof(a->errstr)) != 0)
        return CLI_ERR;
    if (become && container_become(a->pid, a->errstr, sizeof(a->errstr)) != 0) return CLI_ERR;
    rc = attach_bind_listen(a);
    if (become) container_unbecome();
    return rc == CLI_OK ? attach_share_dir(a) : CLI_ERR;
}

/* ---- why a target does not answer ---- */

/* The most threads the hint reads, and names. */
#define ATTACH_TASKS_MAX 512
#define ATTACH_SUSPECTS_SHOWN 3

/*
 * Whether thread t waits as an idle Ruby thread does: on a futex (the GVL,
 * a Mutex, a ConditionVariable) or in poll/select/epoll (sleep, IO waits,
 * which let the GVL go). By wchan where the kernel shows it ("futex_...",
 * "..._poll_...", "ep_poll"), else by the system call; 1 when neither is
 * known: then nothing is claimed.
 */
static int attach_task_idle(const struct procfs_task *t)
{
    if (t->state == 'R') return 0;
    if (t->state != 'S' && t->state != 'D') return 1;
    if (t->wchan[0]) return strstr(t->wchan, "futex") != NULL || strstr(t->wchan, "poll") != NULL;
    if (t->syscall < 0) return 1;
    return t->syscall == SYS_futex || t->syscall == SYS_ppoll || t->syscall == SYS_pselect6 ||
#ifdef SYS_poll
        t->syscall == SYS_poll || t->syscall == SYS_select || t->syscall == SYS_epoll_wait ||
#endif
        t->syscall == SYS_epoll_pwait;
}

/* rbtrace's own threads (lib/rbtrace.rb names them). */
static int attach_task_ours(const struct procfs_task *t)
{
    return !strncmp(t->comm, "rbtrace", 7);
}

/* What thread t does, for the hint: "is running on a CPU", ... */
static void attach_task_doing(const struct procfs_task *t, char *out, size_t size)
{
    if (t->state == 'R') snprintf(out, size, "is running on a CPU");
    else if (t->wchan[0]) snprintf(out, size, "is in the kernel, in %s", t->wchan);
    else if (t->syscall >= 0) snprintf(out, size, "is in system call %ld", t->syscall);
    else snprintf(out, size, "sleeps in the kernel");
}

/*
 * A target that does not answer while one of its threads is busy outside
 * Ruby (on a CPU, or in a system call other than the waits of an idle
 * Ruby thread) and rbtrace's own thread waits: most likely a C extension
 * holding the GVL through a long call (sqlite3 waiting on a lock, a
 * blocking read), during which no Ruby code, rbtrace's included, can run.
 * Appends that, naming the threads, to a->errstr, and returns 1; 0 if
 * /proc does not show such a thread. Thread names are the app's: escaped.
 */
static int attach_explain_silence(struct attach *a)
{
    struct procfs_task *tasks = calloc(ATTACH_TASKS_MAX, sizeof(*tasks));
    char doing[96], name[sizeof(tasks->comm) * ESCAPE_MAX_PER_BYTE + 1];
    size_t len = strlen(a->errstr);
    int n, i, shown = 0, busy = 0, helper_waits = 0;

    if (!tasks) return 0;
    n = procfs_tasks(a->pid, tasks, ATTACH_TASKS_MAX);
    for (i = 0; i < n; i++) {
        if (attach_task_ours(&tasks[i])) helper_waits |= attach_task_idle(&tasks[i]);
        else busy += !attach_task_idle(&tasks[i]);
    }
    if (busy == 0 || !helper_waits) {
        free(tasks);
        return 0;
    }
    for (i = 0; i < n && shown < ATTACH_SUSPECTS_SHOWN; i++) {
        const struct procfs_task *t = &tasks[i];

        if (attach_task_ours(t) || attach_task_idle(t)) continue;
        name[escape_text(name, t->comm, strlen(t->comm), 0)] = '\0';
        attach_task_doing(t, doing, sizeof(doing));
        len += (size_t)snprintf(
            a->errstr + len, len < sizeof(a->errstr) ? sizeof(a->errstr) - len : 0,
            "%sthread %d (%s) %s", shown ? "; " : ". Likely cause: ", (int)t->tid, name, doing);
        shown++;
    }
    if (busy > shown && len < sizeof(a->errstr))
        len += (size_t)snprintf(a->errstr + len, sizeof(a->errstr) - len, " (and %d more)",
                                busy - shown);
    if (len < sizeof(a->errstr))
        snprintf(a->errstr + len, sizeof(a->errstr) - len,
                 ", while rbtrace's thread waits for Ruby's lock (the GVL): a C extension may "
                 "hold it through a long call (a database lock wait, a blocking read), and no "
                 "Ruby code can run until it returns. Try again once it has; to see where it "
                 "is: gdb -p %d -batch -ex 'thread apply all bt'",
                 (int)a->pid);
    free(tasks);
    return 1;
}

/* ---- the message queue ---- */

/* Whether queue qid is the target's alone: created and owned by its euid
 * (and so by ours, unless we are root), granting nothing to others. We
 * never send into one that someone else could read. */
static int attach_queue_trusted(const struct attach *a, const struct msqid_ds *ds)
{
    return ds->msg_perm.uid == a->target_uid && ds->msg_perm.cuid == a->target_uid &&
        (ds->msg_perm.mode & 077) == 0;
}

/*
 * A target that found someone else's queue under its key makes a private
 * one (IPC_PRIVATE) and takes a marker message from it, so that the kernel
 * names it as the queue's last reader (lrpid). Only its own euid can have
 * created such a queue, so one that is ours and was last read by the
 * target's pid is the target's, unless an earlier process of that pid
 * made it and was killed before it could remove it (README, "Known
 * limits"): one made before the target began is not its, and of the rest
 * the one read last is (a process that exec'd keeps its pid and start
 * time). Linux's MSG_INFO/MSG_STAT walk; -1 if none.
 */
static int attach_find_private_queue(const struct attach *a)
{
    struct msginfo info;
    struct msqid_ds ds, best;
    int max, i, found = -1;

    memset(&best, 0, sizeof(best));
    max = msgctl(0, MSG_INFO, (struct msqid_ds *)(void *)&info);
    for (i = 0; i <= max; i++) {
        int qid = msgctl(i, MSG_STAT, &ds);
        if (qid < 0 || ds.msg_perm.__key != IPC_PRIVATE || ds.msg_lrpid != a->pid ||
            !attach_queue_trusted(a, &ds))
            continue;
        /* Made a whole second (or more) before the target began: another
         * process's. Both counts are whole seconds; the target's own queue
         * may be made in the second it began. */
        if (a->target_started && ds.msg_ctime + 1 < a->target_started) continue;
        if (found < 0 || ds.msg_rtime > best.msg_rtime ||
            (ds.msg_rtime == best.msg_rtime && ds.msg_ctime > best.msg_ctime)) {
            found = qid;
            best = ds;
        }
    }
    return found;
}

/* Sets *qid to the queue under the target's key if it is the target's,
 * else to -1, with *foreign set if someone else's sits there. Returns
 * CLI_OK, or CLI_ERR when the queues cannot be looked at. */
static int attach_keyed_queue(struct attach *a, int *qid, struct msqid_ds *ds, int *foreign)
{
    *qid = msgget(RBTRACE_QUEUE_KEY(a->ct.ns_pid), 0);
    if (*qid < 0) {
        if (errno == EACCES) *foreign = 1;
        else if (errno != ENOENT) return attach_fail_errno(a, "could not open the message queue");
        return CLI_OK;
    }
    if (msgctl(*qid, IPC_STAT, ds) < 0) {
        int err = errno;
        *qid = -1;
        if (err == EIDRM || err == EINVAL) return CLI_OK; /* just removed */
        if (err != EACCES)
            return attach_fail_errno(a, "could not inspect the message queue of the process");
        *foreign = 1;
        return CLI_OK;
    }
    if (!attach_queue_trusted(a, ds)) {
        *qid = -1;
        *foreign = 1;
    }
    return CLI_OK;
}

int attach_find_queue(struct attach *a)
{
    int64_t now = cli_now_ms(), deadline = now + a->timeout_ms;
    int64_t signalled = now - ATTACH_RESIGNAL_MS;
    struct msqid_ds ds;
    int foreign = 0;

    if (procfs_euid(a->pid, &a->target_uid) != 0)
        return attach_fail_errno(a, "could not read the owner of the process");
    if (procfs_started(a->pid, &a->target_started) != 0) a->target_started = 0; /* unknown */
    /* The queue is in the target's IPC namespace, keyed by its own pid.
     * IPC_STAT still shows uids and pids as we see them (our user and PID
     * namespaces): the checks below compare them unchanged. */
    if (container_join_ipc(a->pid, &a->ct, a->errstr, sizeof(a->errstr)) != 0) return CLI_ERR;
    memset(&ds, 0, sizeof(ds));
    for (;;) {
        if (*a->stop) return CLI_INTERRUPTED;
        now = cli_now_ms();
        if (now - signalled >= ATTACH_RESIGNAL_MS) {
            if (attach_signal(a) != CLI_OK) return CLI_ERR;
            signalled = now;
        }
        if (attach_keyed_queue(a, &a->qid, &ds, &foreign) != CLI_OK) return CLI_ERR;
        if (a->qid >= 0) return CLI_OK;
        if (foreign && (a->qid = attach_find_private_queue(a)) >= 0) return CLI_OK;
        if (now >= deadline && foreign) {
            char in_ns[48] = ""; /* in a container: removed in its IPC namespace */

            if (a->ct.ipc_ns) snprintf(in_ns, sizeof(in_ns), "nsenter -t %d -i ", (int)a->pid);
            return attach_fail(a,
                               "the message queue under the key of process %d (0x%x) is not "
                               "its own (owner uid %u, mode %03o), and the process made no other: "
                               "refusing to send commands into it; remove it (%sipcrm -Q 0x%x) and "
                               "try again",
                               (int)a->pid, (unsigned)RBTRACE_QUEUE_KEY(a->ct.ns_pid),
                               (unsigned)ds.msg_perm.uid, ds.msg_perm.mode & 0777, in_ns,
                               (unsigned)RBTRACE_QUEUE_KEY(a->ct.ns_pid));
        }
        if (now >= deadline) {
            attach_fail(a, "process %d did not answer within %g s", (int)a->pid,
                        attach_timeout_s(a));
            if (!attach_explain_silence(a))
                attach_fail(a,
                            "process %d did not answer within %g s: it may not have rbtrace "
                            "loaded, be stopped, or have replaced rbtrace's SIGURG handler "
                            "with its own trap",
                            (int)a->pid, attach_timeout_s(a));
            return CLI_ERR;
        }
        cli_sleep_ms(1);
    }
}

/* One message; when the queue is full, nudge the target until it drains. */
static int attach_send_message(struct attach *a, const struct rbtrace_msg *msg, size_t size)
{
    int64_t deadline = cli_now_ms() + a->timeout_ms;

    for (;;) {
        if (msgsnd(a->qid, msg, size, IPC_NOWAIT) == 0) return CLI_OK;
        if (errno == EINTR) continue;
        if (errno == EIDRM || errno == EINVAL)
            return attach_fail(a,
                               "the message queue of process %d (id %d) was removed (%s) while "
                               "in use: something else removed it (ipcrm?); the process makes a "
                               "new one when signalled again: run rbtrace again",
                               (int)a->pid, a->qid, errno == EIDRM ? "EIDRM" : "EINVAL");
        if (errno != EAGAIN) return attach_fail_errno(a, "could not send a command");
        if (cli_now_ms() >= deadline)
            return attach_fail(a,
                               "process %d does not read its commands (its queue stayed full "
                               "for %g s)",
                               (int)a->pid, attach_timeout_s(a));
        if (attach_signal(a) != CLI_OK) return CLI_ERR;
        cli_sleep_ms(1);
    }
}

/* cmd as msgpack into sbuf (initialised here; the caller destroys it). */
static int attach_encode(struct attach *a, const struct rbtrace_command *cmd, msgpack_sbuffer *sbuf)
{
    msgpack_packer pk;

    msgpack_sbuffer_init(sbuf);
    msgpack_packer_init(&pk, sbuf, msgpack_sbuffer_write);
    if (rbtrace_command_encode(&pk, cmd) != RBTRACE_OK)
        return attach_fail(a, "could not encode command %d", (int)cmd->type);
    if (sbuf->size > RBTRACE_COMMAND_MAX)
        return attach_fail(a, "the command is too long (%zu bytes, at most %d)", sbuf->size,
                           RBTRACE_COMMAND_MAX);
    return CLI_OK;
}

/* ATTACH, whole in one queue message (protocol.h), then the signal. */
int attach_send_attach(struct attach *a, const struct rbtrace_command *cmd)
{
    msgpack_sbuffer sb;
    struct rbtrace_msg msg;
    int rc = CLI_ERR;

    if (attach_encode(a, cmd, &sb) != CLI_OK) goto free_buf;
    if (sb.size > sizeof(msg.mtext) - 1) { /* a socket path is short: cannot happen */
        attach_fail(a, "the attach command is too long (%zu bytes)", sb.size);
        goto free_buf;
    }
    msg.mtype = RBTRACE_MSG_TYPE;
    msg.mtext[0] = RBTRACE_CHUNK_FIRST;
    memcpy(msg.mtext + 1, sb.data, sb.size);
    if (attach_send_message(a, &msg, sb.size + 1) == CLI_OK) rc = attach_signal(a);
free_buf:
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/*
 * len bytes on the target's connection, waiting (up to the timeout) while
 * it is full: a target reads its commands when its helper thread gets the
 * GVL. Not interruptible: DETACH is sent after ^C.
 */
static int attach_write(struct attach *a, const char *data, size_t len, int64_t deadline)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(a->conn_fd, data + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        struct pollfd p = { a->conn_fd, POLLOUT, 0 };
        int64_t left;

        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            if (errno == EPIPE || errno == ECONNRESET)
                return attach_fail(a, "process %d closed the connection", (int)a->pid);
            return attach_fail_errno(a, "could not send a command");
        }
        if (!attach_target_alive(a)) return attach_fail(a, "process %d exited", (int)a->pid);
        left = deadline - cli_now_ms();
        if (left <= 0)
            return attach_fail(a, "process %d does not read its commands (they waited %g s)",
                               (int)a->pid, attach_timeout_s(a));
        if (poll(&p, 1, left < ATTACH_TICK_MS ? (int)left : ATTACH_TICK_MS) < 0 && errno != EINTR)
            return attach_fail_errno(a, "poll");
    }
    return CLI_OK;
}

/* A command after the attach: one frame (protocol.h) on the connection
 * the target made, which nobody else can write to. */
/* The bytes held, sent; the buffer emptied either way. */
static int attach_send_held(struct attach *a)
{
    int rc = attach_write(a, a->held.data, a->held.size, cli_now_ms() + a->timeout_ms);

    a->held.size = 0;
    return rc;
}

int attach_send(struct attach *a, const struct rbtrace_command *cmd)
{
    unsigned char header[RBTRACE_FRAME_HEADER];
    msgpack_sbuffer sb;
    int rc = CLI_ERR;

    if (a->conn_fd < 0) return attach_fail(a, "not attached");
    if (attach_encode(a, cmd, &sb) != CLI_OK) goto free_buf;
    header[0] = (unsigned char)(sb.size >> 24);
    header[1] = (unsigned char)(sb.size >> 16);
    header[2] = (unsigned char)(sb.size >> 8);
    header[3] = (unsigned char)sb.size;
    /* One write, the frame's header with its command: never split. */
    if (msgpack_sbuffer_write(&a->held, (const char *)header, sizeof(header)) != 0 ||
        msgpack_sbuffer_write(&a->held, sb.data, sb.size) != 0) {
        a->held.size = 0;
        attach_fail(a, "out of memory");
        goto free_buf;
    }
    rc = a->corked && a->held.size < RBTRACE_COMMAND_MAX ? CLI_OK : attach_send_held(a);
free_buf:
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

void attach_cork(struct attach *a)
{
    a->corked = 1;
}

int attach_uncork(struct attach *a)
{
    a->corked = 0;
    return a->held.size ? attach_send_held(a) : CLI_OK;
}

/* ---- the target's connection ---- */

/* 1 if fd's peer is the target; 0 if someone else (fd is then closed). */
static int attach_peer_is_target(struct attach *a, int fd)
{
    struct ucred cred = { 0, 0, 0 };
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid == a->pid) return 1;
    fprintf(stderr, "*** ignored a connection from process %d: not process %d\n", (int)cred.pid,
            (int)a->pid);
    close(fd);
    return 0;
}

/* One accept; CLI_OK with a->conn_fd set, or with nothing yet. */
static int attach_accept_one(struct attach *a)
{
    int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);

    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
            return CLI_OK;
        return attach_fail_errno(a, "could not accept the process's connection");
    }
    if (attach_peer_is_target(a, fd)) a->conn_fd = fd;
    return CLI_OK;
}

int attach_accept(struct attach *a)
{
    int64_t deadline = cli_now_ms() + a->timeout_ms;

    while (a->conn_fd < 0) {
        struct pollfd fds[2] = { { a->listen_fd, POLLIN, 0 }, { a->wake_fd, POLLIN, 0 } };
        int64_t left = deadline - cli_now_ms();

        if (*a->stop) return CLI_INTERRUPTED;
        if (!attach_target_alive(a)) return attach_fail(a, "process %d exited", (int)a->pid);
        if (left <= 0) {
            attach_fail(a, "process %d did not connect back within %g s", (int)a->pid,
                        attach_timeout_s(a));
            (void)attach_explain_silence(a);
            return CLI_ERR;
        }
        if (poll(fds, a->wake_fd >= 0 ? 2 : 1, left < ATTACH_TICK_MS ? (int)left : ATTACH_TICK_MS) <
            0) {
            if (errno == EINTR) continue;
            return attach_fail_errno(a, "poll");
        }
        if ((fds[0].revents & POLLIN) && attach_accept_one(a) != CLI_OK) return CLI_ERR;
    }
    /* Nobody else may connect now. */
    attach_remove_socket(a);
    return CLI_OK;
}

/* ---- cleanup ---- */

/*
 * A target killed with SIGKILL cannot remove its queue, and nobody would
 * until the next rbtrace run swept it: remove the one we used, once the
 * target is gone, if it is still that target's: under its key or private,
 * and last read by it (it marks its queue as it makes it: channel.c), not
 * by another process of the same key since (an app of the same pid in
 * another PID namespace that shares this IPC namespace). The exiting
 * target may beat us to it.
 */
static void attach_remove_dead_queue(struct attach *a)
{
    struct msqid_ds ds;

    if (a->qid < 0 || attach_target_alive(a)) return;
    if (msgctl(a->qid, IPC_STAT, &ds) < 0) return; /* removed already */
    if (!attach_queue_trusted(a, &ds)) return;
    if (ds.msg_perm.__key != RBTRACE_QUEUE_KEY(a->ct.ns_pid) && ds.msg_perm.__key != IPC_PRIVATE)
        return;
    if (ds.msg_lrpid != a->pid) return;
    if (msgctl(a->qid, IPC_RMID, NULL) < 0 && errno != EIDRM && errno != EINVAL)
        fprintf(stderr,
                "rbtrace: could not remove the message queue of process %d (0x%x): %s "
                "(remove it with ipcrm -q %d)\n",
                (int)a->pid, (unsigned)ds.msg_perm.__key, strerror(errno), a->qid);
    a->qid = -1;
}


/* Cleanup cannot fail the run, but a leftover should not go unnoticed. */
static void attach_warn(const char *what, const char *path)
{
    if (errno != ENOENT)
        fprintf(stderr, "rbtrace: could not remove %s %s: %s\n", what, path, strerror(errno));
}

/*
 * Removes what else is in our directory, through its fd (no path walked, no
 * link followed): the target's user owns it and may have put something
 * there. One level: a directory with something in it stays, and the rmdir
 * that follows says so (as it says what these unlinkat could not remove).
 */
static void attach_empty_dir(struct attach *a)
{
    int fd = fcntl(a->dir_fd, F_DUPFD_CLOEXEC, 0);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;

    if (!dir) {
        if (fd >= 0) close(fd);
        return;
    }
    while ((e = readdir(dir)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (unlinkat(a->dir_fd, e->d_name, 0) < 0 && errno == EISDIR)
            (void)unlinkat(a->dir_fd, e->d_name, AT_REMOVEDIR);
    }
    closedir(dir);
}

void attach_remove_socket(struct attach *a)
{
    if (a->listen_fd >= 0) {
        close(a->listen_fd);
        a->listen_fd = -1;
    }
    if (a->sock_path[0]) {
        if (unlinkat(a->dir_fd, ATTACH_SOCK_NAME, 0) < 0) attach_warn("the socket", a->sock_path);
        a->sock_path[0] = '\0';
    }
    if (a->dir_fd >= 0) {
        if (a->dir[0]) attach_empty_dir(a);
        close(a->dir_fd);
        a->dir_fd = -1;
    }
    if (a->dir[0]) {
        /* In a container, through its $TMPDIR's fd: no path of the
         * container's is walked again (unlinkat follows no link). */
        if ((a->cdir.parent_fd >= 0 ? unlinkat(a->cdir.parent_fd, a->cdir.name, AT_REMOVEDIR)
                                    : rmdir(a->dir)) < 0)
            attach_warn("the directory", a->dir);
        a->dir[0] = '\0';
    }
    if (a->cdir.parent_fd >= 0) {
        close(a->cdir.parent_fd);
        a->cdir.parent_fd = -1;
    }
    if (a->cdir.root_fd >= 0) {
        close(a->cdir.root_fd);
        a->cdir.root_fd = -1;
    }
    a->cdir.name[0] = '\0';
}

void attach_close(struct attach *a)
{
    msgpack_sbuffer_destroy(&a->held);
    msgpack_sbuffer_init(&a->held);
    attach_remove_socket(a);
    attach_remove_dead_queue(a);
    if (a->conn_fd >= 0) {
        close(a->conn_fd);
        a->conn_fd = -1;
    }
}
