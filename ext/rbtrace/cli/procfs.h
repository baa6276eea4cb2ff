/*
 * procfs.h - what /proc says about a process: whether it is alive, has
 * rbtrace loaded, runs as whom, and since when.
 */
#ifndef RBTRACE_CLI_PROCFS_H
#define RBTRACE_CLI_PROCFS_H

#include <sys/types.h>
#include <time.h>

/* 1 while pid exists and has not exited (a zombie has), 0 once it is gone. */
int procfs_alive(pid_t pid);

/*
 * Which rbtrace pid loaded, from the libraries named "rbtrace.so" in its
 * /proc/PID/maps. This rbtrace's library holds RBTRACE_LIBRARY_MARK
 * (protocol.h); the original gem's (0.5.x and older: another protocol,
 * another client) has the same name and not the mark. The file is read as
 * pid sees it; where it cannot be read (deleted, not ours to read), the
 * path decides: this rbtrace's is always ".../rbtrace/rbtrace.so".
 */
enum procfs_library {
    PROCFS_LIB_NONE = 0,   /* no rbtrace.so */
    PROCFS_LIB_OURS = 1,   /* this rbtrace's (also if an old one is there too) */
    PROCFS_LIB_OLD_GEM = 2 /* only the original gem's */
};

/* A procfs_library, or -1 if the maps are unreadable; for
 * PROCFS_LIB_OLD_GEM, the library's path in old_path (old_size bytes; 0
 * for none). The path is the app's: escape it to show it. */
int procfs_rbtrace_library(pid_t pid, char *old_path, size_t old_size);

/* The gem version in an old gem's library path (".../rbtrace-0.5.3/lib/
 * rbtrace.so": "0.5.3"), or "" if none, into out. */
void procfs_gem_version(const char *path, char *out, size_t size);

/* pid's effective uid; -1 if its /proc entry cannot be read. */
int procfs_euid(pid_t pid, uid_t *uid);

/* When pid's process began, in whole wall-clock seconds (the clock of
 * IPC times), to a clock tick (10 ms); -1 if /proc cannot tell. */
int procfs_started(pid_t pid, time_t *started);

/* One thread of a process, as /proc/PID/task/TID says. */
struct procfs_task {
    pid_t tid;
    char state;     /* stat(5)'s: R running, S sleeping, D disk, T stopped... */
    char comm[16];  /* its name: the app's text (escape it to show it) */
    char wchan[64]; /* where it sleeps in the kernel; "" if not known */
    long syscall;   /* the system call it is in; -1 running or not known */
};

/* Up to max of pid's threads into tasks: how many, or -1 if /proc/PID/task
 * cannot be read. wchan and syscall are filled where readable (wchan may
 * need kallsyms, syscall ptrace's permission). */
int procfs_tasks(pid_t pid, struct procfs_task *tasks, int max);

/* One "Name:\tvalue" line of a /proc status file (/proc/PID/status, or a
 * task's) into out, the value's leading blanks skipped: 1 found, 0 not
 * (or unreadable). */
int procfs_status_field(const char *path, const char *name, char *out, size_t size);

#endif
