/*
 * alloc_report.c - --alloc's report at the end of a trace: the traced
 * methods and the sites that allocated most (alloc_report.h).
 */
#include <stdlib.h>
#include <string.h>
#include "alloc_report.h"
#include "cli.h"
#include "escape.h"

#define ALLOC_REPORT_METHODS_MIN 64

void alloc_report_init(struct alloc_report *a, unsigned long sample)
{
    memset(a, 0, sizeof(*a));
    a->sample = sample;
}

void alloc_report_free(struct alloc_report *a)
{
    size_t i;

    for (i = 0; i < a->methods_cap; i++) free(a->methods[i].name);
    free(a->methods);
    for (i = 0; i < a->n_sites; i++) {
        free(a->sites[i].klass);
        free(a->sites[i].path);
        free(a->sites[i].label);
    }
    free(a->sites);
    alloc_report_init(a, a->sample);
}

static uint64_t alloc_report_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    size_t i;

    for (i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static size_t alloc_report_slot(const struct alloc_report_method *m, size_t cap, const char *name,
                                size_t len)
{
    size_t i = (size_t)alloc_report_hash(name, len) & (cap - 1);

    while (m[i].name && (m[i].len != len || memcmp(m[i].name, name, len) != 0))
        i = (i + 1) & (cap - 1);
    return i;
}

static int alloc_report_grow(struct alloc_report *a)
{
    size_t cap = a->methods_cap ? a->methods_cap * 2 : ALLOC_REPORT_METHODS_MIN, i;
    struct alloc_report_method *m = calloc(cap, sizeof(*m));

    if (!m) return CLI_ERR;
    for (i = 0; i < a->methods_cap; i++)
        if (a->methods[i].name)
            m[alloc_report_slot(m, cap, a->methods[i].name, a->methods[i].len)] = a->methods[i];
    free(a->methods);
    a->methods = m;
    a->methods_cap = cap;
    return CLI_OK;
}

int alloc_report_method(struct alloc_report *a, const char *name, size_t len, uint64_t count)
{
    struct alloc_report_method *m;

    if ((a->n_methods + 1) * 2 > a->methods_cap && alloc_report_grow(a) != CLI_OK) return CLI_ERR;
    m = &a->methods[alloc_report_slot(a->methods, a->methods_cap, name, len)];
    if (!m->name) {
        if (!(m->name = malloc(len + 1))) return CLI_ERR;
        memcpy(m->name, name, len);
        m->name[len] = '\0';
        m->len = len;
        a->n_methods++;
    }
    m->count += count;
    m->calls++;
    return CLI_OK;
}

/* s escaped, NUL-ended, in memory of its own; NULL when out of memory. */
static char *alloc_report_escaped(const struct rbtrace_str *s)
{
    char *out = malloc((size_t)s->len * ESCAPE_MAX_PER_BYTE + 1);

    if (out) out[escape_text(out, s->ptr, s->len, 0)] = '\0';
    return out;
}

/* A new site at the end (fields left NULL), or NULL when out of memory. */
static struct alloc_report_site *alloc_report_new_site(struct alloc_report *a)
{
    if (a->n_sites == a->sites_cap) {
        size_t cap = a->sites_cap ? a->sites_cap * 2 : 64;
        struct alloc_report_site *grown = realloc(a->sites, cap * sizeof(*grown));

        if (!grown) return NULL;
        a->sites = grown;
        a->sites_cap = cap;
    }
    memset(&a->sites[a->n_sites], 0, sizeof(a->sites[0]));
    return &a->sites[a->n_sites++]; /* counted even if its fields are short of memory: freed */
}

int alloc_report_site(struct alloc_report *a, const struct rbtrace_event *ev)
{
    struct alloc_report_site *s;

    if (a->n_sites >= ALLOC_REPORT_SITES_MAX) return CLI_OK;
    if (!(s = alloc_report_new_site(a))) return CLI_ERR;
    s->count = ev->count;
    s->line = ev->line;
    s->klass = alloc_report_escaped(&ev->text);
    s->path = alloc_report_escaped(&ev->text2);
    s->label = alloc_report_escaped(&ev->text3);
    return s->klass && s->path && s->label ? CLI_OK : CLI_ERR;
}

static int alloc_report_same_site(const struct alloc_report_site *s, const char *klass,
                                  const char *path, uint64_t line, const char *label)
{
    return s->klass && s->path && s->label && s->line == line && strcmp(s->klass, klass) == 0 &&
        strcmp(s->path, path) == 0 && strcmp(s->label, label) == 0;
}

int alloc_report_add_site(struct alloc_report *a, uint64_t count, const char *klass,
                          const char *path, uint64_t line, const char *label)
{
    struct alloc_report_site *s;
    size_t i;

    for (i = 0; i < a->n_sites; i++) /* a few hundred at most per process */
        if (alloc_report_same_site(&a->sites[i], klass, path, line, label)) {
            s = &a->sites[i];
            s->count = s->count > UINT64_MAX - count ? UINT64_MAX : s->count + count;
            return CLI_OK;
        }
    if (!(s = alloc_report_new_site(a))) return CLI_ERR;
    s->count = count;
    s->line = line;
    s->klass = strdup(klass);
    s->path = strdup(path);
    s->label = strdup(label);
    return s->klass && s->path && s->label ? CLI_OK : CLI_ERR;
}

const char *alloc_report_class(const struct alloc_report_site *s)
{
    return s->klass[0] ? s->klass : "(hidden)";
}

/* Most first; equal counts by name, for a stable report. */
static int alloc_report_by_count(const void *x, const void *y)
{
    const struct alloc_report_method *a = *(const struct alloc_report_method *const *)x;
    const struct alloc_report_method *b = *(const struct alloc_report_method *const *)y;

    if (a->count != b->count) return a->count < b->count ? 1 : -1;
    return strcmp(a->name, b->name);
}

static void alloc_report_write_methods(const struct alloc_report *a, FILE *out)
{
    const struct alloc_report_method **order;
    size_t i, n = 0;

    if (!a->n_methods) return;
    if (!(order = malloc(a->n_methods * sizeof(*order)))) return;
    for (i = 0; i < a->methods_cap; i++)
        if (a->methods[i].name) order[n++] = &a->methods[i];
    qsort(order, n, sizeof(*order), alloc_report_by_count);
    fputs("*** traced methods that allocated most (inside their calls, callees included):\n", out);
    for (i = 0; i < n && i < ALLOC_REPORT_ROWS; i++)
        fprintf(out, "  %12llu  %s  (%llu call%s)\n", (unsigned long long)order[i]->count,
                order[i]->name, (unsigned long long)order[i]->calls,
                order[i]->calls == 1 ? "" : "s");
    free(order);
}

/* Most first; equal counts in the order they came (the target sends its
 * sites most first: one process's report keeps its order). */
static int alloc_report_site_by_count(const void *x, const void *y)
{
    const struct alloc_report_site *a = *(const struct alloc_report_site *const *)x;
    const struct alloc_report_site *b = *(const struct alloc_report_site *const *)y;

    if (a->count != b->count) return a->count < b->count ? 1 : -1;
    return a < b ? -1 : a > b ? 1 : 0;
}

static void alloc_report_write_sites(const struct alloc_report *a, FILE *out)
{
    const struct alloc_report_site **order;
    size_t i, n;

    if (!a->n_sites) return;
    if (!(order = malloc(a->n_sites * sizeof(*order)))) return;
    for (i = 0; i < a->n_sites; i++) order[i] = &a->sites[i];
    qsort(order, a->n_sites, sizeof(*order), alloc_report_site_by_count);
    fputs("*** sites that allocated most:\n", out);
    for (i = 0, n = 0; i < a->n_sites && n < ALLOC_REPORT_ROWS; i++) {
        const struct alloc_report_site *s = order[i];

        if (!s->klass || !s->path || !s->label) continue;
        fprintf(out, "  %12llu  %s  ", (unsigned long long)s->count, alloc_report_class(s));
        if (s->line) fprintf(out, "%s:%llu", s->path, (unsigned long long)s->line);
        else fputs("(no Ruby frame)", out);
        if (s->label[0]) fprintf(out, "  in %s", s->label);
        fputc('\n', out);
        n++;
    }
    free(order);
}

void alloc_report_write(const struct alloc_report *a, FILE *out)
{
    if (!a->n_methods && !a->n_sites) return;
    if (a->sample == 1) fputs("*** allocations (--alloc-sample 1: every object counted)\n", out);
    else
        fprintf(out,
                "*** allocations (--alloc-sample %lu: one object in %lu seen, counted as %lu)\n",
                a->sample, a->sample, a->sample);
    alloc_report_write_methods(a, out);
    alloc_report_write_sites(a, out);
}
