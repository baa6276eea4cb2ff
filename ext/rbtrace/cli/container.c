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
#include <grp.h> /* setgroups */
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
 * tmp (an absolute path as pid sees it) opened under root_fd (which stays
 * open), one directory at a time, following no symbolic link and no "..".
 * The fd, or -1 with errno (ELOOP for a link or "..").
 */
static int container_walk(int root_fd, const char *tmp)
{
    char copy[CONTAINER_TMPDIR_MAX + 1], *part, *save = NULL;
    int fd = root_fd;

    snprintf(copy, sizeof(copy), "%s", tmp);
    for (part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
        int next, err;

        if (!strcmp(part, ".")) continue;
        next = strcmp(part, "..")
            ? openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            : (errno = ELOOP, -1);
        err = errno;
        if (fd != root_fd) close(fd);
        if (next < 0) {
            errno = err == ENOTDIR ? ELOOP : err;
            return -1;
        }
        fd = next;
    }
    return fd == root_fd ? fcntl(root_fd, F_DUPFD_CLOEXEC, 0) : fd;
}

int container_open_root(pid_t pid, struct container_dir *d, char *errstr, size_t size)
{
    char root[64];

    d->root_fd = d->parent_fd = d->dir_fd = -1;
    d->name[0] = d->app_path[0] = '\0';
    container_tmpdir(pid, d->tmp, sizeof(d->tmp));
    snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
    if ((d->root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        snprintf(errstr, size, "could not open the root of process %d (%s): %s", (int)pid, root,
                 strerror(errno));
        return -1;
    }
    return 0;
}

/* mkdtemp in tmp (reached from d->root_fd), through its fd: its random
 * name, made only if nothing is there, as for a target beside us. 0 (d's
 * parent_fd, name and app_path set), or -1 with errno. */
static int container_mkdtemp(struct container_dir *d, const char *tmp)
{
    char templ[64];
    int fd = container_walk(d->root_fd, tmp), err;

    if (fd < 0) return -1;
    snprintf(templ, sizeof(templ), "/proc/self/fd/%d/rbtrace-XXXXXX", fd);
    if (!mkdtemp(templ)) {
        err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    d->parent_fd = fd;
    snprintf(d->name, sizeof(d->name), "%s", strrchr(templ, '/') + 1);
    snprintf(d->app_path, sizeof(d->app_path), "%s%s%s", tmp,
             tmp[strlen(tmp) - 1] == '/' ? "" : "/", d->name);
    return 0;
}

/* Where Ruby's Dir.tmpdir goes on from a TMPDIR it cannot use. */
static int container_unusable(int err)
{
    return err == EACCES || err == EPERM || err == EROFS || err == ENOENT;
}

int container_make_dir(pid_t pid, struct container_dir *d, char *errstr, size_t size)
{
    char shown[CONTAINER_TMPDIR_MAX * ESCAPE_MAX_PER_BYTE + 1], also[128] = "";
    int err = 0, rc = container_mkdtemp(d, d->tmp);

    if (rc < 0) err = errno;
    /* A TMPDIR the app's user cannot write (we act as that user): /tmp,
     * as the app's own Dir.tmpdir does. A link is refused, not skipped. */
    if (rc < 0 && container_unusable(err) && strcmp(d->tmp, "/tmp") != 0) {
        if ((rc = container_mkdtemp(d, "/tmp")) < 0)
            snprintf(also, sizeof(also), ", nor in its /tmp: %s", strerror(errno));
    }
    close(d->root_fd);
    d->root_fd = -1;
    if (rc < 0) {
        container_show(d->tmp, shown, sizeof(shown));
        if (err == ELOOP)
            snprintf(errstr, size,
                     "the temporary directory of process %d (%s, in its container) "
                     "is reached through a symbolic link or \"..\", which rbtrace does not follow "
                     "inside a container: give the app a TMPDIR that is a real directory, or run "
                     "rbtrace inside the container",
                     (int)pid, shown);
        else
            snprintf(errstr, size,
                     "could not create a directory, as the app's user, in the temporary directory "
                     "of process %d (%s, in its container; from the host /proc/%d/root%s): %s%s "
                     "(give the app a TMPDIR its user can write, or run rbtrace inside the "
                     "container)",
                     (int)pid, shown, (int)pid, shown, strerror(err), also);
        return -1;
    }
    /* On failure d->name stays: the caller removes the directory. */
    d->dir_fd = openat(d->parent_fd, d->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d->dir_fd < 0) {
        snprintf(errstr, size, "could not open the socket directory in process %d's container: %s",
                 (int)pid, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- acting as the app's user ---- */

/* Our effective gid and groups before container_become. */
static gid_t container_saved_egid;
static gid_t *container_saved_groups;
static int container_saved_ngroups;

/* The groups of a "Groups:" line's rest, into *groups (malloc'd; NULL for
 * none) and *n. 0, or -1 (errno). */
static int container_groups(const char *p, gid_t **groups, int *n)
{
    const char *q;
    char *end;
    int count = 0;

    for (q = p; strtoul(q, &end, 10), end != q; q = end) count++;
    *n = 0;
    *groups = NULL;
    if (count == 0) return 0;
    if (!(*groups = malloc((size_t)count * sizeof(**groups)))) return -1;
    for (q = p; *n < count; q = end) (*groups)[(*n)++] = (gid_t)strtoul(q, &end, 10);
    return 0;
}

/* pid's effective uid and gid and its supplementary groups, as we see them
 * (*groups malloc'd, *n of them); -1 (errno) if /proc does not say. */
static int container_ids(pid_t pid, uid_t *uid, gid_t *gid, gid_t **groups, int *n)
{
    char path[64], *line = NULL;
    size_t cap = 0;
    unsigned long r, e;
    int found = 0;
    FILE *f;

    *groups = NULL;
    *n = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "re")) == NULL) return -1;
    errno = ENODATA; /* if the lines are not there */
    while (found != 7 && getline(&line, &cap, f) > 0) {
        if (sscanf(line, "Uid: %lu %lu", &r, &e) == 2) {
            *uid = (uid_t)e;
            found |= 1;
        } else if (sscanf(line, "Gid: %lu %lu", &r, &e) == 2) {
            *gid = (gid_t)e;
            found |= 2;
        } else if (!strncmp(line, "Groups:", sizeof("Groups:") - 1)) {
            if (container_groups(line + sizeof("Groups:") - 1, groups, n) < 0) break;
            found |= 4;
        }
    }
    free(line);
    fclose(f);
    if (found == 7) return 0;
    free(*groups);
    *groups = NULL;
    return -1;
}

/* Our groups into container_saved_groups. 0, or -1 (errno). */
static int container_save_groups(void)
{
    int n = getgroups(0, NULL);

    container_saved_groups = NULL;
    container_saved_ngroups = 0;
    if (n <= 0) return n;
    if (!(container_saved_groups = malloc((size_t)n * sizeof(gid_t)))) return -1;
    if ((container_saved_ngroups = getgroups(n, container_saved_groups)) < 0) {
        free(container_saved_groups);
        container_saved_groups = NULL;
        return -1;
    }
    return 0;
}

int container_become(pid_t pid, char *errstr, size_t size)
{
    uid_t uid = 0;
    gid_t gid = 0, *groups = NULL;
    int n = 0;

    if (container_ids(pid, &uid, &gid, &groups, &n) != 0) {
        snprintf(errstr, size, "could not read the user of process %d: %s", (int)pid,
                 strerror(errno));
        return -1;
    }
    container_saved_egid = getegid();
    if (container_save_groups() != 0) {
        snprintf(errstr, size, "could not read our groups: %s", strerror(errno));
        free(groups);
        return -1;
    }
    /* The groups first: changing them takes root (CAP_SETGID). */
    if (setgroups((size_t)n, groups) < 0) {
        snprintf(errstr, size, "could not take the groups of process %d: %s", (int)pid,
                 strerror(errno));
        free(groups);
        container_unbecome();
        return -1;
    }
    free(groups);
    if (setresgid((gid_t)-1, gid, (gid_t)-1) < 0) {
        snprintf(errstr, size, "could not take the group of process %d (gid %u): %s", (int)pid,
                 (unsigned)gid, strerror(errno));
        container_unbecome();
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
        setresgid((gid_t)-1, container_saved_egid, (gid_t)-1) < 0 ||
        setgroups((size_t)container_saved_ngroups, container_saved_groups) < 0) {
        fprintf(stderr, "rbtrace: could not become root again: %s\n", strerror(errno));
        abort();
    }
    free(container_saved_groups);
    container_saved_groups = NULL;
    container_saved_ngroups = 0;
}
