/*
 * inject_ptrace.c - --inject's work inside the target
 * (docs/DESIGN.md, "Injection"): the main thread alone is stopped (PTRACE_SEIZE, then
 * PTRACE_INTERRUPT), never the process; it is used only at a safe point
 * (blocked in a listed system call whose wrapper is libc's, or running in
 * Ruby's own code, and not in a signal handler); its registers, FPU/AVX
 * state and signal mask are saved; each function is called with its
 * return address 0, so that it comes back as a SIGSEGV at 0 that is caught
 * and discarded; then everything is put back, the interrupted system call
 * restarting, and the thread let go.
 */
#define _GNU_SOURCE /* process_vm_readv, process_vm_writev */
#include "inject_ptrace.h"
#include "procfs.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PTRACE_GETSIGMASK
#define PTRACE_GETSIGMASK 0x420a
#define PTRACE_SETSIGMASK 0x420b
#endif
#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif

#define INJ_RED_ZONE 128
#define INJ_SCRATCH 20480         /* the strings passed to the calls */
#define INJ_STACK_ROOM (64 << 10) /* what the calls may use below them */
#define INJ_RETRY_US 1500
#define INJ_XSTATE_MAX 65536
#define INJ_MFD_CLOEXEC 1u
#define INJ_RTLD_NOW 2

struct inj {
    const struct inject_plan *p;
    struct inject_report *r;
    pid_t tid;
    struct user_regs_struct saved;
    unsigned char *xstate;
    struct iovec xstate_iov;
    uint64_t saved_mask;
    uint64_t scratch; /* the strings' place, below the red zone */
    uint64_t call_sp; /* the calls' stack pointer */
    int diverted;     /* registers changed: restore before letting go */
    int running;      /* a call timed out: the thread runs, not stopped */
};

static int64_t inj_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

__attribute__((format(printf, 2, 3))) static int inj_fail(struct inj *j, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(j->r->errstr, sizeof(j->r->errstr), fmt, ap);
    va_end(ap);
    return CLI_ERR;
}

static int inj_in(const struct inject_range *r, int n, uint64_t addr)
{
    int i;
    for (i = 0; i < n; i++)
        if (addr >= r[i].lo && addr < r[i].hi) return 1;
    return 0;
}

/* Waits for the thread's next stop: 1 stopped (*status), 0 it exited,
 * CLI_ERR waitpid failed. */
static int inj_wait(struct inj *j, int *status)
{
    for (;;) {
        pid_t got = waitpid(j->tid, status, __WALL);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return inj_fail(j, "waitpid: %s", strerror(errno));
        if (WIFEXITED(*status) || WIFSIGNALED(*status)) return 0;
        if (WIFSTOPPED(*status)) return 1;
    }
}

/* Stopped by PTRACE_INTERRUPT (or a group stop), not by a signal. */
static int inj_is_event_stop(int status)
{
    return (status >> 16) == PTRACE_EVENT_STOP;
}

/* Waits for the interrupt's stop, passing on the signals that come first. */
static int inj_wait_interrupted(struct inj *j)
{
    int status, rc;

    for (;;) {
        if ((rc = inj_wait(j, &status)) != 1) {
            if (rc == 0) inj_fail(j, "the process exited");
            return CLI_ERR;
        }
        if (inj_is_event_stop(status)) return CLI_OK;
        /* a signal for the thread: delivered as it would have been */
        if (ptrace(PTRACE_CONT, j->tid, 0, (void *)(long)WSTOPSIG(status)) < 0)
            return inj_fail(j, "PTRACE_CONT: %s", strerror(errno));
    }
}

/* The system calls a thread may be diverted from: blocking waits whose
 * wrappers hold no lock of libc's. */
static int inj_syscall_safe(const struct user_regs_struct *regs)
{
    switch ((long)regs->orig_rax) {
    case SYS_read:
    case SYS_poll:
    case SYS_select:
    case SYS_nanosleep:
    case SYS_accept:
    case SYS_recvfrom:
    case SYS_recvmsg:
    case SYS_wait4:
    case SYS_clock_nanosleep:
    case SYS_epoll_wait:
    case SYS_epoll_pwait:
    case SYS_ppoll:
    case SYS_pselect6:
    case SYS_accept4:
        return 1;
    case SYS_futex:
        /* FUTEX_WAIT_BITSET (9): a condition variable's wait (Ruby's
         * sleep, Queue#pop, the GVL's wait); FUTEX_WAIT (0) is a lock's,
         * malloc's among them: never. Private and clock bits masked. */
        return (regs->rsi & 0x7f) == 9;
    default:
        return 0;
    }
}

/* Whether the wait has no time-out: for Ruby 4.0.0's Bug #21812. */
static int inj_untimed(const struct user_regs_struct *regs)
{
    switch ((long)regs->orig_rax) {
    case SYS_futex:
        return regs->r10 == 0;
    case SYS_ppoll:
        return regs->rdx == 0;
    case SYS_poll:
        return (int)regs->rdx < 0;
    default:
        return 0;
    }
}

/* Whether the thread runs a signal handler: a signal it handles is blocked
 * (the kernel blocks the one being handled). Ruby's threads block none of
 * the signals they handle otherwise. -1 unreadable. */
static int inj_in_handler(struct inj *j)
{
    char path[64], blk_s[32], cgt_s[32];
    unsigned long long blk, cgt;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)j->p->pid, (int)j->tid);
    if (!procfs_status_field(path, "SigBlk", blk_s, sizeof(blk_s)) ||
        !procfs_status_field(path, "SigCgt", cgt_s, sizeof(cgt_s)) ||
        sscanf(blk_s, "%llx", &blk) != 1 || sscanf(cgt_s, "%llx", &cgt) != 1)
        return -1;
    return (blk & cgt) != 0;
}

/* Whether addr is in an anonymous executable mapping: JIT code (YJIT's),
 * which holds none of libc's or the loader's locks. */
static int inj_in_jit(struct inj *j, uint64_t addr)
{
    char path[64], line[512];
    int jit = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)j->p->pid);
    if (!(f = fopen(path, "re"))) return 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi, off;
        char perms[8], dev[16];
        unsigned long inode;
        int pos = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %15s %lu %n", &lo, &hi, perms, &off, dev, &inode,
                   &pos) < 6)
            continue;
        if (addr < lo || addr >= hi) continue;
        jit = perms[2] == 'x' && inode == 0 && pos && (line[pos] == '\n' || line[pos] == '\0');
        break;
    }
    fclose(f);
    return jit;
}

/* Whether the stack at sp has room for the calls: the main thread's
 * [stack] grows on demand; another (a Fiber's) must have it already. */
static int inj_stack_room(struct inj *j, uint64_t sp)
{
    char path[64], line[512];
    int ok = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)j->p->pid);
    if (!(f = fopen(path, "re"))) return 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3) continue;
        if (sp <= lo || sp > hi) continue;
        ok = perms[1] == 'w' &&
            (strstr(line, "[stack]") || sp - lo >= INJ_STACK_ROOM + INJ_SCRATCH + INJ_RED_ZONE);
        break;
    }
    fclose(f);
    return ok;
}

/* Whether the stopped thread may be used now; if not, why, in r->last_unsafe. */
static int inj_safe_now(struct inj *j)
{
    const struct user_regs_struct *regs = &j->saved;
    char *why = j->r->last_unsafe;
    size_t size = sizeof(j->r->last_unsafe);
    int handler;

    if ((long)regs->orig_rax >= 0) {
        if (!inj_syscall_safe(regs)) {
            snprintf(why, size, "in system call %ld, not a wait it can be taken from",
                     (long)regs->orig_rax);
            return 0;
        }
        if (!inj_in(j->p->libc_text, j->p->n_libc_text, regs->rip)) {
            snprintf(why, size, "in a system call made outside libc");
            return 0;
        }
    } else if (!inj_in(j->p->ruby_text, j->p->n_ruby_text, regs->rip) &&
               !inj_in_jit(j, regs->rip)) {
        snprintf(why, size, "running outside Ruby's own code (in libc, a C extension or JIT code)");
        return 0;
    }
    if ((handler = inj_in_handler(j)) != 0) {
        snprintf(why, size, handler < 0 ? "its signal mask unreadable" : "in a signal handler");
        return 0;
    }
    if (!inj_stack_room(j, regs->rsp)) {
        snprintf(why, size, "on a stack without 84 KiB to spare");
        return 0;
    }
    return 1;
}

/* Seizes the main thread and stops it until it is at a safe point, within
 * the budget. CLI_OK stopped and safe (regs in j->saved). */
static int inj_stop_safely(struct inj *j)
{
    int64_t deadline = inj_now_us() + (int64_t)j->p->budget_ms * 1000;

    if (ptrace(PTRACE_SEIZE, j->tid, 0, 0) < 0) {
        if (errno == EPERM)
            return inj_fail(j,
                            "not permitted to ptrace process %d (%s): --inject needs root or "
                            "CAP_SYS_PTRACE, and a Yama ptrace_scope that allows it",
                            (int)j->p->pid, strerror(errno));
        return inj_fail(j, "could not ptrace process %d: %s", (int)j->p->pid, strerror(errno));
    }
    for (;;) {
        j->r->tries++;
        if (ptrace(PTRACE_INTERRUPT, j->tid, 0, 0) < 0)
            return inj_fail(j, "PTRACE_INTERRUPT: %s", strerror(errno));
        if (inj_wait_interrupted(j) != CLI_OK) return CLI_ERR;
        if (ptrace(PTRACE_GETREGS, j->tid, 0, &j->saved) < 0)
            return inj_fail(j, "PTRACE_GETREGS: %s", strerror(errno));
        if (inj_safe_now(j)) return CLI_OK;
        if (inj_now_us() > deadline) {
            ptrace(PTRACE_DETACH, j->tid, 0, 0);
            return inj_fail(j,
                            "found no safe moment in process %d's main thread within %d ms (it "
                            "was %s): nothing was changed; try again, or when the app is idle",
                            (int)j->p->pid, j->p->budget_ms, j->r->last_unsafe);
        }
        if (ptrace(PTRACE_CONT, j->tid, 0, 0) < 0)
            return inj_fail(j, "PTRACE_CONT: %s", strerror(errno));
        {
            struct timespec ts = { 0, INJ_RETRY_US * 1000L };
            nanosleep(&ts, NULL);
        }
    }
}

/* Writes len bytes at addr in the target (it is stopped). */
static int inj_poke(struct inj *j, uint64_t addr, const void *buf, size_t len)
{
    struct iovec local = { (void *)buf, len }, remote = { (void *)(uintptr_t)addr, len };
    ssize_t n = process_vm_writev(j->tid, &local, 1, &remote, 1, 0);

    if (n != (ssize_t)len)
        return inj_fail(j, "could not write the target's stack: %s", strerror(errno));
    return CLI_OK;
}

/* Reads a NUL-ended string of the target at addr into out. */
static void inj_peek_string(struct inj *j, uint64_t addr, char *out, size_t size)
{
    struct iovec local = { out, size - 1 }, remote = { (void *)(uintptr_t)addr, size - 1 };
    ssize_t n = process_vm_readv(j->tid, &local, 1, &remote, 1, 0);

    out[n > 0 ? n : 0] = '\0';
}

/* Calls fn(a, b, c) in the target; its return value in *ret. */
static int inj_call(struct inj *j, uint64_t fn, uint64_t a, uint64_t b, uint64_t c, uint64_t *ret)
{
    struct user_regs_struct regs = j->saved;
    static const uint64_t zero = 0;
    int64_t deadline = inj_now_us() + (int64_t)j->p->call_budget_ms * 1000;
    int status, rc;

    regs.rip = fn;
    regs.rdi = a;
    regs.rsi = b;
    regs.rdx = c;
    regs.rax = 0;
    regs.rsp = j->call_sp;
    regs.orig_rax = (unsigned long)-1; /* no system call to restart meanwhile */
    if (inj_poke(j, j->call_sp, &zero, sizeof(zero)) != CLI_OK) return CLI_ERR;
    if (ptrace(PTRACE_SETREGS, j->tid, 0, &regs) < 0)
        return inj_fail(j, "PTRACE_SETREGS: %s", strerror(errno));
    j->diverted = 1;
    if (ptrace(PTRACE_CONT, j->tid, 0, 0) < 0)
        return inj_fail(j, "PTRACE_CONT: %s", strerror(errno));
    for (;;) {
        pid_t got = waitpid(j->tid, &status, __WALL | WNOHANG);
        if (got == 0) {
            struct timespec ts = { 0, 50 * 1000L };
            if (inj_now_us() > deadline) {
                j->running = 1;
                return inj_fail(j, "a call in the target did not return within %d ms",
                                j->p->call_budget_ms);
            }
            nanosleep(&ts, NULL);
            continue;
        }
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return inj_fail(j, "waitpid: %s", strerror(errno));
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            j->diverted = 0;
            return inj_fail(j, "the process exited during the injection");
        }
        if (!WIFSTOPPED(status)) continue;
        if (inj_is_event_stop(status)) {
            /* a group stop (SIGSTOP to the process): the call goes on */
            rc = ptrace(PTRACE_CONT, j->tid, 0, 0);
        } else if (WSTOPSIG(status) == SIGSEGV) {
            if (ptrace(PTRACE_GETREGS, j->tid, 0, &regs) < 0)
                return inj_fail(j, "PTRACE_GETREGS: %s", strerror(errno));
            if (regs.rip == 0) {
                *ret = regs.rax;
                return CLI_OK;
            }
            return inj_fail(j, "a call in the target crashed (at 0x%llx)",
                            (unsigned long long)regs.rip);
        } else {
            /* every blockable signal is blocked: a synchronous one (SIGBUS,
             * SIGFPE) is the call's fault */
            return inj_fail(j, "a call in the target raised signal %d", WSTOPSIG(status));
        }
        if (rc < 0) return inj_fail(j, "PTRACE_CONT: %s", strerror(errno));
    }
}

/* Puts the thread back as it was stopped and lets it go. */
static int inj_restore_and_detach(struct inj *j)
{
    int rc = CLI_OK;

    /* A call that never returned (the loader's lock held by another
     * thread?) is abandoned: stopped, and the thread put back. */
    if (j->running &&
        (ptrace(PTRACE_INTERRUPT, j->tid, 0, 0) < 0 || inj_wait_interrupted(j) != CLI_OK))
        return CLI_ERR;
    if (j->diverted) {
        if (ptrace(PTRACE_SETREGS, j->tid, 0, &j->saved) < 0) rc = CLI_ERR;
        if (j->xstate_iov.iov_len &&
            ptrace(PTRACE_SETREGSET, j->tid, (void *)NT_X86_XSTATE, &j->xstate_iov) < 0)
            rc = CLI_ERR;
    }
    if (ptrace(PTRACE_SETSIGMASK, j->tid, (void *)sizeof(j->saved_mask), &j->saved_mask) < 0)
        rc = CLI_ERR;
    if (ptrace(PTRACE_DETACH, j->tid, 0, 0) < 0) rc = CLI_ERR;
    j->diverted = 0;
    return rc;
}

/* The calls: memfd, the library written into it, dlopen, close, start. */
static int inj_calls(struct inj *j)
{
    char path[64], text[256];
    uint64_t fd, handle, start, rc = 0;
    size_t code_len = strlen(j->p->code) + 1;
    int wfd;
    size_t done = 0;

    if (code_len > INJ_SCRATCH - 64) return inj_fail(j, "the bootstrap's code is too long");
    if (inj_poke(j, j->scratch, "rbtrace_boot", 13) != CLI_OK) return CLI_ERR;
    if (inj_call(j, j->p->memfd_create, j->scratch, INJ_MFD_CLOEXEC, 0, &fd) != CLI_OK)
        return CLI_ERR;
    if ((int)fd < 0) return inj_fail(j, "memfd_create failed in the target (a seccomp filter?)");
    /* The library, written from here into the target's memfd. */
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)j->p->pid, (int)fd);
    if ((wfd = open(path, O_WRONLY | O_CLOEXEC)) < 0) {
        inj_fail(j, "could not open the target's memfd (%s): %s", path, strerror(errno));
        goto close_fd;
    }
    while (done < j->p->lib_len) {
        ssize_t n = write(wfd, j->p->lib + done, j->p->lib_len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    close(wfd);
    if (done < j->p->lib_len) {
        inj_fail(j, "could not write the bootstrap into the target's memfd: %s", strerror(errno));
        goto close_fd;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", (int)fd);
    if (inj_poke(j, j->scratch, path, strlen(path) + 1) != CLI_OK) goto close_fd;
    if (inj_call(j, j->p->dlopen, j->scratch, INJ_RTLD_NOW, 0, &handle) != CLI_OK) return CLI_ERR;
    if (!handle) {
        uint64_t msg = 0;
        text[0] = '\0';
        if (inj_call(j, j->p->dlerror, 0, 0, 0, &msg) == CLI_OK && msg)
            inj_peek_string(j, msg, text, sizeof(text));
        inj_fail(j, "dlopen of the bootstrap failed in the target: %s",
                 text[0] ? text : "(no reason)");
        goto close_fd;
    }
    if (inj_call(j, j->p->close, fd, 0, 0, &rc) != CLI_OK) return CLI_ERR;
    if (inj_poke(j, j->scratch, "rbtrace_boot_start", 19) != CLI_OK) return CLI_ERR;
    if (inj_call(j, j->p->dlsym, handle, j->scratch, 0, &start) != CLI_OK) return CLI_ERR;
    if (!start) return inj_fail(j, "the bootstrap has no rbtrace_boot_start");
    if (inj_poke(j, j->scratch, j->p->code, code_len) != CLI_OK) return CLI_ERR;
    if (inj_call(j, start, j->scratch, 0, 0, &rc) != CLI_OK) return CLI_ERR;
    switch ((int)rc) {
    case 0:
        return CLI_OK;
    case 2:
        return inj_fail(j, "this Ruby has no postponed-job API the bootstrap knows");
    case 3:
        return inj_fail(j, "Ruby refused the bootstrap's postponed job (its table is full)");
    default:
        return inj_fail(j, "the bootstrap's start failed (%d)", (int)rc);
    }
close_fd:
    inj_call(j, j->p->close, fd, 0, 0, &rc);
    return CLI_ERR;
}

int inject_ptrace_run(const struct inject_plan *p, struct inject_report *r)
{
    struct inj j;
    uint64_t all = ~(uint64_t)0;
    int64_t t0, t1 = 0;
    int rc;

    memset(&j, 0, sizeof(j));
    memset(r, 0, sizeof(*r));
    r->syscall = -1;
    j.p = p;
    j.r = r;
    j.tid = p->pid;
    if (!(j.xstate = malloc(INJ_XSTATE_MAX))) return inj_fail(&j, "out of memory");
    if (inj_stop_safely(&j) != CLI_OK) {
        free(j.xstate);
        return CLI_ERR;
    }
    t0 = inj_now_us();
    r->syscall = (long)j.saved.orig_rax;
    r->untimed_wait = r->syscall >= 0 && inj_untimed(&j.saved);
    j.xstate_iov.iov_base = j.xstate;
    j.xstate_iov.iov_len = INJ_XSTATE_MAX;
    if (ptrace(PTRACE_GETREGSET, p->pid, (void *)NT_X86_XSTATE, &j.xstate_iov) < 0) {
        inj_fail(&j, "could not save the thread's FPU state: %s", strerror(errno));
        j.xstate_iov.iov_len = 0;
        ptrace(PTRACE_DETACH, j.tid, 0, 0);
        free(j.xstate);
        return CLI_ERR;
    }
    if (ptrace(PTRACE_GETSIGMASK, j.tid, (void *)sizeof(j.saved_mask), &j.saved_mask) < 0) {
        inj_fail(&j, "could not read the thread's signal mask: %s", strerror(errno));
        ptrace(PTRACE_DETACH, j.tid, 0, 0);
        free(j.xstate);
        return CLI_ERR;
    }
    /* No handler runs on top of the calls: every signal waits (SIGKILL and
     * SIGSTOP cannot be blocked; the kernel ignores them here). */
    if (ptrace(PTRACE_SETSIGMASK, j.tid, (void *)sizeof(all), &all) < 0) {
        inj_fail(&j, "could not block the thread's signals: %s", strerror(errno));
        ptrace(PTRACE_DETACH, j.tid, 0, 0);
        free(j.xstate);
        return CLI_ERR;
    }
    /* Below the red zone: the strings, then the calls' stack, 16-aligned
     * at each call (the return address makes it 8 mod 16). */
    j.scratch = ((j.saved.rsp - INJ_RED_ZONE - INJ_SCRATCH) & ~(uint64_t)15);
    j.call_sp = j.scratch - 64 - 8;
    rc = inj_calls(&j);
    if (j.diverted) t1 = inj_now_us();
    if (inj_restore_and_detach(&j) != CLI_OK && rc == CLI_OK)
        rc = inj_fail(&j, "could not put process %d's main thread back: %s", (int)p->pid,
                      strerror(errno));
    r->stopped_us = inj_now_us() - t0;
    r->diverted_us = t1 ? t1 - t0 : 0;
    free(j.xstate);
    return rc;
}
