/*
 * procfs.c - what /proc says about a process (procfs.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "procfs.h"

/* /proc/PID/stat into buf; the fields after "pid (comm)", or NULL. comm
 * may hold spaces and parentheses: the fields begin after the last ')'. */
static const char *procfs_stat_fields(pid_t pid, char *buf, size_t size)
{
    char path[64];
    const char *paren;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0) return NULL;
    buf[n] = '\0';
    paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' ? paren + 2 : NULL;
}

/* A zombie has exited; its parent just has not reaped it yet. */
static int procfs_is_zombie(pid_t pid)
{
    char buf[1024];
    const char *fields = procfs_stat_fields(pid, buf, sizeof(buf));

    return fields && (fields[0] == 'Z' || fields[0] == 'X');
}

int procfs_alive(pid_t pid)
{
    if (kill(pid, 0) < 0) return errno != ESRCH;
    return !procfs_is_zombie(pid);
}

static int procfs_maps_scan(pid_t pid)
{
    static const char suffix[] = "rbtrace.so";
    static const char deleted[] = " (deleted)";
    char path[64], line[4096];
    int found = 0;
    FILE *maps;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    maps = fopen(path, "re");
    if (!maps) return -1;
    while (!found && fgets(line, sizeof(line), maps)) {
        size_t len = strcspn(line, "\n");
        line[len] = '\0';
        if (len >= sizeof(deleted) - 1 && !strcmp(line + len - (sizeof(deleted) - 1), deleted))
            len -= sizeof(deleted) - 1;
        found = len >= sizeof(suffix) - 1 &&
                !strncmp(line + len - (sizeof(suffix) - 1), suffix, sizeof(suffix) - 1);
    }
    if (ferror(maps)) found = -1;
    fclose(maps);
    return found;
}

/* /proc/PID/maps is read a page at a time, and the kernel may skip lines
 * when the process maps or unmaps memory in between (a busy thread's GC):
 * a miss is read again before it is believed. */
int procfs_has_rbtrace(pid_t pid)
{
    int found = 0, tries;

    for (tries = 0; tries < 3 && found == 0; tries++) found = procfs_maps_scan(pid);
    return found;
}

int procfs_euid(pid_t pid, uid_t *uid)
{
    char path[64], line[256];
    unsigned long real, effective;
    int found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "re")) == NULL) return -1;
    while (!found && fgets(line, sizeof(line), f))
        found = sscanf(line, "Uid: %lu %lu", &real, &effective) == 2;
    fclose(f);
    if (!found) return -1;
    *uid = (uid_t)effective;
    return 0;
}

/*
 * stat(5)'s starttime counts clock ticks of CLOCK_BOOTTIME; the wall clock
 * at that moment is now's, less the boot time gone by since. Not /proc/
 * stat's btime, a whole second that can be off by one.
 */
int procfs_started(pid_t pid, time_t *started)
{
    char buf[1024];
    const char *p = procfs_stat_fields(pid, buf, sizeof(buf));
    unsigned long long ticks;
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec boot_now, wall_now;
    double since_start;
    int field;

    if (!p || hz <= 0) return -1;
    /* starttime is field 22 of stat(5); p is at field 3 (state). */
    for (field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return -1;
        p++;
    }
    if (sscanf(p, "%llu", &ticks) != 1) return -1;
    if (clock_gettime(CLOCK_BOOTTIME, &boot_now) != 0 ||
        clock_gettime(CLOCK_REALTIME, &wall_now) != 0)
        return -1;
    since_start = (double)boot_now.tv_sec + boot_now.tv_nsec / 1e9 - (double)ticks / (double)hz;
    if (since_start < 0) since_start = 0;
    *started = (time_t)((double)wall_now.tv_sec + wall_now.tv_nsec / 1e9 - since_start);
    return 0;
}
