/*
 * inject_ptrace.h - the part of --inject that touches the target: one
 * thread stopped with ptrace at a safe point, functions called in it, the
 * thread put back as it was (docs/DESIGN.md, "Injection"). x86-64 Linux.
 */
#ifndef RBTRACE_CLI_INJECT_PTRACE_H
#define RBTRACE_CLI_INJECT_PTRACE_H

#include "cli.h"

#include <sys/types.h>

#define INJECT_RANGES 16

struct inject_range {
    uint64_t lo, hi;
};

/* What the injector needs, all found before the target is touched. */
struct inject_plan {
    pid_t pid; /* the main thread is the one diverted: its tid is the pid */
    /* libc's functions, at their addresses in the target */
    uint64_t memfd_create, dlopen, dlsym, dlerror, close;
    /* Ruby's own code (the executable's or libruby's text), and libc's */
    struct inject_range ruby_text[INJECT_RANGES];
    int n_ruby_text;
    struct inject_range libc_text[INJECT_RANGES];
    int n_libc_text;
    const unsigned char *lib; /* the bootstrap library's bytes */
    size_t lib_len;
    const char *code;   /* the Ruby the bootstrap evaluates */
    int budget_ms;      /* how long to look for a safe moment */
    int call_budget_ms; /* how long one call in the target may take */
};

/* What happened, for the client's messages and bench/inject.rb. */
struct inject_report {
    long syscall;          /* the main thread's system call when diverted; -1 running */
    int untimed_wait;      /* ...a wait with no time-out (a futex or poll) */
    int tries;             /* stops until a safe one */
    int64_t stopped_us;    /* the thread stopped, first stop to detach */
    int64_t diverted_us;   /* its registers not its own (a dead client here crashes the app) */
    char last_unsafe[120]; /* why the last unsafe stop was unsafe */
    char errstr[CLI_ERRLEN];
};

/* Stops pid's main thread at a safe point, loads the bootstrap and calls
 * rbtrace_boot_start(code) in it, puts it back and detaches. CLI_OK, or
 * CLI_ERR with r->errstr. */
int inject_ptrace_run(const struct inject_plan *p, struct inject_report *r);

#endif
