/*
 * ps.c - --ps PATTERN: finds the processes to trace by their command line.
 *
 * Every /proc/PID/cmdline (arguments joined by spaces) is matched against
 * PATTERN, a POSIX extended regular expression. Kept are the processes
 * that have loaded rbtrace and that we may signal; the client itself is
 * left out (its own command line holds the pattern). One match is traced
 * at once; several are listed and, when stdin is a terminal, the user
 * picks (numbers, or "a" for all); otherwise the list is the error.
 * Command lines are the processes' own (any user may put an escape
 * sequence there): they are shown escaped (escape.h).
 *
 * A match that loaded the original rbtrace gem (0.5.x: another client,
 * procfs.h) is listed too, marked, so that its user knows why it cannot
 * be traced; it is never traced at once as the one match.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "escape.h"
#include "procfs.h"
#include "ps.h"

#define PS_CMDLINE_MAX 4096
#define PS_MAX 256
/* How much of a command line is shown: its first bytes, escaped. */
#define PS_SHOWN 100

struct ps_match {
    pid_t pid;
    int old_gem;      /* loaded the original gem, not this rbtrace */
    char version[32]; /* ... that gem's version, or "" */
    char cmdline[PS_CMDLINE_MAX];
};

/* What the list says of an old gem's process. */
#define PS_OLD_GEM_MARK "  [the original rbtrace gem%s%s: use its own client]"


/* pid's command line, arguments joined by spaces; 0 if unreadable/empty. */
static size_t ps_cmdline(pid_t pid, char *out, size_t cap)
{
    char path[64];
    size_t n, i;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    if (!(f = fopen(path, "re"))) return 0;
    n = fread(out, 1, cap - 1, f);
    fclose(f);
    while (n && out[n - 1] == '\0') n--;
    for (i = 0; i < n; i++)
        if (out[i] == '\0') out[i] = ' ';
    out[n] = '\0';
    return n;
}

/* Matches every process; fills m (up to PS_MAX). Returns the count, or -1. */
static int ps_scan(const regex_t *re, struct ps_match *m, int *without_rbtrace, int inject)
{
    DIR *proc = opendir("/proc");
    struct dirent *d;
    pid_t self = getpid();
    int n = 0;

    *without_rbtrace = 0;
    if (!proc) {
        fprintf(stderr, "rbtrace: --ps: cannot read /proc: %s\n", strerror(errno));
        return -1;
    }
    while ((d = readdir(proc)) != NULL && n < PS_MAX) {
        char *end, old[4096];
        int kind;
        long pid = strtol(d->d_name, &end, 10);

        if (*end || pid <= 0 || (pid_t)pid == self) continue;
        if (!ps_cmdline((pid_t)pid, m[n].cmdline, sizeof(m[n].cmdline))) continue;
        if (regexec(re, m[n].cmdline, 0, NULL, 0) != 0) continue;
        if (kill((pid_t)pid, 0) != 0) kind = PROCFS_LIB_NONE;
        else kind = procfs_rbtrace_library((pid_t)pid, old, sizeof(old));
        /* --inject: a process of ours without rbtrace will do (it loads it) */
        if (inject && kind == PROCFS_LIB_NONE && kill((pid_t)pid, 0) == 0) kind = PROCFS_LIB_OURS;
        if (kind != PROCFS_LIB_OURS && kind != PROCFS_LIB_OLD_GEM) {
            (*without_rbtrace)++;
            continue;
        }
        m[n].old_gem = kind == PROCFS_LIB_OLD_GEM;
        if (m[n].old_gem) procfs_gem_version(old, m[n].version, sizeof(m[n].version));
        m[n++].pid = (pid_t)pid;
    }
    closedir(proc);
    return n;
}

/* The first PS_SHOWN bytes of cmdline, escaped, in out. */
static const char *ps_shown(const char *cmdline, char out[PS_SHOWN * ESCAPE_MAX_PER_BYTE + 1])
{
    size_t len = strnlen(cmdline, PS_SHOWN);

    out[escape_text(out, cmdline, len, 0)] = '\0';
    return out;
}

static void ps_list(const struct ps_match *m, int n)
{
    char shown[PS_SHOWN * ESCAPE_MAX_PER_BYTE + 1];
    int i;

    for (i = 0; i < n; i++) {
        fprintf(stderr, "  %2d) %d  %s", i + 1, (int)m[i].pid, ps_shown(m[i].cmdline, shown));
        /* the version is the app's text too (a path's): escaped */
        if (m[i].old_gem)
            fprintf(stderr, PS_OLD_GEM_MARK, m[i].version[0] ? " " : "",
                    ps_shown(m[i].version, shown));
        fputc('\n', stderr);
    }
}

/* How many of the n matches loaded the original gem. */
static int ps_count_old(const struct ps_match *m, int n)
{
    int i, old = 0;

    for (i = 0; i < n; i++) old += m[i].old_gem;
    return old;
}

/* A chosen process; choosing one twice is harmless. */
static int ps_add(struct options *o, pid_t pid)
{
    if (options_add_pid(o, pid) != CLI_ERR) return CLI_OK;
    fprintf(stderr, "rbtrace: out of memory\n");
    return CLI_ERR;
}

/* Reads the user's choice: "1 3", "a". CLI_OK with o->pids filled. */
static int ps_ask(struct options *o, const struct ps_match *m, int n, FILE *in)
{
    char line[1024], *p, *end;

    fprintf(stderr, "trace which? numbers separated by spaces, a for all: ");
    fflush(stderr);
    if (!fgets(line, sizeof(line), in)) {
        fprintf(stderr, "\nrbtrace: --ps: no answer; nothing traced\n");
        return CLI_ERR;
    }
    for (p = line; *p; p++) {
        if (isspace((unsigned char)*p) || *p == ',') continue;
        if (*p == 'a' || *p == 'A') {
            int i;
            for (i = 0; i < n; i++)
                if (ps_add(o, m[i].pid) != CLI_OK) return CLI_ERR;
            break;
        }
        long k = strtol(p, &end, 10);
        if (end == p || k < 1 || k > n) {
            fprintf(stderr, "rbtrace: --ps: '%s' is not one of the numbers 1 to %d\n",
                    strtok(p, " \t\n,"), n);
            return CLI_ERR;
        }
        if (ps_add(o, m[k - 1].pid) != CLI_OK) return CLI_ERR;
        p = end - 1;
    }
    if (!o->n_pids) {
        fprintf(stderr, "rbtrace: --ps: nothing chosen; nothing traced\n");
        return CLI_ERR;
    }
    return CLI_OK;
}

int ps_choose(struct options *o, FILE *in)
{
    struct ps_match *m = calloc(PS_MAX, sizeof(*m));
    regex_t re;
    int n, without, rc = CLI_ERR, err;
    char why[256], shown[PS_SHOWN * ESCAPE_MAX_PER_BYTE + 1];

    if (!m) {
        fprintf(stderr, "rbtrace: out of memory\n");
        return CLI_ERR;
    }
    if ((err = regcomp(&re, o->ps_pattern, REG_EXTENDED | REG_NOSUB)) != 0) {
        regerror(err, &re, why, sizeof(why));
        fprintf(stderr, "rbtrace: --ps: bad pattern '%s': %s\n", o->ps_pattern, why);
        free(m);
        return CLI_ERR;
    }
    n = ps_scan(&re, m, &without, o->inject);
    regfree(&re);
    if (n > 0 && ps_count_old(m, n) == n) {
        fprintf(stderr,
                "rbtrace: --ps: no process matching '%s' has loaded this rbtrace; %s "
                "the original rbtrace gem (0.5.x or older), which this client cannot trace:\n",
                o->ps_pattern, n == 1 ? "this one runs" : "these run");
        ps_list(m, n);
        fprintf(stderr,
                "rbtrace: use that gem's own client (bundle exec rbtrace -p PID in the "
                "app's directory), or have the app load this rbtrace (gem 'rbtrace', '>= 0.6') "
                "and restart it\n");
    } else if (n == 0) {
        fprintf(stderr, "rbtrace: --ps: no process matching '%s' has loaded rbtrace",
                o->ps_pattern);
        if (without)
            fprintf(stderr,
                    " (%d match%s but did not load it, or are not yours; --inject loads it)",
                    without, without == 1 ? "es" : "");
        fprintf(stderr, "\n");
    } else if (n == 1) {
        fprintf(stderr, "*** --ps %s: process %d (%s)\n", o->ps_pattern, (int)m[0].pid,
                ps_shown(m[0].cmdline, shown));
        rc = ps_add(o, m[0].pid);
    } else if (n > 1) {
        fprintf(stderr, "%d processes match '%s':\n", n, o->ps_pattern);
        ps_list(m, n);
        if (isatty(fileno(in))) rc = ps_ask(o, m, n, in);
        else fprintf(stderr, "rbtrace: --ps: choose with -p PID [PID...]\n");
    }
    free(m);
    return rc;
}
