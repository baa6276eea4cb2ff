/*
 * util.c - clock helpers and the output file, shared by the client's parts.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

int64_t cli_now_ms(void)
{
    struct timespec ts;

    /* CLOCK_MONOTONIC cannot fail with a valid pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    /* An interrupted sleep is fine: every caller loops on a deadline. */
    nanosleep(&ts, NULL);
}

/* Why the open file fd must not be written, or NULL: a trace holds the
 * app's argument values, so only a plain file of ours with one link (a
 * hard link could be a file of someone else's), a FIFO of ours, or a
 * device (/dev/null). */
static const char *cli_output_refusal(int fd, struct stat *st)
{
    if (fstat(fd, st) != 0) return strerror(errno);
    if (S_ISCHR(st->st_mode)) return NULL;
    if (!S_ISREG(st->st_mode) && !S_ISFIFO(st->st_mode)) return "is not a plain file";
    if (st->st_uid != geteuid()) return "belongs to another user";
    if (S_ISREG(st->st_mode) && st->st_nlink != 1) return "has other hard links";
    return NULL;
}

/* Whether the symbolic link at path was made by us or by root, and so may
 * be followed: /dev/stdout, /dev/fd/N (a shell's >(cmd)), a link of the
 * user's own. One someone else planted (in /tmp, say) is not. */
static int cli_link_is_trusted(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode) &&
        (st.st_uid == 0 || st.st_uid == geteuid());
}

FILE *cli_open_output(const char *path, int append, char *errstr, size_t size)
{
    /* Never through a symbolic link of another user's (one planted in /tmp
     * would have us truncate its target); O_NONBLOCK so that a FIFO
     * without a reader fails instead of hanging (cleared below). */
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0);
    int fd = open(path, flags, 0600);
    const char *why;
    struct stat st;
    FILE *f;

    if (fd < 0 && errno == ELOOP && cli_link_is_trusted(path))
        fd = open(path, flags & ~O_NOFOLLOW, 0600);
    if (fd < 0) {
        if (errno == ELOOP)
            snprintf(errstr, size,
                     "could not open %s: it is a symbolic link of another user's, and rbtrace "
                     "writes a trace only through links of its user or root: give the path it "
                     "points to, or remove the link",
                     path);
        else if (errno == ENXIO) /* O_NONBLOCK: a FIFO nobody reads */
            snprintf(errstr, size,
                     "could not open %s: it is a FIFO that no process reads: start its "
                     "reader first",
                     path);
        else snprintf(errstr, size, "could not open %s: %s", path, strerror(errno));
        return NULL;
    }
    if ((why = cli_output_refusal(fd, &st)) != NULL) {
        snprintf(errstr, size,
                 "could not open %s: it %s; rbtrace writes a trace only to a plain file of "
                 "its user's: remove it or choose another path",
                 path, why);
        close(fd);
        return NULL;
    }
    /* Truncated only now, once known to be ours (not at open: O_TRUNC
     * would cut a file the checks then refuse). */
    if (fcntl(fd, F_SETFL, flags & O_APPEND) != 0 ||
        (!append && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)) {
        snprintf(errstr, size, "could not open %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!(f = fdopen(fd, append ? "a" : "w"))) {
        snprintf(errstr, size, "could not open %s: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}
