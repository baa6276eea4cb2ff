/*
 * container.h - a target in namespaces of its own (Docker, Kubernetes,
 * systemd-nspawn), traced from the host by its host pid
 * (docs/DESIGN.md, "Containers").
 *
 * What differs from a target beside us, and what attach.c does about it:
 *   - its PID namespace: it knows itself by another pid (ns_pid), which
 *     keys its message queue; our pid means nothing there (we send 0);
 *   - its IPC namespace: the queue is only there (container_join_ipc);
 *   - its mount namespace (or root): our $TMPDIR is not its; the socket's
 *     directory is made in its $TMPDIR, through /proc/PID/root, as the
 *     app's user (container_make_dir), and the app is sent the path it sees;
 *   - its user namespace: our root may mean nobody there; we listen as the
 *     host uid of the app's user, whom the app then sees as itself.
 * A target in none of them takes none of these paths.
 */
#ifndef RBTRACE_CLI_CONTAINER_H
#define RBTRACE_CLI_CONTAINER_H

#include <sys/types.h>

/* The longest $TMPDIR of a target used: "/rbtrace-XXXXXX/sock" after it
 * must fit a socket's path (108 bytes); a longer one counts as unset. */
#define CONTAINER_TMPDIR_MAX 80

struct container {
    int other;    /* in a namespace of its own: any of the four below */
    int pid_ns;   /* another PID namespace */
    int ipc_ns;   /* another IPC namespace */
    int mnt_ns;   /* another mount namespace, or another root */
    int user_ns;  /* another user namespace */
    pid_t ns_pid; /* its pid as it sees it; the host pid when pid_ns is 0 */
    int unsure;   /* ipc_ns, mnt_ns, user_ns only assumed (not ours to look at) */
};

/*
 * Which of our namespaces pid shares (/proc/PID/status's NSpid, and the
 * /proc/PID/ns links where we may read them: where we may not, and NSpid
 * shows it nested, every namespace counts as its own). Never fails: a
 * process that /proc does not show counts as beside us (its absence is
 * told later).
 */
void container_probe(pid_t pid, struct container *c);

/* Whether we may enter another process's namespaces: CAP_SYS_ADMIN (setns)
 * and CAP_SYS_PTRACE (its /proc/PID/root, environ, ns) in effect. */
int container_privileged(void);

/* The refusal for a target in a container when we are not privileged,
 * into errstr (size bytes): what happened, and what to do. */
void container_refusal(pid_t pid, const struct container *c, char *errstr, size_t size);

/* Joins pid's IPC namespace, for good (the client attaches to one process).
 * 0, or -1 with a message in errstr. */
int container_join_ipc(pid_t pid, const struct container *c, char *errstr, size_t size);

/*
 * Takes the effective uid and gid and the groups of pid's user (as we see
 * them: its host ids; /proc/PID/status), until container_unbecome. What is
 * made in the container's files is made as the app's user: the socket's
 * directory only where that user may (never through root's permissions or
 * root's groups), and what it makes is its own. In another user namespace
 * our root may be nobody there: a tmpfs mounted in that namespace cannot
 * hold a file of ours (EOVERFLOW), and the app refuses a listener it sees
 * as nobody; listen(2) as the app's user is one it sees as itself. Root's
 * real and saved ids stay: the way back. 0, or -1 with a message in errstr.
 */
int container_become(pid_t pid, char *errstr, size_t size);
void container_unbecome(void);

/* The directory made inside a container for our socket. */
struct container_dir {
    char tmp[CONTAINER_TMPDIR_MAX + 1]; /* the app's $TMPDIR, as it sees it */
    int root_fd;   /* its root (/proc/PID/root), opened until the directory is made */
    int parent_fd; /* the directory made in, opened: rmdir goes through it */
    int dir_fd;    /* the new directory */
    char name[32]; /* its name in parent_fd ("rbtrace-XXXXXX"); "" if none */
    char app_path[CONTAINER_TMPDIR_MAX + 48]; /* its path as the app sees it */
};

/*
 * Reads the app's $TMPDIR (/proc/PID/environ; /tmp if it names no usable
 * path) into d and opens its root, as we are (root: /proc/PID/root is
 * ptrace's to allow). 0, or -1 with a message in errstr.
 */
int container_open_root(pid_t pid, struct container_dir *d, char *errstr, size_t size);

/*
 * A fresh directory (mode 0700, as mkdtemp makes) in d's $TMPDIR, opened,
 * with the credentials we have (the app's user's: container_become). The
 * way from the root is walked one directory at a time, without following a
 * symbolic link or "..": the container's files are the container's to
 * plant (refused). A $TMPDIR we cannot write or reach: the app's /tmp
 * instead, as Ruby's Dir.tmpdir does. 0, or -1 with a message in errstr
 * (d->root_fd closed either way; d->name set if made: the caller removes it).
 */
int container_make_dir(pid_t pid, struct container_dir *d, char *errstr, size_t size);

#endif
