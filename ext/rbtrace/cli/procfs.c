/*
 * procfs.c - what /proc says about a process (procfs.h).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "procfs.h"
#include "protocol.h"

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

/* ---- which rbtrace a process loaded ---- */

#define PROCFS_LIB_SUFFIX "rbtrace.so"
#define PROCFS_DELETED " (deleted)"
#define PROCFS_READ_CHUNK 65536

/* Whether the file at fd holds RBTRACE_LIBRARY_MARK: 1, 0, or -1 on a
 * read error. Read in chunks that overlap by the mark's length less one,
 * so that a mark across two chunks is found. */
static int procfs_fd_has_mark(int fd)
{
    static const char mark[] = RBTRACE_LIBRARY_MARK;
    const size_t keep = sizeof(mark) - 2;
    char *buf = malloc(PROCFS_READ_CHUNK + keep);
    size_t have = 0;
    int found = 0;

    if (!buf) return -1;
    for (;;) {
        ssize_t n = read(fd, buf + have, PROCFS_READ_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n < 0) found = -1;
            break;
        }
        have += (size_t)n;
        if (memmem(buf, have, mark, sizeof(mark) - 1)) {
            found = 1;
            break;
        }
        if (have > keep) {
            memmove(buf, buf + have - keep, keep);
            have = keep;
        }
    }
    free(buf);
    return found;
}

/* Whether the library at path is this rbtrace's when it cannot be read:
 * ours is always loaded as ".../rbtrace/rbtrace.so" (require
 * 'rbtrace/rbtrace'), the original gem's as ".../rbtrace.so" straight in a
 * load path directory (require 'rbtrace.so'): the gem's lib/ or its
 * extension directory, named "rbtrace-0.5.x". Under Ruby::Box (Ruby 4.0,
 * RUBY_BOX=1) each box loads a copy, TMPDIR/_ruby_box_pPID_N_NAME, NAME
 * the feature with '+' for '/' ("rbtrace+rbtrace.so" for ours), removed
 * once loaded: always a deleted file, never read. */
static int procfs_path_is_ours(const char *path)
{
    static const char ours[] = "/rbtrace/" PROCFS_LIB_SUFFIX;
    static const char boxed[] = "_rbtrace+" PROCFS_LIB_SUFFIX, box_prefix[] = "/_ruby_box_p";
    size_t len = strlen(path);
    const char *base = strrchr(path, '/');

    if (len >= sizeof(ours) - 1 && !strcmp(path + len - (sizeof(ours) - 1), ours)) return 1;
    return base && !strncmp(base, box_prefix, sizeof(box_prefix) - 1) && len >= sizeof(boxed) - 1 &&
        !strcmp(path + len - (sizeof(boxed) - 1), boxed);
}

/* Whether the library mapped from path in pid is this rbtrace's: by its
 * content (RBTRACE_LIBRARY_MARK) where it can be read as pid sees it
 * (through /proc/PID/root: the app may run in another mount namespace),
 * else by its path. A deleted file's path may hold another file now. */
static int procfs_library_is_ours(pid_t pid, const char *path, int deleted)
{
    char rooted[4096 + 64];
    int fd = -1, found = -1;

    if (!deleted) {
        if ((size_t)snprintf(rooted, sizeof(rooted), "/proc/%d/root%s", (int)pid, path) <
            sizeof(rooted))
            fd = open(rooted, O_RDONLY | O_CLOEXEC);
        if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd >= 0) {
        found = procfs_fd_has_mark(fd);
        close(fd);
    }
    return found >= 0 ? found : procfs_path_is_ours(path);
}

/*
 * Every "rbtrace.so" in pid's maps: PROCFS_LIB_OURS if one is this
 * rbtrace's, else PROCFS_LIB_OLD_GEM (its path in old_path) if there is
 * one, else PROCFS_LIB_NONE; -1 if the maps cannot be read.
 */
static int procfs_maps_scan(pid_t pid, char *old_path, size_t old_size)
{
    char path[64], line[4096], last[4096] = "";
    int kind = PROCFS_LIB_NONE;
    FILE *maps;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    maps = fopen(path, "re");
    if (!maps) return -1;
    while (kind != PROCFS_LIB_OURS && fgets(line, sizeof(line), maps)) {
        size_t len = strcspn(line, "\n"), del = sizeof(PROCFS_DELETED) - 1;
        size_t suffix = sizeof(PROCFS_LIB_SUFFIX) - 1;
        int deleted = 0;
        char *file;

        line[len] = '\0';
        if (len >= del && !strcmp(line + len - del, PROCFS_DELETED)) {
            len -= del;
            line[len] = '\0';
            deleted = 1;
        }
        if (len < suffix || strcmp(line + len - suffix, PROCFS_LIB_SUFFIX) != 0) continue;
        /* the path is the line's last field, the only one with a '/' */
        if (!(file = strchr(line, '/')) || !strcmp(file, last)) continue;
        snprintf(last, sizeof(last), "%s", file); /* one library, several mappings */
        if (procfs_library_is_ours(pid, file, deleted)) {
            kind = PROCFS_LIB_OURS;
        } else if (kind == PROCFS_LIB_NONE) {
            kind = PROCFS_LIB_OLD_GEM;
            if (old_size) snprintf(old_path, old_size, "%s", file);
        }
    }
    if (ferror(maps)) kind = -1;
    fclose(maps);
    return kind;
}

/* /proc/PID/maps is read a page at a time, and the kernel may skip lines
 * when the process maps or unmaps memory in between (a busy thread's GC):
 * a miss is read again before it is believed. */
int procfs_rbtrace_library(pid_t pid, char *old_path, size_t old_size)
{
    int kind = PROCFS_LIB_NONE, tries;

    for (tries = 0; tries < 3 && kind != PROCFS_LIB_OURS && kind != -1; tries++)
        kind = procfs_maps_scan(pid, old_path, old_size);
    return kind;
}

void procfs_gem_version(const char *path, char *out, size_t size)
{
    const char *p = path, *v = NULL;
    size_t n = 0;

    while ((p = strstr(p, "rbtrace-")) != NULL) {
        p += sizeof("rbtrace-") - 1;
        if (*p >= '0' && *p <= '9') v = p; /* the last one: the gem's own directory */
    }
    if (v)
        while (v[n] && v[n] != '/' && n + 1 < size) n++;
    if (size) snprintf(out, size, "%.*s", (int)n, v ? v : "");
}

/* ---- threads ---- */

/* The first line of a small /proc file into buf ("" if unreadable). */
static void procfs_read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);

    if (fd >= 0) close(fd);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

/* One thread's state, name, wchan and system call. -1 if it is gone. */
static int procfs_task(pid_t pid, pid_t tid, struct procfs_task *t)
{
    char path[96], buf[1024], *open_paren, *close_paren, *end;
    size_t len;

    memset(t, 0, sizeof(*t));
    t->tid = tid;
    t->syscall = -1;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    procfs_read_small(path, buf, sizeof(buf));
    /* "tid (comm) S ...": comm may hold spaces and parentheses */
    if (!(open_paren = strchr(buf, '(')) || !(close_paren = strrchr(buf, ')')) ||
        close_paren < open_paren || close_paren[1] != ' ')
        return -1;
    len = (size_t)(close_paren - open_paren - 1);
    if (len >= sizeof(t->comm)) len = sizeof(t->comm) - 1;
    memcpy(t->comm, open_paren + 1, len);
    t->state = close_paren[2];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", (int)pid, (int)tid);
    procfs_read_small(path, t->wchan, sizeof(t->wchan));
    if (!strcmp(t->wchan, "0")) t->wchan[0] = '\0'; /* hidden, or not sleeping */
    snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
    procfs_read_small(path, buf, sizeof(buf));
    /* "N args...", "running", or nothing (not permitted) */
    if (buf[0] >= '0' && buf[0] <= '9') {
        long nr = strtol(buf, &end, 10);
        if (end != buf) t->syscall = nr;
    }
    return 0;
}

int procfs_tasks(pid_t pid, struct procfs_task *tasks, int max)
{
    char path[64];
    struct dirent *d;
    DIR *dir;
    int n = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if (!(dir = opendir(path))) return -1;
    while (n < max && (d = readdir(dir)) != NULL) {
        char *end;
        long tid = strtol(d->d_name, &end, 10);

        if (*end || tid <= 0) continue;
        if (procfs_task(pid, (pid_t)tid, &tasks[n]) == 0) n++;
    }
    closedir(dir);
    return n;
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

/* One "Name:\tvalue" line of /proc/PID/status (or the task's) into out. */
int procfs_status_field(const char *path, const char *name, char *out, size_t size)
{
    char line[512];
    size_t len = strlen(name);
    FILE *f = fopen(path, "re");
    int found = 0;

    if (!f) return 0;
    while (!found && fgets(line, sizeof(line), f))
        if (!strncmp(line, name, len) && line[len] == ':') {
            char *v = line + len + 1;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = '\0';
            snprintf(out, size, "%s", v);
            found = 1;
        }
    fclose(f);
    return found;
}
