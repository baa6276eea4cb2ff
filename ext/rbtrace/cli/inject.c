/*
 * inject.c - `rbtrace --inject`: the checks, the right rbtrace for the
 * target's Ruby, the child that stops one thread (inject_ptrace.c), the
 * wake and the wait for rbtrace to load (docs/DESIGN.md, "Injection").
 */
#define _GNU_SOURCE /* memmem, pipe2, process_vm_readv */
#include "cli.h"
#include "inject.h"
#include "inject_elf.h"
#include "inject_ptrace.h"
#include "procfs.h"
#include "protocol.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define INJECT_BUDGET_MS 2000 /* to find the main thread at a safe point */
#define INJECT_CALL_MS 10000  /* one call in the target (dlopen: the loader's lock) */
#define INJECT_CODE_MAX 8192
#define INJECT_BOOT_MAX (4u << 20)
#define INJECT_CAP_SYS_PTRACE 19

/* What /proc/PID/maps says of the target. */
struct inject_maps {
    char libc[PATH_MAX]; /* glibc's path, as the target sees it */
    uint64_t libc_start; /* its offset-0 mapping */
    unsigned long libc_inode;
    char ruby[PATH_MAX]; /* libruby, or the executable if Ruby is in it */
    uint64_t ruby_start;
    unsigned long ruby_inode;
    int musl;
    int boot_mapped; /* a bootstrap is there already (its job pending?) */
    struct inject_range ruby_text[INJECT_RANGES];
    int n_ruby_text;
    struct inject_range libc_text[INJECT_RANGES];
    int n_libc_text;
};

struct inject {
    pid_t pid;
    char *errstr;
    size_t size;
    struct inject_maps m;
    int api[3];                  /* ruby_api_version */
    char version[32];            /* ruby_version: "3.4.5" */
    char load_path[2][PATH_MAX]; /* what goes on the target's $LOAD_PATH */
    int n_load_path;
};

__attribute__((format(printf, 2, 3))) static int inject_fail(struct inject *in, const char *fmt,
                                                             ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(in->errstr, in->size, fmt, ap);
    va_end(ap);
    return CLI_ERR;
}

/* ---- may we? ---- */

static int inject_check_privilege(struct inject *in)
{
    char cap[32], scope[16] = "";
    unsigned long long eff;
    int fd;

    if ((fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC)) >= 0) {
        ssize_t n = read(fd, scope, sizeof(scope) - 1);
        scope[n > 0 ? n : 0] = '\0';
        close(fd);
        if (scope[0] == '3')
            return inject_fail(in,
                               "--inject cannot work on this machine: ptrace is disabled "
                               "(kernel.yama.ptrace_scope = 3, until the next boot); have the app "
                               "load rbtrace instead (require 'rbtrace' or RUBYOPT=-rrbtrace) and "
                               "restart it");
    }
    if (geteuid() == 0) return CLI_OK;
    if (procfs_status_field("/proc/self/status", "CapEff", cap, sizeof(cap)) &&
        sscanf(cap, "%llx", &eff) == 1 && (eff >> INJECT_CAP_SYS_PTRACE & 1))
        return CLI_OK;
    return inject_fail(in,
                       "--inject needs root or the capability CAP_SYS_PTRACE: it stops a thread of "
                       "process %d with ptrace to load rbtrace (sudo rbtrace -p %d --inject ...)",
                       (int)in->pid, (int)in->pid);
}

/* Refuses a process any thread of which a debugger traces, or under seccomp. */
static int inject_check_tasks(struct inject *in)
{
    char path[384], value[64];
    struct dirent *d;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)in->pid);
    if (procfs_status_field(path, "Seccomp", value, sizeof(value)) && strcmp(value, "0"))
        return inject_fail(in,
                           "process %d runs under a seccomp filter (Seccomp: %s in "
                           "/proc/%d/status; a container's profile?), which may refuse or punish "
                           "the calls --inject makes in it: not injected. Have the app load "
                           "rbtrace (require 'rbtrace' or RUBYOPT=-rrbtrace) and restart it",
                           (int)in->pid, value, (int)in->pid);
    snprintf(path, sizeof(path), "/proc/%d/task", (int)in->pid);
    if (!(dir = opendir(path)))
        return inject_fail(in, "no process with pid %d (check the pid with ps)", (int)in->pid);
    while ((d = readdir(dir)) != NULL) {
        if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)in->pid, d->d_name);
        if (procfs_status_field(path, "TracerPid", value, sizeof(value)) && strcmp(value, "0")) {
            char tid[sizeof(d->d_name)];
            snprintf(tid, sizeof(tid), "%s", d->d_name); /* d is closedir's to free */
            closedir(dir);
            return inject_fail(in,
                               "thread %s of process %d is already traced by process %s (a "
                               "debugger, strace?): --inject needs ptrace, which only one tracer "
                               "may hold; detach that one first",
                               tid, (int)in->pid, value);
        }
    }
    closedir(dir);
    return CLI_OK;
}

/* ---- what runs in it ---- */

static void inject_add_range(struct inject_range *r, int *n, uint64_t lo, uint64_t hi)
{
    if (*n < INJECT_RANGES) {
        r[*n].lo = lo;
        r[*n].hi = hi;
        (*n)++;
    }
}

static int inject_read_maps(struct inject *in)
{
    struct inject_maps *m = &in->m;
    char path[64], exe[PATH_MAX], line[PATH_MAX + 256], libruby[PATH_MAX] = "";
    uint64_t libruby_start = 0, exe_start = 0;
    unsigned long libruby_inode = 0, exe_inode = 0;
    struct inject_range exe_text[INJECT_RANGES], lr_text[INJECT_RANGES];
    int n_exe = 0, n_lr = 0, i;
    ssize_t n;
    FILE *f;

    memset(m, 0, sizeof(*m));
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)in->pid);
    if ((n = readlink(path, exe, sizeof(exe) - 1)) < 0)
        return inject_fail(in, "could not read %s: %s", path, strerror(errno));
    exe[n] = '\0';
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)in->pid);
    if (!(f = fopen(path, "re")))
        return inject_fail(in, "could not read %s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi, off;
        unsigned long inode;
        char perms[8], dev[16];
        int pos = 0;
        const char *file, *base;

        if (sscanf(line, "%llx-%llx %7s %llx %15s %lu %n", &lo, &hi, perms, &off, dev, &inode,
                   &pos) < 6 ||
            !pos)
            continue;
        file = line + pos;
        ((char *)file)[strcspn(file, "\n")] = '\0';
        base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
        if (strstr(file, "/memfd:rbtrace_boot")) m->boot_mapped = 1;
        if (strstr(base, "ld-musl-") || strstr(base, "libc.musl")) m->musl = 1;
        if (!strcmp(base, "libc.so.6") || (!strncmp(base, "libc-2.", 7) && strstr(base, ".so"))) {
            if (off == 0 && !m->libc_start) {
                m->libc_start = lo;
                m->libc_inode = inode;
                snprintf(m->libc, sizeof(m->libc), "%s", file);
            }
            if (perms[2] == 'x') inject_add_range(m->libc_text, &m->n_libc_text, lo, hi);
        } else if (!strncmp(base, "libruby", 7) && strstr(base, ".so")) {
            if (off == 0 && !libruby_start) {
                libruby_start = lo;
                libruby_inode = inode;
                snprintf(libruby, sizeof(libruby), "%s", file);
            }
            if (perms[2] == 'x') inject_add_range(lr_text, &n_lr, lo, hi);
        } else if (!strcmp(file, exe)) {
            if (off == 0 && !exe_start) {
                exe_start = lo;
                exe_inode = inode;
            }
            if (perms[2] == 'x') inject_add_range(exe_text, &n_exe, lo, hi);
        }
    }
    fclose(f);
    /* Ruby's code: libruby's where it has one, else the executable's. */
    if (libruby[0]) {
        snprintf(m->ruby, sizeof(m->ruby), "%s", libruby);
        m->ruby_start = libruby_start;
        m->ruby_inode = libruby_inode;
        for (i = 0; i < n_lr; i++)
            inject_add_range(m->ruby_text, &m->n_ruby_text, lr_text[i].lo, lr_text[i].hi);
    } else {
        snprintf(m->ruby, sizeof(m->ruby), "%s", exe);
        m->ruby_start = exe_start;
        m->ruby_inode = exe_inode;
    }
    for (i = 0; i < n_exe; i++)
        inject_add_range(m->ruby_text, &m->n_ruby_text, exe_text[i].lo, exe_text[i].hi);
    return CLI_OK;
}

/* Opens a file of the target's, as it sees it (/proc/PID/root), and
 * checks it is the one mapped (its inode): a file replaced on disk since
 * (an upgrade) would give wrong addresses. */
static int inject_open_elf(struct inject *in, const char *file, unsigned long inode,
                           struct inject_elf *e)
{
    char path[PATH_MAX + 32];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d/root%s", (int)in->pid, file);
    if (stat(path, &st) < 0 || (unsigned long)st.st_ino != inode)
        return inject_fail(in,
                           "%s, mapped in process %d, is not on disk as it was loaded (replaced by "
                           "an upgrade?): its symbols cannot be trusted; restart the app",
                           file, (int)in->pid);
    if (inject_elf_open(e, path) != CLI_OK)
        return inject_fail(in, "could not read %s: %s", path, strerror(errno));
    return CLI_OK;
}

static int inject_read_target(struct inject *in, uint64_t addr, void *buf, size_t len)
{
    struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };
    return process_vm_readv(in->pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? CLI_OK : CLI_ERR;
}

/* The target's Ruby: ruby_api_version and ruby_version, read from its memory. */
static int inject_ruby_version(struct inject *in)
{
    struct inject_elf e;
    uint64_t api, ver, bias;
    int rc = CLI_OK;

    if (inject_open_elf(in, in->m.ruby, in->m.ruby_inode, &e) != CLI_OK) return CLI_ERR;
    api = inject_elf_symbol(&e, "ruby_api_version");
    ver = inject_elf_symbol(&e, "ruby_version");
    bias = in->m.ruby_start - e.first_vaddr;
    inject_elf_close(&e);
    if (!api || !ver)
        return inject_fail(in,
                           "process %d is not a Ruby process (%s exports no ruby_api_version): "
                           "--inject loads rbtrace into CRuby only",
                           (int)in->pid, in->m.ruby);
    memset(in->version, 0, sizeof(in->version));
    if (inject_read_target(in, bias + api, in->api, sizeof(in->api)) != CLI_OK ||
        inject_read_target(in, bias + ver, in->version, sizeof(in->version) - 1) != CLI_OK)
        rc = inject_fail(in, "could not read process %d's Ruby version: %s", (int)in->pid,
                         strerror(errno));
    in->version[strcspn(in->version, "\n")] = '\0';
    return rc;
}

static int inject_libc(struct inject *in, struct inject_plan *p)
{
    struct inject_elf e;
    uint64_t bias;

    if (in->m.musl || !in->m.libc[0])
        return inject_fail(
            in,
            "process %d %s: --inject calls glibc's dlopen in the target, and supports "
            "glibc 2.34 or later only. Have the app load rbtrace instead (require "
            "'rbtrace' or RUBYOPT=-rrbtrace) and restart it",
            (int)in->pid,
            in->m.musl ? "uses musl libc (Alpine?)" : "has no glibc mapped (linked statically?)");
    if (inject_open_elf(in, in->m.libc, in->m.libc_inode, &e) != CLI_OK) return CLI_ERR;
    bias = in->m.libc_start - e.first_vaddr;
    p->memfd_create = inject_elf_symbol(&e, "memfd_create");
    p->dlopen = inject_elf_symbol(&e, "dlopen");
    p->dlsym = inject_elf_symbol(&e, "dlsym");
    p->dlerror = inject_elf_symbol(&e, "dlerror");
    p->close = inject_elf_symbol(&e, "close");
    inject_elf_close(&e);
    if (!p->dlopen || !p->dlsym || !p->dlerror || !p->memfd_create || !p->close)
        return inject_fail(in,
                           "process %d's libc (%s) has no dlopen of its own (glibc older than "
                           "2.34, where it is in libdl): --inject supports glibc 2.34 or later. "
                           "Have the app load rbtrace instead (require 'rbtrace')",
                           (int)in->pid, in->m.libc);
    p->memfd_create += bias;
    p->dlopen += bias;
    p->dlsym += bias;
    p->dlerror += bias;
    p->close += bias;
    return CLI_OK;
}

/* ---- which rbtrace ---- */

/* The Ruby a built rbtrace.so is for ("3.4"), from its mark (protocol.h);
 * "" if it has none (not this rbtrace, or an older one). */
static void inject_built_for(const char *so, char *out, size_t size)
{
    static const char mark[] = RBTRACE_BUILT_FOR_MARK;
    struct stat st;
    char *buf = NULL, *at;
    int fd = open(so, O_RDONLY | O_CLOEXEC);
    size_t got = 0;

    out[0] = '\0';
    if (fd < 0) return;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < (64 << 20) &&
        (buf = malloc((size_t)st.st_size))) {
        while (got < (size_t)st.st_size) {
            ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
        }
        if ((at = memmem(buf, got, mark, sizeof(mark) - 1))) {
            size_t i = 0;
            at += sizeof(mark) - 1;
            while (i + 1 < size && at + i < buf + got && at[i] != '\n' && at[i]) {
                out[i] = at[i];
                i++;
            }
            out[i] = '\0';
        }
    }
    free(buf);
    close(fd);
}

/* Whether lib (a directory as the target sees it) holds an rbtrace for
 * the target's Ruby: rbtrace.rb beside, or in an earlier directory
 * (arch: the extension alone). *for_ruby says what it is built for. */
static int inject_dir_fits(struct inject *in, const char *dir, char *for_ruby, size_t size)
{
    char so[PATH_MAX + 64], want[16];

    snprintf(so, sizeof(so), "/proc/%d/root%s/rbtrace/rbtrace.so", (int)in->pid, dir);
    inject_built_for(so, for_ruby, size);
    snprintf(want, sizeof(want), "%d.%d", in->api[0], in->api[1]);
    return !strcmp(for_ruby, want);
}

static int inject_has_rb(struct inject *in, const char *dir)
{
    char rb[PATH_MAX + 64];
    snprintf(rb, sizeof(rb), "/proc/%d/root%s/rbtrace.rb", (int)in->pid, dir);
    return access(rb, R_OK) == 0;
}

/* The directory this client is in (lib/rbtrace), "" if unknown. */
static void inject_client_dir(char *out, size_t size)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    out[0] = '\0';
    if (n <= 0) return;
    exe[n] = '\0';
    snprintf(out, size, "%s", dirname(exe));
}

static int inject_choose_build(struct inject *in, const char *given)
{
    char here[PATH_MAX], lib[PATH_MAX], copy[PATH_MAX + 64], for_ruby[32];

    if (given) {
        if (given[0] != '/')
            return inject_fail(in,
                               "--inject=DIR takes an absolute directory (as process %d sees it)",
                               (int)in->pid);
        if (!inject_has_rb(in, given))
            return inject_fail(in,
                               "--inject=%s: no rbtrace.rb there (as process %d sees it): give the "
                               "lib directory of an rbtrace built for Ruby %d.%d",
                               given, (int)in->pid, in->api[0], in->api[1]);
        if (!inject_dir_fits(in, given, for_ruby, sizeof(for_ruby)))
            return inject_fail(
                in,
                "--inject=%s: its rbtrace/rbtrace.so is %s%s, and process %d runs Ruby "
                "%s: give the lib directory of an rbtrace built for Ruby %d.%d",
                given, for_ruby[0] ? "built for Ruby " : "missing, or not this rbtrace's", for_ruby,
                (int)in->pid, in->version, in->api[0], in->api[1]);
        snprintf(in->load_path[0], PATH_MAX, "%s", given);
        in->n_load_path = 1;
        return CLI_OK;
    }
    inject_client_dir(here, sizeof(here));
    snprintf(lib, sizeof(lib), "%s", here);
    snprintf(lib, sizeof(lib), "%s", dirname(here)); /* lib/rbtrace -> lib */
    if (inject_has_rb(in, lib) && inject_dir_fits(in, lib, for_ruby, sizeof(for_ruby))) {
        snprintf(in->load_path[0], PATH_MAX, "%s", lib);
        in->n_load_path = 1;
        return CLI_OK;
    }
    /* A checkout: each Ruby's build kept in tmp/inject/X.Y (Rakefile). */
    if (inject_has_rb(in, lib)) {
        char root[PATH_MAX], other[32];
        if (strlen(lib) > PATH_MAX - 64) return inject_fail(in, "the client's path is too long");
        snprintf(root, sizeof(root), "%s", lib);
        snprintf(copy, sizeof(copy), "%s/tmp/inject/%d.%d", dirname(root), in->api[0], in->api[1]);
        if (inject_dir_fits(in, copy, other, sizeof(other))) {
            snprintf(in->load_path[0], PATH_MAX, "%.4000s", copy);
            snprintf(in->load_path[1], PATH_MAX, "%s", lib);
            in->n_load_path = 2;
            return CLI_OK;
        }
        return inject_fail(
            in,
            "process %d runs Ruby %s, and the rbtrace beside this client (%s) is "
            "built for Ruby %s: install the rbtrace gem for Ruby %d.%d and run its "
            "rbtrace, or give --inject=DIR, DIR the lib directory of an rbtrace built "
            "for it",
            (int)in->pid, in->version, lib, for_ruby[0] ? for_ruby : "another", in->api[0],
            in->api[1]);
    }
    return inject_fail(
        in,
        "process %d cannot see this client's rbtrace (%s: in a container?): install "
        "the rbtrace gem inside it, or give --inject=DIR, DIR the lib directory of an "
        "rbtrace for Ruby %d.%d as the process sees it",
        (int)in->pid, lib, in->api[0], in->api[1]);
}

/* Appends s as a Ruby single-quoted string. */
static void inject_quote(char *out, size_t size, const char *s)
{
    size_t len = strlen(out);

    if (len + 1 < size) out[len++] = '\'';
    for (; *s && len + 3 < size; s++) {
        if (*s == '\'' || *s == '\\') out[len++] = '\\';
        out[len++] = *s;
    }
    if (len + 1 < size) out[len++] = '\'';
    out[len] = '\0';
}

/* The Ruby the bootstrap's thread runs: the rbtrace chosen, required. An
 * error is said on the app's stderr (the client then says it timed out). */
static void inject_code(const struct inject *in, char *out, size_t size)
{
    int i;

    snprintf(out, size, "begin; $LOAD_PATH.unshift(");
    for (i = 0; i < in->n_load_path; i++) {
        if (i) strncat(out, ", ", size - strlen(out) - 1);
        inject_quote(out, size, in->load_path[i]);
    }
    strncat(out,
            "); require 'rbtrace'; rescue Exception => e; "
            "warn \"rbtrace: --inject: could not load rbtrace: #{e.class}: #{e.message}\"; end",
            size - strlen(out) - 1);
}

static int inject_read_boot(struct inject *in, unsigned char **lib, size_t *len)
{
    char here[PATH_MAX], path[PATH_MAX + 32];
    struct stat st;
    size_t got = 0;
    int fd;

    inject_client_dir(here, sizeof(here));
    snprintf(path, sizeof(path), "%s/rbtrace_boot.so", here);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return inject_fail(in, "could not open %s (rbtrace's bootstrap, built with the client): %s",
                           path, strerror(errno));
    if (fstat(fd, &st) < 0 || st.st_size <= 0 || (size_t)st.st_size > INJECT_BOOT_MAX ||
        !(*lib = malloc((size_t)st.st_size))) {
        close(fd);
        return inject_fail(in, "could not read %s", path);
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, *lib + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    if (got < (size_t)st.st_size) {
        free(*lib);
        *lib = NULL;
        return inject_fail(in, "could not read %s", path);
    }
    return CLI_OK;
}

/* ---- the child that touches it ---- */

/*
 * Runs the injection in a child in its own process group, ignoring the
 * terminal's signals: killing the client (even with SIGKILL, even its
 * process group) never leaves the target's thread diverted, because the
 * tracer is the child, which finishes and puts the thread back. The
 * client holds SIGINT, SIGTERM, SIGHUP and SIGQUIT off meanwhile.
 */
static int inject_in_child(struct inject *in, const struct inject_plan *p, struct inject_report *r)
{
    sigset_t hold, old;
    int fds[2], status, rc;
    size_t got = 0;
    pid_t child;

    if (pipe2(fds, O_CLOEXEC) < 0) return inject_fail(in, "pipe: %s", strerror(errno));
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    sigaddset(&hold, SIGHUP);
    sigaddset(&hold, SIGQUIT);
    sigprocmask(SIG_BLOCK, &hold, &old);
    if ((child = fork()) < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        close(fds[0]);
        close(fds[1]);
        return inject_fail(in, "fork: %s", strerror(errno));
    }
    if (child == 0) {
        struct inject_report mine;
        size_t off = 0;

        setpgid(0, 0);
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        signal(SIGQUIT, SIG_IGN);
        signal(SIGPIPE, SIG_IGN);
        close(fds[0]);
        rc = inject_ptrace_run(p, &mine);
        mine.errstr[sizeof(mine.errstr) - 1] = '\0';
        if (rc != CLI_OK && !mine.errstr[0]) snprintf(mine.errstr, sizeof(mine.errstr), "failed");
        while (off < sizeof(mine)) {
            ssize_t n = write(fds[1], (char *)&mine + off, sizeof(mine) - off);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            off += (size_t)n;
        }
        _exit(rc == CLI_OK ? 0 : 1);
    }
    close(fds[1]);
    while (got < sizeof(*r)) {
        ssize_t n = read(fds[0], (char *)r + got, sizeof(*r) - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (got < sizeof(*r)) return inject_fail(in, "the injecting process died (status %d)", status);
    r->errstr[sizeof(r->errstr) - 1] = '\0';
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return inject_fail(in, "%s", r->errstr);
    return CLI_OK;
}

/* ---- after ---- */

/* Whether pid handles signal sig (SigCgt in its status). */
static int inject_handles(pid_t pid, int sig)
{
    char path[64], v[32];
    unsigned long long cgt;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    return procfs_status_field(path, "SigCgt", v, sizeof(v)) && sscanf(v, "%llx", &cgt) == 1 &&
        (cgt >> (sig - 1) & 1);
}

/* Whether a thread of pid is named name: "rbtrace" (the helper: loaded),
 * "rbtrace-inject" (the bootstrap's thread: loading). */
static int inject_thread_named(pid_t pid, const char *name)
{
    char path[384], comm[32];
    struct dirent *d;
    DIR *dir;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if (!(dir = opendir(path))) return 0;
    while (!found && (d = readdir(dir)) != NULL) {
        int fd;
        ssize_t n;

        if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, d->d_name);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) continue;
        n = read(fd, comm, sizeof(comm) - 1);
        close(fd);
        comm[n > 0 ? n : 0] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        found = !strcmp(comm, name);
    }
    closedir(dir);
    return found;
}

/* Waits until rbtrace is loaded and its thread runs. */
static int inject_wait_loaded(struct inject *in, int timeout_ms, volatile sig_atomic_t *stop,
                              int pending_why)
{
    int64_t start = cli_now_ms(), mapped_at = 0;
    int said = 0;

    for (;;) {
        int64_t now = cli_now_ms();
        if (stop && *stop) return CLI_INTERRUPTED;
        if (!procfs_alive(in->pid)) return inject_fail(in, "process %d exited", (int)in->pid);
        if (procfs_rbtrace_library(in->pid, NULL, 0) == PROCFS_LIB_OURS) {
            if (!mapped_at) mapped_at = now;
            /* its thread named: loaded; M:N threads may not name it */
            if (inject_thread_named(in->pid, "rbtrace") || now - mapped_at > 1000) return CLI_OK;
        }
        if (now - start > timeout_ms) break;
        if (!said && !pending_why && now - start > 1000) {
            if (mapped_at || inject_thread_named(in->pid, "rbtrace-inject"))
                fprintf(stderr,
                        "*** process %d: rbtrace is loading; its thread waits for the GVL behind "
                        "threads busy in Ruby\n",
                        (int)in->pid);
            else
                fprintf(stderr,
                        "*** process %d: rbtrace is injected and loads when the main thread next "
                        "reaches a safe point: it is in a C call that holds the GVL (waiting)\n",
                        (int)in->pid);
            said = 1;
        }
        cli_sleep_ms(5);
    }
    if (pending_why)
        return inject_fail(
            in,
            "process %d runs Ruby 4.0.0, and its main thread waits with no time-out: "
            "rbtrace is injected but loads only when that thread next wakes (waking "
            "it with SIGCHLD, as on other Rubies, would end the app's sleep there: "
            "Ruby's Bug #21812, fixed after 4.0.0). Run this command again once the "
            "app has done some work; it needs no --inject then if rbtrace loaded",
            (int)in->pid);
    return inject_fail(in,
                       "rbtrace was injected into process %d but had not loaded within %g s (%s); "
                       "it goes on loading: a later attach needs no --inject once it has",
                       (int)in->pid, timeout_ms / 1000.0,
                       inject_thread_named(in->pid, "rbtrace-inject")
                           ? "its thread waits for the GVL behind threads busy in Ruby, or the "
                             "require failed: the app's stderr says so"
                           : "its main thread has not reached a safe point: a C call that holds "
                             "the GVL?");
}

int inject_rbtrace(pid_t pid, const char *dir, int timeout_ms, volatile sig_atomic_t *stop,
                   char *errstr, size_t size)
{
    struct inject in;
    struct inject_plan p;
    struct inject_report r;
    unsigned char *lib = NULL;
    char code[INJECT_CODE_MAX];
    int pending = 0, rc;

#ifndef __x86_64__
    snprintf(errstr, size, "--inject works on x86-64 Linux only");
    return CLI_ERR;
#endif
    memset(&in, 0, sizeof(in));
    memset(&p, 0, sizeof(p));
    memset(&r, 0, sizeof(r));
    in.pid = pid;
    in.errstr = errstr;
    in.size = size;
    if (!procfs_alive(pid))
        return inject_fail(&in, "no process with pid %d (check the pid with ps)", (int)pid);
    switch (procfs_rbtrace_library(pid, NULL, 0)) {
    case PROCFS_LIB_OURS:
        return CLI_OK; /* loaded already: nothing to do */
    case PROCFS_LIB_OLD_GEM:
        return CLI_OK; /* the attach says what it is */
    default:
        break;
    }
    if (inject_check_privilege(&in) != CLI_OK || inject_check_tasks(&in) != CLI_OK ||
        inject_read_maps(&in) != CLI_OK)
        return CLI_ERR;
    if (!in.m.ruby_start || inject_ruby_version(&in) != CLI_OK) {
        if (!in.m.ruby_start)
            inject_fail(&in,
                        "process %d is not a Ruby process: --inject loads rbtrace into CRuby only",
                        (int)pid);
        return CLI_ERR;
    }
    if (inject_libc(&in, &p) != CLI_OK || inject_choose_build(&in, dir) != CLI_OK) return CLI_ERR;
    if (!in.m.boot_mapped) {
        if (inject_read_boot(&in, &lib, &p.lib_len) != CLI_OK) return CLI_ERR;
        inject_code(&in, code, sizeof(code));
        p.pid = pid;
        p.lib = lib;
        p.code = code;
        p.budget_ms = INJECT_BUDGET_MS;
        p.call_budget_ms = INJECT_CALL_MS;
        memcpy(p.ruby_text, in.m.ruby_text, sizeof(p.ruby_text));
        p.n_ruby_text = in.m.n_ruby_text;
        memcpy(p.libc_text, in.m.libc_text, sizeof(p.libc_text));
        p.n_libc_text = in.m.n_libc_text;
        rc = inject_in_child(&in, &p, &r);
        free(lib);
        if (rc != CLI_OK) return CLI_ERR;
        fprintf(stderr,
                "*** injected rbtrace into process %d (Ruby %s): its main thread stopped %.2f ms "
                "(%d %s)\n",
                (int)pid, in.version, r.stopped_us / 1000.0, r.tries,
                r.tries == 1 ? "try" : "tries");
    } else {
        r.syscall = 0; /* injected before, its job pending: wake it as if asleep */
        r.untimed_wait = 1;
    }
    /* Wake a main thread that was waiting, so that it runs the job. */
    if (r.syscall >= 0) {
        if (!strcmp(in.version, "4.0.0") && r.untimed_wait &&
            (r.syscall == SYS_futex || in.m.boot_mapped))
            pending = 1;
        else if (r.syscall == SYS_ppoll || !inject_handles(pid, SIGCHLD))
            /* Ruby's no-op signal, to the main thread: ends a poll (where
             * 3.1 sleeps), not a condition variable's wait */
            syscall(SYS_tgkill, pid, pid, SIGVTALRM);
        else
            /* Ruby's handler wakes its timer thread, which interrupts the
             * main thread (an app's trap('CHLD') runs once) */
            kill(pid, SIGCHLD);
    }
    return inject_wait_loaded(&in, timeout_ms, stop, pending);
}
