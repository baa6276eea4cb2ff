/*
 * container.c - a target in namespaces of its own (container.h;
 * docs/DESIGN.md, "Containers").
 *
 * Everything read from the container (its environment, its files) is the
 * container's to choose: TMPDIR is bounded and checked, and the way to it
 * through /proc/PID/root is walked one directory at a time, refusing
 * symbolic links and "..", which would lead out of the container's root
 * into the host's (an absolute link under /proc/PID/root resolves against
 * our root, not the container's).
 */
#define _GNU_SOURCE /* setns, CLONE_NEWIPC */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "container.h"
#include "escape.h"

/* The capabilities (capability.h's numbers) entering a container takes. */
#define CONTAINER_CAP_SYS_PTRACE 19
#define CONTAINER_CAP_SYS_ADMIN 21
/* The most of /proc/PID/environ read (Linux caps it near 2 MiB anyway). */
#define CONTAINER_ENVIRON_MAX (4 << 20)

/* ---- which namespaces ---- */

/* pid's pid in its own PID namespace: the last field of NSpid (one field:
 * ours). 0 if /proc does not say (a kernel before 4.1: then beside us). */
static pid_t container_ns_pid(pid_t pid, int *nested)
{
    char path[64], line[512];
    pid_t last = 0;
    int fields = 0;
    FILE *f;

    *nested = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "re")) == NULL) return 0;
    while (fgets(line, sizeof(line), f)) {
        char *p = line + sizeof("NSpid:") - 1, *end;

        if (strncmp(line, "NSpid:", sizeof("NSpid:") - 1) != 0) continue;
        for (;;) {
            long v = strtol(p, &end, 10);
            if (end == p || v <= 0) break;
            last = (pid_t)v;
            fields++;
            p = end;
        }
        break;
    }
    fclose(f);
    *nested = fields > 1;
    return last;
}

/* 1 if pid's namespace `name` differs from ours, 0 if it is ours, -1 if
 * we may not look (another user's process: ptrace's read check). */
static int container_ns_differs(pid_t pid, const char *name)
{
    char path[64];
    struct stat mine, theirs;

    snprintf(path, sizeof(path), "/proc/self/ns/%s", name);
    if (stat(path, &mine) < 0) return -1;
    snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, name);
    if (stat(path, &theirs) < 0) return -1;
    return mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino;
}

/* Whether pid sees another root than ours (a chroot, or another mount
 * namespace's root): 1, 0, or -1 if we may not look. */
static int container_root_differs(pid_t pid)
{
    char path[64];
    struct stat mine, theirs;

    snprintf(path, sizeof(path), "/proc/%d/root/", (int)pid);
    if (stat("/", &mine) < 0 || stat(path, &theirs) < 0) return -1;
    return mine.st_dev != theirs.st_dev || mine.st_ino != theirs.st_ino;
}

void container_probe(pid_t pid, struct container *c)
{
    int nested, ipc, mnt, root, user, pidns;

    memset(c, 0, sizeof(*c));
    c->ns_pid = container_ns_pid(pid, &nested);
    if (c->ns_pid == 0) c->ns_pid = pid;
    pidns = container_ns_differs(pid, "pid");
    ipc = container_ns_differs(pid, "ipc");
    mnt = container_ns_differs(pid, "mnt");
    root = container_root_differs(pid);
    user = container_ns_differs(pid, "user");
    c->pid_ns = nested || pidns == 1;
    if (!c->pid_ns) c->ns_pid = pid;
    /* Not ours to look at: what NSpid says decides for all of them. */
    c->ipc_ns = ipc < 0 ? c->pid_ns : ipc;
    c->mnt_ns = mnt < 0 || root < 0 ? c->pid_ns : (mnt || root);
    c->user_ns = user < 0 ? c->pid_ns : user;
    c->other = c->pid_ns || c->ipc_ns || c->mnt_ns || c->user_ns;
    c->unsure = ipc < 0 || mnt < 0 || root < 0 || user < 0;
}

/* ---- privileges ---- */

int container_privileged(void)
{
    char line[256];
    unsigned long long caps = 0;
    int found = 0;
    FILE *f = fopen("/proc/self/status", "re");

    if (!f) return geteuid() == 0;
    while (!found && fgets(line, sizeof(line), f)) found = sscanf(line, "CapEff: %llx", &caps) == 1;
    fclose(f);
    if (!found) return geteuid() == 0;
    return (caps >> CONTAINER_CAP_SYS_ADMIN & 1) && (caps >> CONTAINER_CAP_SYS_PTRACE & 1);
}

/* "PID, IPC and mount" for the namespaces known to differ. */
static void container_ns_names(const struct container *c, char *out, size_t size)
{
    const char *names[4];
    size_t n = 0, i, len = 0;

    if (c->pid_ns) names[n++] = "PID";
    if (c->ipc_ns && !c->unsure) names[n++] = "IPC";
    if (c->mnt_ns && !c->unsure) names[n++] = "mount";
    if (c->user_ns && !c->unsure) names[n++] = "user";
    out[0] = '\0';
    for (i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%s",
                                i == 0           ? ""
                                    : i + 1 == n ? " and "
                                                 : ", ",
                                names[i]);
}

void container_refusal(pid_t pid, const struct container *c, char *errstr, size_t size)
{
    char names[64];

    container_ns_names(c, names, sizeof(names));
    snprintf(errstr, size,
             "process %d runs in a container (its own %s namespace%s; pid %d inside "
             "it): tracing it from outside needs root, or the capabilities CAP_SYS_ADMIN and "
             "CAP_SYS_PTRACE. Run rbtrace as root (sudo rbtrace -p %d), or inside the container "
             "(docker exec -it CONTAINER rbtrace -p %d, kubectl exec -it POD -- rbtrace -p %d)",
             (int)pid, names, strchr(names, ' ') ? "s" : "", (int)c->ns_pid, (int)pid,
             (int)c->ns_pid, (int)c->ns_pid);
}

int container_join_ipc(pid_t pid, const struct container *c, char *errstr, size_t size)
{
    char path[64];
    int fd, err;

    if (!c->ipc_ns) return 0;
    snprintf(path, sizeof(path), "/proc/%d/ns/ipc", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && setns(fd, CLONE_NEWIPC) == 0) {
        close(fd);
        return 0;
    }
    err = errno;
    if (fd >= 0) close(fd);
    if (err == EPERM || err == EACCES) container_refusal(pid, c, errstr, size);
    else
        snprintf(errstr, size, "could not join the IPC namespace of process %d (%s): %s", (int)pid,
                 path, strerror(err));
    return -1;
}

/* ---- the socket's directory ---- */

/* The value of TMPDIR in pid's environment (its first), into out; "/tmp"
 * if none, or if it is not an absolute path short enough for a socket. */
static void container_tmpdir(pid_t pid, char *out, size_t size)
{
    char path[64], *env = NULL, *p;
    size_t len = 0, cap = 0;
    int fd;

    snprintf(out, size, "/tmp");
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return;
    for (;;) {
        ssize_t n;

        if (len + 1 >= cap) {
            char *grown;
            if (cap >= CONTAINER_ENVIRON_MAX || !(grown = realloc(env, cap ? cap * 2 : 16384)))
                break;
            env = grown;
            cap = cap ? cap * 2 : 16384;
        }
        n = read(fd, env + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (!env) return;
    env[len] = '\0';
    for (p = env; p < env + len; p += strlen(p) + 1) {
        if (strncmp(p, "TMPDIR=", 7) != 0) continue;
        p += 7;
        if (p[0] == '/' && strlen(p) <= CONTAINER_TMPDIR_MAX) snprintf(out, size, "%s", p);
        break;
    }
    free(env);
}

/* tmp's bytes, escaped (the app's text), into out (size bytes). */
static void container_show(const char *tmp, char *out, size_t size)
{
    size_t len = strnlen(tmp, CONTAINER_TMPDIR_MAX);

    if (len * ESCAPE_MAX_PER_BYTE >= size) len = (size - 1) / ESCAPE_MAX_PER_BYTE;
    out[escape_text(out, tmp, len, 0)] = '\0';
}

/*
 * tmp (an absolute path as pid sees it) opened under root_fd, one
 * directory at a time, following no symbolic link and no "..". The fd, or
 * -1 with a message in errstr. root_fd is closed either way.
 */
static int container_walk(int root_fd, pid_t pid, const char *tmp, char *errstr, size_t size)
{
    char copy[CONTAINER_TMPDIR_MAX + 1], shown[CONTAINER_TMPDIR_MAX * ESCAPE_MAX_PER_BYTE + 1];
    char *part, *save = NULL;
    int fd = root_fd;

    snprintf(copy, sizeof(copy), "%s", tmp);
    for (part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
        int next;

        if (!strcmp(part, ".")) continue;
        next = strcmp(part, "..")
            ? openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            : -1;
        if (next < 0) {
            int err = strcmp(part, "..") ? errno : ELOOP;

            close(fd);
            container_show(tmp, shown, sizeof(shown));
            if (err == ELOOP || err == ENOTDIR)
                snprintf(
                    errstr, size,
                    "the temporary directory of process %d (%s, in its container) "
                    "is reached through a symbolic link or \"..\", which rbtrace does not follow "
                    "inside a container: give the app a TMPDIR that is a real directory, or run "
                    "rbtrace inside the container",
                    (int)pid, shown);
            else
                snprintf(errstr, size,
                         "could not open the temporary directory of process %d (%s, "
                         "in its container, from the host /proc/%d/root%s): %s",
                         (int)pid, shown, (int)pid, shown, strerror(err));
            return -1;
        }
        close(fd);
        fd = next;
    }
    return fd;
}

int container_open_tmpdir(pid_t pid, struct container_dir *d, char *errstr, size_t size)
{
    char root[64];
    int root_fd;

    d->parent_fd = d->dir_fd = -1;
    d->name[0] = d->host_path[0] = d->app_path[0] = '\0';
    container_tmpdir(pid, d->tmp, sizeof(d->tmp));
    snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
    if ((root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        snprintf(errstr, size, "could not open the root of process %d (%s): %s", (int)pid, root,
                 strerror(errno));
        return -1;
    }
    d->parent_fd = container_walk(root_fd, pid, d->tmp, errstr, size);
    return d->parent_fd < 0 ? -1 : 0;
}

int container_make_dir(pid_t pid, struct container_dir *d, char *errstr, size_t size)
{
    char shown[CONTAINER_TMPDIR_MAX * ESCAPE_MAX_PER_BYTE + 1], templ[64];
    const char *tmp = d->tmp;
    int err;

    /* mkdtemp through the directory's fd: its random name, made only if
     * nothing is there, as for a target beside us. */
    snprintf(templ, sizeof(templ), "/proc/self/fd/%d/rbtrace-XXXXXX", d->parent_fd);
    if (!mkdtemp(templ)) {
        err = errno;
        container_show(tmp, shown, sizeof(shown));
        snprintf(errstr, size,
                 "could not create a directory in the temporary directory of process "
                 "%d (%s, in its container; from the host /proc/%d/root%s): %s (give the app a "
                 "writable TMPDIR, or run rbtrace inside the container)",
                 (int)pid, shown, (int)pid, shown, strerror(err));
        return -1;
    }
    snprintf(d->name, sizeof(d->name), "%s", strrchr(templ, '/') + 1);
    d->dir_fd = openat(d->parent_fd, d->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d->dir_fd < 0) {
        err = errno;
        unlinkat(d->parent_fd, d->name, AT_REMOVEDIR);
        d->name[0] = '\0';
        snprintf(errstr, size, "could not open the socket directory in process %d's container: %s",
                 (int)pid, strerror(err));
        return -1;
    }
    snprintf(d->app_path, sizeof(d->app_path), "%s%s%s", tmp,
             tmp[strlen(tmp) - 1] == '/' ? "" : "/", d->name);
    snprintf(d->host_path, sizeof(d->host_path), "/proc/%d/root%s", (int)pid, d->app_path);
    return 0;
}

/* ---- acting as the app's user ---- */

/* Our effective gid before container_become. */
static gid_t container_saved_egid;

/* pid's effective uid and gid, as we see them; -1 if /proc does not say. */
static int container_ids(pid_t pid, uid_t *uid, gid_t *gid)
{
    char path[64], line[256];
    unsigned long r, e;
    int found = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "re")) == NULL) return -1;
    while (found != 3 && fgets(line, sizeof(line), f)) {
        if (sscanf(line, "Uid: %lu %lu", &r, &e) == 2) {
            *uid = (uid_t)e;
            found |= 1;
        } else if (sscanf(line, "Gid: %lu %lu", &r, &e) == 2) {
            *gid = (gid_t)e;
            found |= 2;
        }
    }
    fclose(f);
    return found == 3 ? 0 : -1;
}

int container_become(pid_t pid, char *errstr, size_t size)
{
    uid_t uid;
    gid_t gid;

    if (container_ids(pid, &uid, &gid) != 0) {
        snprintf(errstr, size, "could not read the user of process %d: %s", (int)pid,
                 strerror(errno));
        return -1;
    }
    container_saved_egid = getegid();
    if (setresgid((gid_t)-1, gid, (gid_t)-1) < 0) {
        snprintf(errstr, size, "could not take the group of process %d (gid %u): %s", (int)pid,
                 (unsigned)gid, strerror(errno));
        return -1;
    }
    if (setresuid((uid_t)-1, uid, (uid_t)-1) < 0) {
        snprintf(errstr, size, "could not take the user of process %d (uid %u): %s", (int)pid,
                 (unsigned)uid, strerror(errno));
        container_unbecome();
        return -1;
    }
    return 0;
}

void container_unbecome(void)
{
    /* Root's real and saved ids remain: this cannot fail; if it did, we
     * would go on as another user: stop there. */
    if (setresuid((uid_t)-1, 0, (uid_t)-1) < 0 ||
        setresgid((gid_t)-1, container_saved_egid, (gid_t)-1) < 0) {
        fprintf(stderr, "rbtrace: could not become root again: %s\n", strerror(errno));
        abort();
    }
}
