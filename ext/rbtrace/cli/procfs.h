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

/* Whether /proc/PID/maps names rbtrace.so: 1, 0, or -1 if unreadable. */
int procfs_has_rbtrace(pid_t pid);

/* pid's effective uid; -1 if its /proc entry cannot be read. */
int procfs_euid(pid_t pid, uid_t *uid);

/* When pid's process began, in whole wall-clock seconds (the clock of
 * IPC times), to a clock tick (10 ms); -1 if /proc cannot tell. */
int procfs_started(pid_t pid, time_t *started);

#endif
