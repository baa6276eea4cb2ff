/*
 * exec.c - --exec CMD ARG...: starts CMD with rbtrace loaded, so that it
 * can be traced from its start.
 *
 * CMD runs with our lib directory first on RUBYLIB and -rrbtrace added to
 * RUBYOPT: any Ruby program loads rbtrace before its own code. Two
 * variables tell lib/rbtrace.rb that a client waits for it:
 * RBTRACE_EXEC_FD, a pipe on which it writes "ready" once its helper
 * thread runs, and RBTRACE_EXEC_WAIT, how long it then waits (in require)
 * for the client's RESUME before going on regardless. Both are removed
 * from its environment, so the program's own children do not wait.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "exec.h"

/* How long the program may take to load rbtrace (Bundler can be slow). */
#define EXEC_READY_MS 60000
/* How long it then waits for the client's RESUME. */
#define EXEC_RESUME_S 30

/* Our lib directory: the client is lib/rbtrace/rbtrace-client. */
static int exec_lib_dir(char *out, size_t cap)
{
    char exe[PATH_MAX], probe[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    struct stat st;

    if (n < 0) {
        fprintf(stderr, "rbtrace: --exec: cannot find the client's own path: %s\n",
                strerror(errno));
        return CLI_ERR;
    }
    exe[n] = '\0';
    snprintf(out, cap, "%s", dirname(dirname(exe)));
    snprintf(probe, sizeof(probe), "%s/rbtrace.rb", out);
    if (stat(probe, &st) != 0) {
        fprintf(stderr,
                "rbtrace: --exec: %s not found next to the client: reinstall rbtrace, "
                "or start the program with RUBYOPT=-rrbtrace and use -p\n",
                probe);
        return CLI_ERR;
    }
    return CLI_OK;
}

static int exec_setenv(const char *name, const char *value)
{
    if (setenv(name, value, 1) == 0) return CLI_OK;
    fprintf(stderr, "rbtrace: --exec: cannot set %s: %s\n", name, strerror(errno));
    return CLI_ERR;
}

/* The environment of the program, set in the child before exec. */
static int exec_environment(const char *lib, int ready_fd)
{
    const char *rubylib = getenv("RUBYLIB"), *rubyopt = getenv("RUBYOPT");
    char buf[PATH_MAX * 2 + 64];

    snprintf(buf, sizeof(buf), "%s%s%s", lib, rubylib && *rubylib ? ":" : "",
             rubylib ? rubylib : "");
    if (exec_setenv("RUBYLIB", buf) != CLI_OK) return CLI_ERR;
    snprintf(buf, sizeof(buf), "-rrbtrace%s%s", rubyopt && *rubyopt ? " " : "",
             rubyopt ? rubyopt : "");
    if (exec_setenv("RUBYOPT", buf) != CLI_OK) return CLI_ERR;
    snprintf(buf, sizeof(buf), "%d", ready_fd);
    if (exec_setenv("RBTRACE_EXEC_FD", buf) != CLI_OK) return CLI_ERR;
    snprintf(buf, sizeof(buf), "%d", EXEC_RESUME_S);
    return exec_setenv("RBTRACE_EXEC_WAIT", buf);
}

/* Waits for "ready" on fd, or for the child to exit, or the deadline. */
static int exec_wait_ready(const struct options *o, pid_t child, int fd)
{
    int64_t deadline = cli_now_ms() + EXEC_READY_MS;
    char buf[16];
    size_t got = 0;

    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        int64_t left = deadline - cli_now_ms();
        int status;
        ssize_t n;

        if (left <= 0) {
            fprintf(stderr,
                    "rbtrace: --exec: %s did not load rbtrace within %d s (is it a Ruby "
                    "program?); stopping it\n",
                    o->exec_argv[0], EXEC_READY_MS / 1000);
            kill(child, SIGTERM);
            return CLI_ERR;
        }
        if (poll(&p, 1, left > 200 ? 200 : (int)left) < 0 && errno != EINTR) {
            fprintf(stderr, "rbtrace: --exec: poll: %s\n", strerror(errno));
            return CLI_ERR;
        }
        if (p.revents) {
            n = read(fd, buf + got, sizeof(buf) - 1 - got);
            if (n > 0) {
                got += (size_t)n;
                buf[got] = '\0';
                if (strstr(buf, "ready")) return CLI_OK;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
        }
        if (waitpid(child, &status, WNOHANG) == child) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                fprintf(stderr, "rbtrace: --exec: could not start %s (see above)\n",
                        o->exec_argv[0]);
            else
                fprintf(stderr,
                        "rbtrace: --exec: %s exited before rbtrace was ready in it "
                        "(status %d)\n",
                        o->exec_argv[0],
                        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            return CLI_ERR;
        }
    }
}

int exec_start(struct options *o, pid_t *child)
{
    char lib[PATH_MAX];
    int p[2];

    if (exec_lib_dir(lib, sizeof(lib)) != CLI_OK) return CLI_ERR;
    if (pipe2(p, O_CLOEXEC) != 0) {
        fprintf(stderr, "rbtrace: --exec: cannot create a pipe: %s\n", strerror(errno));
        return CLI_ERR;
    }
    fflush(stdout);
    fflush(stderr);
    *child = fork();
    if (*child < 0) {
        fprintf(stderr, "rbtrace: --exec: cannot fork: %s\n", strerror(errno));
        close(p[0]);
        close(p[1]);
        return CLI_ERR;
    }
    if (*child == 0) {
        close(p[0]);
        /* The write end survives exec; the program learns its number. */
        if (fcntl(p[1], F_SETFD, 0) != 0 || exec_environment(lib, p[1]) != CLI_OK) _exit(127);
        execvp(o->exec_argv[0], o->exec_argv);
        fprintf(stderr, "rbtrace: --exec: cannot run %s: %s\n", o->exec_argv[0], strerror(errno));
        _exit(127);
    }
    close(p[1]);
    if (exec_wait_ready(o, *child, p[0]) != CLI_OK) {
        close(p[0]);
        return CLI_ERR;
    }
    close(p[0]);
    if (options_add_pid(o, *child) == CLI_ERR) {
        fprintf(stderr, "rbtrace: out of memory\n");
        return CLI_ERR;
    }
    o->resume = 1;
    return CLI_OK;
}

enum cli_exit exec_finish(pid_t child, enum cli_exit rc)
{
    int status;

    if (rc != CLI_EXIT_TARGET_GONE) return rc;
    if (waitpid(child, &status, 0) != child) return rc;
    if (WIFEXITED(status)) return (enum cli_exit)WEXITSTATUS(status);
    return (enum cli_exit)(128 + WTERMSIG(status));
}
