/*
 * reports.c - turns a report's options into the Ruby code the target runs
 * (a call of one RBTrace::Reports method). No I/O but getcwd: unit-tested
 * in test/c/test_reports.c.
 *
 * A file name goes into the code as hex, decoded by the target
 * (['2f746d70'].pack('H*')): no quoting of the user's bytes, whatever
 * they are.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "reports.h"

int reports_is_report(enum options_mode mode)
{
    switch (mode) {
    case OPTIONS_MODE_BACKTRACES:
    case OPTIONS_MODE_BACKTRACE:
    case OPTIONS_MODE_MEMORY:
    case OPTIONS_MODE_HEAPDUMP:
    case OPTIONS_MODE_SHAPESDUMP:
    case OPTIONS_MODE_FORK:
        return 1;
    default:
        return 0;
    }
}

const char *reports_option(enum options_mode mode)
{
    switch (mode) {
    case OPTIONS_MODE_BACKTRACES:
        return "-b";
    case OPTIONS_MODE_BACKTRACE:
        return "--backtrace";
    case OPTIONS_MODE_MEMORY:
        return "--memory";
    case OPTIONS_MODE_HEAPDUMP:
        return "--heapdump";
    case OPTIONS_MODE_SHAPESDUMP:
        return "--shapesdump";
    case OPTIONS_MODE_FORK:
        return "--fork";
    default:
        return "the report";
    }
}

int reports_timeout_ms(const struct options *o, int timeout_ms)
{
    int dump = o->mode == OPTIONS_MODE_HEAPDUMP || o->mode == OPTIONS_MODE_SHAPESDUMP;

    return dump && !o->timeout_given ? REPORTS_DUMP_TIMEOUT_MS : timeout_ms;
}

/* path, absolute: as is, or after our cwd. A new string, or NULL. */
static char *reports_absolute(const char *path, char *errstr)
{
    char *cwd, *abs;
    size_t len;

    if (path[0] == '/') {
        abs = strdup(path);
        if (!abs) snprintf(errstr, CLI_ERRLEN, "out of memory");
        return abs;
    }
    cwd = getcwd(NULL, 0);
    if (!cwd) {
        snprintf(errstr, CLI_ERRLEN,
                 "cannot make %s absolute: getcwd: %s (give an absolute "
                 "file name)",
                 path, strerror(errno));
        return NULL;
    }
    len = strlen(cwd) + 1 + strlen(path) + 1;
    abs = malloc(len);
    if (abs) snprintf(abs, len, "%s%s%s", cwd, cwd[strlen(cwd) - 1] == '/' ? "" : "/", path);
    else snprintf(errstr, CLI_ERRLEN, "out of memory");
    free(cwd);
    return abs;
}

/* "RBTrace::Reports.NAME(['HEX'].pack('H*'))", or "(nil)" without a file. */
static char *reports_dump_code(const char *name, const char *path, char *errstr)
{
    static const char digits[] = "0123456789abcdef";
    char *abs = NULL, *code, *p;
    size_t i, len;

    if (path && !(abs = reports_absolute(path, errstr))) return NULL;
    len = strlen(name) + 64 + (abs ? 2 * strlen(abs) : 0);
    code = malloc(len);
    if (!code) {
        snprintf(errstr, CLI_ERRLEN, "out of memory");
        free(abs);
        return NULL;
    }
    if (!abs) {
        snprintf(code, len, "RBTrace::Reports.%s(nil)", name);
        return code;
    }
    p = code + snprintf(code, len, "RBTrace::Reports.%s(['", name);
    for (i = 0; abs[i]; i++) {
        *p++ = digits[(unsigned char)abs[i] >> 4];
        *p++ = digits[(unsigned char)abs[i] & 0x0f];
    }
    strcpy(p, "'].pack('H*'))");
    free(abs);
    return code;
}

/* "RBTrace::Reports.NAME" with ARGS ("" for none, or "(12)"), new. */
static char *reports_call(char *errstr, const char *name, const char *args)
{
    size_t len = strlen("RBTrace::Reports.") + strlen(name) + strlen(args) + 1;
    char *code = malloc(len);

    if (code) snprintf(code, len, "RBTrace::Reports.%s%s", name, args);
    else snprintf(errstr, CLI_ERRLEN, "out of memory");
    return code;
}

int reports_code(const struct options *o, char **code, char *errstr)
{
    char frames[24];

    /* frames == 0 (all) happens only for -b without N. */
    if (o->frames) snprintf(frames, sizeof(frames), "(%u)", o->frames);
    else snprintf(frames, sizeof(frames), "(nil)");
    switch (o->mode) {
    case OPTIONS_MODE_BACKTRACES:
        *code = reports_call(errstr, "backtraces", frames);
        break;
    case OPTIONS_MODE_BACKTRACE:
        *code = reports_call(errstr, "backtrace", frames);
        break;
    case OPTIONS_MODE_MEMORY:
        *code = reports_call(errstr, "memory", "");
        break;
    case OPTIONS_MODE_HEAPDUMP:
        *code = reports_dump_code("heapdump", o->dump_path, errstr);
        break;
    case OPTIONS_MODE_SHAPESDUMP:
        *code = reports_dump_code("shapesdump", o->dump_path, errstr);
        break;
    case OPTIONS_MODE_FORK:
        *code = reports_call(errstr, "fork_copy", "");
        break;
    default:
        snprintf(errstr, CLI_ERRLEN, "not a report");
        *code = NULL;
        break;
    }
    return *code ? CLI_OK : CLI_ERR;
}
