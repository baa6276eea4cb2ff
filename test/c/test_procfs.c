/*
 * test_procfs.c - what the client reads of a process in /proc
 * (ext/rbtrace/cli/procfs.c), against real processes: this one, a child
 * that has exited and not been reaped (a zombie), and a pid that no
 * process has.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "procfs.h"

/* A pid no process has: a child's, once reaped. */
static pid_t procfs_test_dead_pid(void)
{
    pid_t pid = fork();

    if (pid == 0) _exit(0);
    if (pid > 0) waitpid(pid, NULL, 0);
    return pid;
}

static void test_alive(void)
{
    pid_t dead = procfs_test_dead_pid(), zombie;
    siginfo_t info;

    CHECK(procfs_alive(getpid()) == 1);
    CHECK(dead > 0 && procfs_alive(dead) == 0);
    zombie = fork();
    if (zombie == 0) _exit(0);
    CHECK(zombie > 0);
    /* Until it has exited, without reaping it (WNOWAIT). */
    CHECK(waitid(P_PID, (id_t)zombie, &info, WEXITED | WNOWAIT) == 0);
    CHECK(procfs_alive(zombie) == 0);
    waitpid(zombie, NULL, 0);
}

static void test_euid_and_rbtrace(void)
{
    uid_t uid = (uid_t)-1;

    CHECK(procfs_euid(getpid(), &uid) == 0);
    CHECK(uid == geteuid());
    CHECK(procfs_euid(procfs_test_dead_pid(), &uid) == -1);
    CHECK(procfs_rbtrace_library(getpid(), NULL, 0) == PROCFS_LIB_NONE); /* no rbtrace.so here */
    CHECK(procfs_rbtrace_library(procfs_test_dead_pid(), NULL, 0) == -1);
}

/* This process began a moment ago; a child begins after a pause. */
static void test_started(void)
{
    time_t now = time(NULL), started = 0, child_started = 0;
    int fds[2];
    pid_t child;
    char c;

    CHECK(procfs_started(getpid(), &started) == 0);
    CHECK(started <= now && started >= now - 60);
    sleep(2);
    CHECK(pipe(fds) == 0);
    child = fork();
    if (child == 0) {
        close(fds[1]);
        (void)!read(fds[0], &c, 1); /* until the parent is done */
        _exit(0);
    }
    close(fds[0]);
    CHECK(procfs_started(child, &child_started) == 0);
    CHECK(child_started >= started + 2 - 1 && child_started <= time(NULL));
    close(fds[1]);
    waitpid(child, NULL, 0);
    CHECK(procfs_started(procfs_test_dead_pid(), &started) == -1);
}

/* The original gem's version, from where its library was installed. */
static void test_gem_version(void)
{
    char v[16];

    procfs_gem_version("/usr/lib/gems/gems/rbtrace-0.5.3/lib/rbtrace.so", v, sizeof(v));
    CHECK(!strcmp(v, "0.5.3"));
    procfs_gem_version("/srv/rbtrace-app/vendor/bundle/ruby/3.1.0/extensions/x86_64-linux/3.1.0/"
                       "rbtrace-0.5.5/rbtrace.so",
                       v, sizeof(v));
    CHECK(!strcmp(v, "0.5.5"));
    procfs_gem_version("/opt/app/lib/rbtrace.so", v, sizeof(v));
    CHECK(!strcmp(v, ""));
    procfs_gem_version("/g/rbtrace-0.5.3.123456789012345678901/lib/rbtrace.so", v, sizeof(v));
    CHECK(strlen(v) == sizeof(v) - 1); /* cut to fit */
}

/* This process's one thread: running (it reads its own stat), named as
 * the program. */
static void test_tasks(void)
{
    struct procfs_task t[4];
    int n = procfs_tasks(getpid(), t, 4);

    CHECK(n == 1);
    CHECK(n == 1 && t[0].tid == getpid() && t[0].state == 'R');
    CHECK(n == 1 && !strncmp(t[0].comm, "test_procfs", sizeof(t[0].comm) - 1));
    CHECK(procfs_tasks(procfs_test_dead_pid(), t, 4) == -1);
}

int main(void)
{
    test_alive();
    test_euid_and_rbtrace();
    test_started();
    test_gem_version();
    test_tasks();
    return check_report();
}
