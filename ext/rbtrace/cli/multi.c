/*
 * multi.c - `rbtrace -p PID PID...`: one session per process, each in a
 * child of the client, their output merged line by line with "[PID] " in
 * front of every line (or, with -o FILE, each written to FILE.PID).
 *
 * A child is an ordinary single-process client (session_run) whose stdout
 * is a pipe to us; we copy whole lines only, so lines of two processes
 * never mix. A call line left open (the call has not returned yet) shows
 * once it is complete. Its stderr (its status lines) is a pipe to us too:
 * we write a status line at once, after the lines of its process read so
 * far and with our stdout flushed, so that on a terminal it starts a line
 * of its own (a child writing to the terminal itself glued its lines to
 * ours, and its trace's backlog came after its "*** detached"). Each
 * child runs in a process group of its own, so
 * that a ^C at the terminal reaches only us: we pass SIGINT, SIGTERM and
 * SIGHUP on to every child once, and each detaches as it would alone.
 * The exit status is the highest of the children's.
 *
 * With --summary, each child also dumps its table whole (histograms too)
 * to a temporary file of its own; once all have ended, we merge the dumps
 * (format_summary_merge) and print the table of all processes after
 * theirs, its lines prefixed "[all] " (or, with -o FILE, to FILE itself).
 */
#define _GNU_SOURCE /* pipe2, memrchr */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "format.h"
#include "multi.h"
#include "session.h"

#define MULTI_READ 65536

/* A pipe from a child, and what was read of it but not yet written. */
struct multi_pipe {
    int fd;     /* -1: none, or at its end */
    char *line; /* the part of a line read so far */
    size_t len, cap;
};

struct multi_child {
    pid_t child; /* our child running the session; 0 once reaped */
    pid_t target;
    struct multi_pipe out; /* its stdout (none with -o FILE) */
    struct multi_pipe err; /* its stderr: its status lines */
    int rc;                /* its exit status */
    FILE *summary;         /* --summary: where its session dumps its table, or NULL */
};

static int multi_wake[2] = { -1, -1 };
static volatile sig_atomic_t multi_pending[NSIG];
/* Our stdout failed (a closed pipe: | head): said once; the sessions are
 * stopped as by ^C, their lines dropped, their status lines still shown. */
static int multi_stdout_broken;

/* Our stdout failed with err: says so, once, and stops the sessions. */
static void multi_stdout_failed(int err)
{
    if (multi_stdout_broken) return;
    fprintf(stderr, "rbtrace: could not write to stdout: %s\n", strerror(err));
    multi_stdout_broken = 1;
    multi_pending[SIGINT] = 1;             /* stop the sessions, as ^C (multi_forward) */
    if (write(multi_wake[1], "", 1) < 0) { /* full: a wake-up is pending anyway */
    }
}

static void multi_on_signal(int sig)
{
    int saved = errno;
    char c = (char)sig;

    multi_pending[sig] = 1;
    if (write(multi_wake[1], &c, 1) < 0) { /* full: a wake-up is pending anyway */
    }
    errno = saved;
}

static int multi_install_signals(void)
{
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD };
    struct sigaction sa;
    size_t i;

    if (pipe2(multi_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "rbtrace: cannot create a pipe: %s\n", strerror(errno));
        return CLI_ERR;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = multi_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        if (sigaction(sigs[i], &sa, NULL) != 0) {
            fprintf(stderr, "rbtrace: cannot install a signal handler: %s\n", strerror(errno));
            return CLI_ERR;
        }
    }
    /* A closed stdout is an error to say (EPIPE), not a silent death. */
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &sa, NULL) != 0) {
        fprintf(stderr, "rbtrace: cannot ignore SIGPIPE: %s\n", strerror(errno));
        return CLI_ERR;
    }
    return CLI_OK;
}

/* In the child: an ordinary session for one target. Never returns. */
static void multi_child_main(const struct options *o, pid_t target, int out_fd, int err_fd,
                             struct multi_child *kids, size_t n_started)
{
    struct options one = *o;
    char path[4096];
    size_t i;
    int rc;

    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    close(multi_wake[0]);
    close(multi_wake[1]);
    for (i = 0; i < n_started; i++) {
        if (kids[i].out.fd >= 0) close(kids[i].out.fd);
        if (kids[i].err.fd >= 0) close(kids[i].err.fd);
    }
    if (setpgid(0, 0) != 0)
        fprintf(stderr, "rbtrace: process %d: cannot get a process group of its own: %s\n",
                (int)target, strerror(errno));
    if (out_fd >= 0) {
        if (dup2(out_fd, STDOUT_FILENO) < 0) {
            fprintf(stderr, "rbtrace: process %d: cannot redirect the output: %s\n", (int)target,
                    strerror(errno));
            _exit(CLI_EXIT_FAIL);
        }
        close(out_fd);
    }
    if (dup2(err_fd, STDERR_FILENO) < 0) _exit(CLI_EXIT_FAIL); /* nowhere to say it */
    close(err_fd);
    one.pid = target;
    one.pids = &one.pid;
    one.n_pids = one.pids_cap = 1;
    one.summary_dump = kids[n_started].summary;
    if (o->output_path) {
        if ((size_t)snprintf(path, sizeof(path), "%s.%d", o->output_path, (int)target) >=
            sizeof(path)) {
            fprintf(stderr, "rbtrace: output file name too long: %s.%d\n", o->output_path,
                    (int)target);
            _exit(CLI_EXIT_FAIL);
        }
        one.output_path = path;
    }
    rc = session_run(&one);
    if (fclose(stdout) != 0 && rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    _exit(rc);
}

/* Copies the complete lines of k's stdout to ours, each after "[PID] ";
 * flush_partial: the rest too, as a line (its end). */
static void multi_emit_lines(struct multi_child *k, int flush_partial)
{
    struct multi_pipe *p = &k->out;
    size_t start = 0, i;

    if (multi_stdout_broken) {
        p->len = 0;
        return;
    }
    for (i = 0; i < p->len; i++) {
        if (p->line[i] != '\n') continue;
        printf("[%d] %.*s\n", (int)k->target, (int)(i - start), p->line + start);
        start = i + 1;
    }
    if (flush_partial && start < p->len) {
        printf("[%d] %.*s\n", (int)k->target, (int)(p->len - start), p->line + start);
        start = p->len;
    }
    /* a write stdio made on its own (its buffer full) failed: the errno is its */
    if (ferror(stdout)) multi_stdout_failed(errno);
    memmove(p->line, p->line + start, p->len - start);
    p->len -= start;
}

/* Copies the complete lines of k's stderr (its status lines) to ours, at
 * once: our stdout flushed first (it holds only whole lines), so that on
 * a terminal a status line starts a line of its own. */
static void multi_emit_status(struct multi_child *k, int flush_partial)
{
    struct multi_pipe *p = &k->err;
    const char *nl = p->len ? memrchr(p->line, '\n', p->len) : NULL;
    size_t n = nl ? (size_t)(nl - p->line) + 1 : 0, done = 0;

    if (flush_partial && n < p->len) {
        p->line[p->len++] = '\n'; /* room: multi_fill keeps MULTI_READ free */
        n = p->len;
    }
    if (!n) return;
    if (!multi_stdout_broken) fflush(stdout); /* a failure is seen in multi_loop */
    while (done < n) {
        ssize_t w = write(STDERR_FILENO, p->line + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break; /* stderr gone: nowhere to say so */
        done += (size_t)w;
    }
    memmove(p->line, p->line + n, p->len - n);
    p->len -= n;
}

/* Reads what p has into its buffer: 1 if something came, 0 if nothing
 * now, -1 at its end (closed), CLI_ERR - 1 when out of memory (said). */
static int multi_fill(struct multi_pipe *p, pid_t target)
{
    ssize_t n;

    if (p->cap - p->len < MULTI_READ + 1) {
        size_t cap = p->cap ? p->cap * 2 : 2 * MULTI_READ;
        char *grown;
        while (cap - p->len < MULTI_READ + 1) cap *= 2;
        grown = realloc(p->line, cap);
        if (!grown) {
            fprintf(stderr, "rbtrace: out of memory\n");
            return CLI_ERR - 1;
        }
        p->line = grown;
        p->cap = cap;
    }
    n = read(p->fd, p->line + p->len, MULTI_READ);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    if (n <= 0) {
        if (n < 0)
            fprintf(stderr, "rbtrace: reading the output for process %d: %s\n", (int)target,
                    strerror(errno));
        close(p->fd);
        p->fd = -1;
        return -1;
    }
    p->len += (size_t)n;
    return 1;
}

/* Reads what k's pipes have and copies it on. Its status lines first read,
 * then its stdout drained: what it wrote before them is there by then (a
 * session ends its open line and flushes before a status line), and is
 * written before them. CLI_ERR when out of memory. */
static int multi_read(struct multi_child *k)
{
    int got_status = 0, r;

    if (k->err.fd >= 0) {
        if ((r = multi_fill(&k->err, k->target)) < -1) return CLI_ERR;
        got_status = r != 0;
    }
    while (k->out.fd >= 0) {
        if ((r = multi_fill(&k->out, k->target)) < -1) return CLI_ERR;
        multi_emit_lines(k, r < 0);
        if (r == 0 || !got_status) break; /* drained, or no status to wait for it */
    }
    if (got_status) multi_emit_status(k, k->err.fd < 0);
    return CLI_OK;
}

/* Reaps the children that exited; returns how many still run. */
static size_t multi_reap(struct multi_child *kids, size_t n)
{
    size_t i, running = 0;
    int status;

    for (i = 0; i < n; i++) {
        if (!kids[i].child) continue;
        pid_t r = waitpid(kids[i].child, &status, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) {
            running++;
            continue;
        }
        kids[i].rc = r < 0      ? CLI_EXIT_FAIL
            : WIFEXITED(status) ? WEXITSTATUS(status)
                                : CLI_EXIT_FAIL;
        kids[i].child = 0;
    }
    return running;
}

/* Passes the signals that arrived on to every child still running. */
static void multi_forward(struct multi_child *kids, size_t n)
{
    static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
    char drain[64];
    size_t i, s;

    while (read(multi_wake[0], drain, sizeof(drain)) > 0) {
    }
    for (s = 0; s < sizeof(sigs) / sizeof(sigs[0]); s++) {
        if (!multi_pending[sigs[s]]) continue;
        multi_pending[sigs[s]] = 0;
        for (i = 0; i < n; i++)
            if (kids[i].child && kill(kids[i].child, sigs[s]) != 0 && errno != ESRCH)
                fprintf(stderr,
                        "rbtrace: cannot pass the signal on to the session of process "
                        "%d: %s\n",
                        (int)kids[i].target, strerror(errno));
    }
}

static enum cli_exit multi_loop(struct multi_child *kids, size_t n)
{
    struct pollfd *fds = calloc(2 * n + 1, sizeof(*fds));
    size_t i, nfds, open_fds;

    if (!fds) {
        fprintf(stderr, "rbtrace: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    for (;;) {
        size_t running = multi_reap(kids, n);
        open_fds = 0;
        for (i = 0; i < n; i++) open_fds += (kids[i].out.fd >= 0) + (kids[i].err.fd >= 0);
        if (!running && !open_fds) break;
        fds[0].fd = multi_wake[0];
        fds[0].events = POLLIN;
        nfds = 1;
        for (i = 0; i < n; i++) {
            const int both[2] = { kids[i].out.fd, kids[i].err.fd };
            size_t j;

            for (j = 0; j < 2; j++) {
                if (both[j] < 0) continue;
                fds[nfds].fd = both[j];
                fds[nfds].events = POLLIN;
                nfds++;
            }
        }
        if (!multi_stdout_broken && fflush(stdout) != 0) multi_stdout_failed(errno);
        if (poll(fds, nfds, 1000) < 0 && errno != EINTR) {
            fprintf(stderr, "rbtrace: poll: %s\n", strerror(errno));
            free(fds);
            return CLI_EXIT_FAIL;
        }
        multi_forward(kids, n);
        for (i = 0; i < n; i++) {
            if ((kids[i].out.fd >= 0 || kids[i].err.fd >= 0) && multi_read(&kids[i]) != CLI_OK) {
                free(fds);
                return CLI_EXIT_FAIL;
            }
        }
    }
    free(fds);
    return multi_stdout_broken ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* Writes text (the combined table) to FILE of -o, or to stdout with
 * "[all] " before each line. */
static int multi_write_combined(const struct options *o, const char *text, size_t len)
{
    FILE *out = stdout;
    const char *line = text, *nl;
    char errstr[CLI_ERRLEN];

    if (o->output_path &&
        !(out = cli_open_output(o->output_path, o->append, errstr, sizeof(errstr)))) {
        fprintf(stderr, "rbtrace: the combined summary: %s\n", errstr);
        return CLI_ERR;
    }
    for (; line < text + len; line = nl + 1) {
        if (!(nl = memchr(line, '\n', (size_t)(text + len - line)))) nl = text + len;
        fprintf(out, "%s%.*s\n", out == stdout ? "[all] " : "", (int)(nl - line), line);
    }
    if (out == stdout ? fflush(out) != 0 : fclose(out) != 0) {
        fprintf(stderr, "rbtrace: could not write the combined summary to %s: %s\n",
                o->output_path ? o->output_path : "stdout", strerror(errno));
        return CLI_ERR;
    }
    return CLI_OK;
}

/* The table of all processes, from the dumps their sessions left (a
 * session that never attached leaves none: it is not counted); none if
 * no process was traced. */
static int multi_summary(const struct options *o, struct multi_child *kids, size_t n)
{
    /* --alloc: the alloc column and the sites, as one process's table has */
    struct format_opts fopts = {
        { 0, 0, 0, 0, 0, 0, o->alloc, o->alloc_sample, 0 }, 0, o->sort, 0, 0, 0
    };
    struct format *all = NULL;
    char *text = NULL;
    size_t len = 0, i, merged = 0;
    FILE *mem = open_memstream(&text, &len);
    int rc = CLI_ERR;

    if (!mem || format_open(OPTIONS_FORMAT_SUMMARY, mem, &fopts, &all) != CLI_OK) {
        fprintf(stderr, "rbtrace: out of memory\n");
        goto done;
    }
    for (i = 0; i < n; i++) {
        rewind(kids[i].summary);
        if (fgetc(kids[i].summary) == EOF) continue; /* no dump */
        rewind(kids[i].summary);
        if (format_summary_merge(all, kids[i].summary) != CLI_OK) {
            fprintf(stderr,
                    "rbtrace: the summary of process %d: %s; the combined table "
                    "leaves it out\n",
                    (int)kids[i].target, all->errstr);
            goto done;
        }
        merged++;
    }
    if (!merged) { /* none was traced: the processes' own errors say why */
        rc = CLI_OK;
        goto done;
    }
    if (format_finish(all) != CLI_OK) {
        fprintf(stderr, "rbtrace: the combined summary: %s\n", all->errstr);
        goto done;
    }
    if (fflush(mem) != 0) {
        fprintf(stderr, "rbtrace: out of memory\n");
        goto done;
    }
    rc = multi_write_combined(o, text, len);
done:
    format_close(all);
    if (mem) fclose(mem);
    free(text);
    return rc;
}

enum cli_exit multi_run(const struct options *o)
{
    struct multi_child *kids = calloc(o->n_pids, sizeof(*kids));
    enum cli_exit rc = CLI_EXIT_OK;
    size_t i, started = 0;

    if (!kids) {
        fprintf(stderr, "rbtrace: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    if (multi_install_signals() != CLI_OK) {
        free(kids);
        return CLI_EXIT_FAIL;
    }
    fflush(stdout);
    fflush(stderr);
    for (i = 0; i < o->n_pids; i++) {
        int p[2] = { -1, -1 }, e[2] = { -1, -1 };
        struct multi_child *k = &kids[i];

        k->target = o->pids[i];
        k->out.fd = k->err.fd = -1;
        if (o->format == OPTIONS_FORMAT_SUMMARY && !(k->summary = tmpfile())) {
            fprintf(stderr,
                    "rbtrace: cannot make a temporary file for the summary of process "
                    "%d: %s (is TMPDIR writable?)\n",
                    (int)k->target, strerror(errno));
            rc = CLI_EXIT_FAIL;
            break;
        }
        if ((!o->output_path && pipe2(p, O_CLOEXEC) != 0) || pipe2(e, O_CLOEXEC) != 0) {
            fprintf(stderr, "rbtrace: cannot create a pipe: %s\n", strerror(errno));
            if (p[0] >= 0) close(p[0]);
            if (p[1] >= 0) close(p[1]);
            rc = CLI_EXIT_FAIL;
            break;
        }
        k->child = fork();
        if (k->child < 0) {
            fprintf(stderr, "rbtrace: cannot start the session for process %d: %s\n",
                    (int)k->target, strerror(errno));
            k->child = 0;
            if (p[0] >= 0) close(p[0]);
            if (p[1] >= 0) close(p[1]);
            close(e[0]);
            close(e[1]);
            rc = CLI_EXIT_FAIL;
            break;
        }
        if (k->child == 0) {
            if (p[0] >= 0) close(p[0]);
            close(e[0]);
            multi_child_main(o, k->target, p[1], e[1], kids, started);
        }
        started++;
        if (p[1] >= 0) close(p[1]);
        close(e[1]);
        k->out.fd = p[0];
        k->err.fd = e[0];
        if ((k->out.fd >= 0 && fcntl(k->out.fd, F_SETFL, O_NONBLOCK) != 0) ||
            fcntl(k->err.fd, F_SETFL, O_NONBLOCK) != 0)
            fprintf(stderr, "rbtrace: fcntl: %s\n", strerror(errno));
    }
    if (rc != CLI_EXIT_OK) {
        /* Stop the sessions already started, as ^C would. */
        for (i = 0; i < started; i++) kill(kids[i].child, SIGINT);
    }
    if (multi_loop(kids, started) != CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    if (o->format == OPTIONS_FORMAT_SUMMARY && started == o->n_pids &&
        (o->output_path || !multi_stdout_broken) && multi_summary(o, kids, started) != CLI_OK &&
        rc == CLI_EXIT_OK)
        rc = CLI_EXIT_FAIL;
    for (i = 0; i < o->n_pids; i++) {
        if (i < started && (enum cli_exit)kids[i].rc > rc) rc = (enum cli_exit)kids[i].rc;
        free(kids[i].out.line);
        free(kids[i].err.line);
        if (kids[i].out.fd >= 0) close(kids[i].out.fd);
        if (kids[i].err.fd >= 0) close(kids[i].err.fd);
        if (kids[i].summary) fclose(kids[i].summary);
    }
    free(kids);
    close(multi_wake[0]);
    close(multi_wake[1]);
    return rc;
}
