/*
 * attach.h - reaching a target process (docs/DESIGN.md, "Attaching").
 *
 * In order: attach_check_target (exists, ours to signal, has rbtrace
 * loaded), attach_listen (private 0700 directory, Unix socket),
 * attach_find_queue (SIGURG until the target's queue appears; refuse a
 * queue others could use), attach_send_attach (ATTACH into the queue),
 * attach_accept (the target connects back; the peer must be the target),
 * then attach_send for every later command, on that connection (between
 * attach_cork and attach_uncork, held and sent in one write).
 * attach_close releases everything, whatever step failed.
 *
 * Every function returns CLI_OK, CLI_ERR with a message in errstr, or
 * CLI_INTERRUPTED when *stop was set while it waited.
 */
#ifndef RBTRACE_CLI_ATTACH_H
#define RBTRACE_CLI_ATTACH_H

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include "cli.h"
#include "codec.h"
#include "container.h"

struct attach {
    pid_t pid;                   /* the target */
    int timeout_ms;              /* how long each step may wait */
    volatile sig_atomic_t *stop; /* set by the session's signal handlers */
    int wake_fd;                 /* readable once *stop is set, or -1 */
    struct container ct;         /* the target's namespaces, if not ours */
    char dir[PATH_MAX];          /* our private directory; "" when none */
    int dir_fd;                  /* that directory, opened; or -1 */
    struct container_dir cdir;   /* in a container: its parent, opened, and name */
    char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* as the target sees it;
                                                                     "" when none */
    char bind_path[64];      /* in a container: where we bind it; else "" */
    int listen_fd;           /* listening socket, or -1 */
    int conn_fd;             /* the target's connection, or -1 */
    int qid;                 /* the target's message queue, or -1 */
    uid_t target_uid;        /* the target's euid: its queue's owner */
    time_t target_started;   /* when it began (wall clock, s); 0 if unknown */
    int corked;              /* attach_send holds commands in held */
    msgpack_sbuffer held;    /* framed commands not sent yet */
    char errstr[CLI_ERRLEN]; /* why the last call failed */
};

void attach_init(struct attach *a, pid_t pid, int timeout_ms, volatile sig_atomic_t *stop,
                 int wake_fd);

int attach_check_target(struct attach *a);
int attach_listen(struct attach *a);
int attach_find_queue(struct attach *a);
/* ATTACH into the target's queue, then SIGURG. */
int attach_send_attach(struct attach *a, const struct rbtrace_command *cmd);
int attach_accept(struct attach *a);
/* A command on the target's connection (once attach_accept made it),
 * framed, in one write: or held, while corked. */
int attach_send(struct attach *a, const struct rbtrace_command *cmd);
/* The commands sent from here until attach_uncork go in one write: the
 * target reads them at once and carries them out in one turn with the GVL
 * (one hand-off, not one a command, behind a busy thread). */
void attach_cork(struct attach *a);
/* Sends what was held (CLI_OK, or CLI_ERR), and sends at once again. */
int attach_uncork(struct attach *a);

/* Our pid as the target sees it, for ATTACH: 0 from outside its PID
 * namespace, where we have none (docs/DESIGN.md, "Containers"). */
pid_t attach_client_pid(const struct attach *a);

/* Sends SIGURG to the target: it then reads its queue. */
int attach_signal(struct attach *a);

/* 1 while the target exists, 0 once it is gone. */
int attach_target_alive(const struct attach *a);

/* Closes the listening socket and removes it and the directory. */
void attach_remove_socket(struct attach *a);

/* Closes every fd and removes the socket and directory (and the queue,
 * if the target died and left it). */
void attach_close(struct attach *a);

#endif
