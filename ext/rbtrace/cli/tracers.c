/*
 * tracers.c - finds a tracer file (-c) and reads it into selectors.
 *
 * The file is read whole into one buffer (at most TRACERS_FILE_MAX bytes);
 * each selector is cut out of it in place (comment and blanks removed,
 * NUL-terminated), so the selectors live as long as the buffer. Every
 * error names the file, and the line when one is at fault.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "tracers.h"

#define TRACERS_SUFFIX ".tracer"
#define TRACERS_SUFFIX_LEN (sizeof(TRACERS_SUFFIX) - 1)
#define TRACERS_PATH_MAX 4096
#define TRACERS_READ_CHUNK 65536

/* What the messages say a line should be. */
#define TRACERS_SELECTOR_FORMS \
    "meth, Class#meth, Class.meth, Class# or Class., optionally (expressions), " \
    "?Class#meth for other versions of a library"

/* ---- the shipped directory ---- */

/* Cuts the last n components off path ("/a/b/c", 2 -> "/a"). */
static int tracers_strip_components(char *path, int n)
{
    while (n-- > 0) {
        char *slash = strrchr(path, '/');
        if (!slash || slash == path) return CLI_ERR;
        *slash = '\0';
    }
    return CLI_OK;
}

int tracers_dir(char *dir, size_t len, char *errstr, size_t errlen)
{
    const char *env = getenv(TRACERS_DIR_ENV);
    char exe[TRACERS_PATH_MAX];
    ssize_t n;

    if (env && *env) {
        if (strlen(env) >= len) {
            snprintf(errstr, errlen, "%s is too long a path", TRACERS_DIR_ENV);
            return CLI_ERR;
        }
        strcpy(dir, env);
        return CLI_OK;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n < 0 || (size_t)n >= sizeof(exe) - 1) {
        snprintf(errstr, errlen,
                 "cannot find the shipped tracers: /proc/self/exe: %s; set %s "
                 "to rbtrace's tracers directory",
                 n < 0 ? strerror(errno) : "path too long", TRACERS_DIR_ENV);
        return CLI_ERR;
    }
    exe[n] = '\0';
    /* .../lib/rbtrace/rbtrace-client -> .../tracers */
    if (tracers_strip_components(exe, 3) != CLI_OK ||
        (size_t)snprintf(dir, len, "%s/tracers", exe) >= len) {
        snprintf(errstr, errlen,
                 "cannot find the shipped tracers from the client's path; set %s "
                 "to rbtrace's tracers directory",
                 TRACERS_DIR_ENV);
        return CLI_ERR;
    }
    return CLI_OK;
}

static int tracers_compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int tracers_has_suffix(const char *name)
{
    size_t len = strlen(name);

    return len > TRACERS_SUFFIX_LEN && !strcmp(name + len - TRACERS_SUFFIX_LEN, TRACERS_SUFFIX);
}

/*
 * Writes "a, b, c" (the shipped names, sorted) into out. CLI_OK, or
 * CLI_ERR with why the directory could not be listed in out.
 */
static int tracers_list(const char *dir, char *out, size_t outlen)
{
    DIR *d = opendir(dir);
    char **names = NULL;
    size_t n = 0, cap = 0, i, used = 0;
    struct dirent *e;
    int rc = CLI_ERR;

    if (!d) {
        snprintf(out, outlen, "cannot open %s: %s", dir, strerror(errno));
        return CLI_ERR;
    }
    for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
        if (e->d_name[0] == '.' || !tracers_has_suffix(e->d_name)) continue;
        if (n == cap) {
            char **more = realloc(names, (cap ? cap * 2 : 16) * sizeof(*names));
            if (!more) goto nomem;
            names = more;
            cap = cap ? cap * 2 : 16;
        }
        if (!(names[n] = strdup(e->d_name))) goto nomem;
        names[n][strlen(names[n]) - TRACERS_SUFFIX_LEN] = '\0';
        n++;
    }
    if (errno) {
        snprintf(out, outlen, "cannot read %s: %s", dir, strerror(errno));
        goto done;
    }
    if (n == 0) {
        snprintf(out, outlen, "%s holds no .tracer files", dir);
        goto done;
    }
    qsort(names, n, sizeof(*names), tracers_compare_names);
    out[0] = '\0';
    for (i = 0; i < n && used < outlen; i++) {
        int w = snprintf(out + used, outlen - used, "%s%s", i ? ", " : "", names[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
    rc = CLI_OK;
    goto done;
nomem:
    snprintf(out, outlen, "out of memory");
done:
    for (i = 0; i < n; i++) free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

static void tracers_unknown(const char *name, const char *dir, char *errstr, size_t errlen)
{
    char list[CLI_ERRLEN / 2];

    if (tracers_list(dir, list, sizeof(list)) == CLI_OK)
        snprintf(errstr, errlen,
                 "unknown tracer '%s': the shipped tracers are %s; to read a "
                 "file of your own, give its path (./%s)",
                 name, list, name);
    else
        snprintf(errstr, errlen,
                 "unknown tracer '%s', and the shipped tracers cannot be listed "
                 "(%s): set %s to rbtrace's tracers directory, or give the path of a file",
                 name, list, TRACERS_DIR_ENV);
}

static int tracers_is_path(const char *arg)
{
    return strchr(arg, '/') != NULL || tracers_has_suffix(arg);
}

static int tracers_valid_name(const char *name)
{
    if (!*name) return 0;
    for (; *name; name++)
        if (!isalnum((unsigned char)*name) && *name != '_' && *name != '-') return 0;
    return 1;
}

/* ---- reading ---- */

/* Reads fd whole into a new NUL-terminated buffer; *size its length. */
static int tracers_slurp(int fd, const char *path, char **text, size_t *size, char *errstr,
                         size_t errlen)
{
    size_t len = 0, cap = 0;
    char *buf = NULL;

    for (;;) {
        ssize_t n;

        if (cap - len < TRACERS_READ_CHUNK + 1) {
            char *more = realloc(buf, cap + TRACERS_READ_CHUNK + 1);
            if (!more) {
                snprintf(errstr, errlen, "out of memory reading %s", path);
                goto fail;
            }
            buf = more;
            cap += TRACERS_READ_CHUNK + 1;
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(errstr, errlen, "cannot read tracer file %s: %s", path, strerror(errno));
            goto fail;
        }
        if (n == 0) break;
        len += (size_t)n;
        if (len > TRACERS_FILE_MAX) {
            snprintf(errstr, errlen, "tracer file %s is larger than %d KiB: is it a tracer file?",
                     path, TRACERS_FILE_MAX / 1024);
            goto fail;
        }
    }
    buf[len] = '\0';
    *text = buf;
    *size = len;
    return CLI_OK;
fail:
    free(buf);
    return CLI_ERR;
}

/* Opens path (a regular file, a pipe...) and reads it into tf->text. */
static int tracers_load(struct tracer_file *tf, const char *path, size_t *size, char *errstr,
                        size_t errlen)
{
    struct stat st;
    int fd, rc;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(errstr, errlen, "cannot open tracer file %s: %s%s", path, strerror(errno),
                 errno == EACCES ? " (make it readable by you)" : "");
        return CLI_ERR;
    }
    if (fstat(fd, &st) < 0) {
        snprintf(errstr, errlen, "cannot stat tracer file %s: %s", path, strerror(errno));
        close(fd);
        return CLI_ERR;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(errstr, errlen, "%s is a directory: give a tracer file (selectors, one a line)",
                 path);
        close(fd);
        return CLI_ERR;
    }
    rc = tracers_slurp(fd, path, &tf->text, size, errstr, errlen);
    if (close(fd) < 0 && rc == CLI_OK) {
        snprintf(errstr, errlen, "cannot read tracer file %s: %s", path, strerror(errno));
        rc = CLI_ERR;
    }
    return rc;
}

/* ---- parsing ---- */

/* Ends line at its comment: a '#' at its start or after a blank, outside
 * parentheses and quotes (String#gsub, "#{x}" are not comments). */
static void tracers_strip_comment(char *line)
{
    char quote = 0;
    int depth = 0;
    char *p;

    for (p = line; *p; p++) {
        if (quote) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == quote) quote = 0;
        } else if (*p == '"' || *p == '\'') {
            quote = *p;
        } else if (*p == '(') {
            depth++;
        } else if (*p == ')') {
            if (depth > 0) depth--;
        } else if (*p == '#' && depth == 0 && (p == line || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            return;
        }
    }
}

/* Trims blanks off both ends of line, in place; returns its new start. */
static char *tracers_trim(char *line)
{
    char *end = line + strlen(line);

    while (isspace((unsigned char)*line)) line++;
    while (end > line && isspace((unsigned char)end[-1])) end--;
    *end = '\0';
    return line;
}

/* A method name's characters in a selector (selector.rb: [^\s#.(),], and
 * no ':' in a bare name). */
static int tracers_method_char(unsigned char c, int bare)
{
    return !isspace(c) && !strchr("#.(),", c) && !(bare && c == ':');
}

static int tracers_word_char(unsigned char c)
{
    return isalnum(c) || c == '_';
}

/* [A-Z]\w*(::[A-Z]\w*)*[#.][^\s#.(),]* over name[0, len) */
static int tracers_class_path_ok(const char *name, size_t len)
{
    size_t i = 0;

    for (;;) {
        if (i >= len || !isupper((unsigned char)name[i])) return 0;
        while (i < len && tracers_word_char((unsigned char)name[i])) i++;
        if (i + 1 < len && name[i] == ':' && name[i + 1] == ':') {
            i += 2;
            continue;
        }
        break;
    }
    if (i >= len || (name[i] != '#' && name[i] != '.')) return 0;
    for (i++; i < len; i++)
        if (!tracers_method_char((unsigned char)name[i], 0)) return 0;
    return 1;
}

int tracers_selector_shape_ok(const char *text)
{
    size_t len, i;
    const char *open;

    /* ?Class#meth: a line for other versions of a library (selector.h) */
    if (*text == '?') text++;
    len = strlen(text);
    open = strchr(text, '(');

    /* With expressions, the selector is what comes before them. */
    if (len > 0 && text[len - 1] == ')' && open) len = (size_t)(open - text);
    while (len > 0 && isspace((unsigned char)text[len - 1])) len--;
    if (len == 0) return 0;
    if (tracers_class_path_ok(text, len)) return 1;
    for (i = 0; i < len; i++)
        if (!tracers_method_char((unsigned char)text[i], 1)) return 0;
    return 1;
}

static int tracers_add(struct tracer_file *tf, const char *selector, size_t *cap)
{
    if (tf->n_selectors == *cap) {
        size_t n = *cap ? *cap * 2 : 32;
        const char **more = realloc(tf->selectors, n * sizeof(*more));
        if (!more) return CLI_ERR;
        tf->selectors = more;
        *cap = n;
    }
    tf->selectors[tf->n_selectors++] = selector;
    return CLI_OK;
}

/* Cuts tf->text (size bytes) into selectors, line by line. */
static int tracers_parse(struct tracer_file *tf, const char *path, size_t size, char *errstr,
                         size_t errlen)
{
    char *line = tf->text, *end = tf->text + size;
    size_t cap = 0;
    unsigned lineno = 0;

    /* A UTF-8 byte order mark, as some editors write. */
    if (size >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3)) line += 3;
    while (line < end) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        char *next = nl ? nl + 1 : end;
        size_t len = (size_t)((nl ? nl : end) - line);
        char *sel;

        lineno++;
        if (len > TRACERS_LINE_MAX) {
            snprintf(errstr, errlen, "%s:%u: line longer than %d bytes: one selector a line", path,
                     lineno, TRACERS_LINE_MAX);
            return CLI_ERR;
        }
        if (memchr(line, '\0', len)) {
            snprintf(errstr, errlen, "%s:%u: a NUL byte: is it a text file?", path, lineno);
            return CLI_ERR;
        }
        if (nl) *nl = '\0';
        tracers_strip_comment(line);
        sel = tracers_trim(line);
        line = next;
        if (!*sel) continue;
        if (!tracers_selector_shape_ok(sel)) {
            snprintf(errstr, errlen, "%s:%u: not a selector: '%.80s' (one a line: %s)", path,
                     lineno, sel, TRACERS_SELECTOR_FORMS);
            return CLI_ERR;
        }
        if (tracers_add(tf, sel, &cap) != CLI_OK) {
            snprintf(errstr, errlen, "out of memory reading %s", path);
            return CLI_ERR;
        }
    }
    if (tf->n_selectors == 0) {
        snprintf(errstr, errlen, "tracer file %s has no selectors: write one a line (%s)", path,
                 TRACERS_SELECTOR_FORMS);
        return CLI_ERR;
    }
    return CLI_OK;
}

/* ---- the file an argument names ---- */

/* Sets path to the file arg names; CLI_ERR (message in errstr) for an
 * unknown name. */
static int tracers_resolve(const char *arg, char *path, size_t len, char *errstr, size_t errlen)
{
    char dir[TRACERS_PATH_MAX];
    struct stat st;

    if (tracers_is_path(arg)) {
        if ((size_t)snprintf(path, len, "%s", arg) >= len) goto too_long;
        return CLI_OK;
    }
    if (tracers_dir(dir, sizeof(dir), errstr, errlen) != CLI_OK) return CLI_ERR;
    if (!tracers_valid_name(arg)) {
        tracers_unknown(arg, dir, errstr, errlen);
        return CLI_ERR;
    }
    if ((size_t)snprintf(path, len, "%s/%s%s", dir, arg, TRACERS_SUFFIX) >= len) goto too_long;
    if (stat(path, &st) < 0 && errno == ENOENT) {
        tracers_unknown(arg, dir, errstr, errlen);
        return CLI_ERR;
    }
    return CLI_OK;
too_long:
    snprintf(errstr, errlen, "tracer file path too long: %.80s...", arg);
    return CLI_ERR;
}

int tracer_file_read(struct tracer_file *tf, const char *arg, char *errstr, size_t errlen)
{
    char path[TRACERS_PATH_MAX];
    size_t size = 0;

    memset(tf, 0, sizeof(*tf));
    if (tracers_resolve(arg, path, sizeof(path), errstr, errlen) != CLI_OK) return CLI_ERR;
    if (tracers_load(tf, path, &size, errstr, errlen) != CLI_OK) return CLI_ERR;
    return tracers_parse(tf, path, size, errstr, errlen);
}

void tracer_file_free(struct tracer_file *tf)
{
    free(tf->text);
    free(tf->selectors);
    tf->text = NULL;
    tf->selectors = NULL;
    tf->n_selectors = 0;
}
