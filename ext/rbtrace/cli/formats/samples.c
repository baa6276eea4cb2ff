/*
 * samples.c - --profile's samples for the formats (samples.h).
 *
 * Frames come named once (PROFILE_FRAME, dense ids from 1) and samples as
 * lists of frame ids, innermost first, or empty for "the same stack as
 * this thread's last". Each sample adds its weight to a node of a tree of
 * (parent, frame) under its thread's root, found through a hash table: the
 * memory is one node per distinct stack, not per sample. Each method's
 * self samples are its innermost frame's; its total counts a sample once
 * however often the method is on that stack (recursion). Frames of one
 * name (two files' "<main>", a method whose iseq was redefined) are one
 * method: their counts go to the first of them, so that a stack holding
 * both counts once in its total too.
 */
#define _GNU_SOURCE /* fwrite_unlocked */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "escape.h"
#include "samples.h"

struct samples *samples_new(void)
{
    struct samples *s = calloc(1, sizeof(*s));

    if (s) s->n_nodes = 1;
    return s;
}

void samples_free(struct samples *s)
{
    size_t i;

    if (!s) return;
    for (i = 0; i < s->n_frames; i++) {
        free(s->frames[i].name);
        free(s->frames[i].raw);
        free(s->frames[i].path);
    }
    for (i = 0; i < s->n_threads; i++) {
        free(s->threads[i].name);
        free(s->threads[i].runs);
    }
    free(s->frames);
    free(s->threads);
    free(s->nodes);
    free(s->index);
    free(s->names);
    free(s->path);
    free(s);
}

uint64_t samples_total(const struct samples *s)
{
    return s->total;
}

uint64_t samples_missed(const struct samples *s)
{
    return s->missed;
}

const uint64_t *samples_last_stack(const struct samples *s, uint64_t id, uint32_t *n)
{
    size_t i;

    for (i = 0; i < s->n_threads; i++)
        if (s->threads[i].id == id) {
            *n = s->threads[i].last_n;
            return s->threads[i].last;
        }
    *n = 0;
    return NULL;
}

const char *samples_frame_raw(const struct samples *s, uint64_t id, size_t *len)
{
    if (id >= s->n_frames || !s->frames[id].raw) return NULL;
    *len = s->frames[id].raw_len;
    return s->frames[id].raw;
}

const char *samples_state_name(unsigned state)
{
    static const char *const names[] = { "running", "GVL wait", "blocked", "GC" };

    return state <= RBTRACE_STATE_MAX ? names[state] : "(unknown)";
}

static int samples_oom(char *err)
{
    snprintf(err, RBTRACE_ERRLEN, "out of memory");
    return CLI_ERR;
}

/* ---- the tree ---- */

static size_t samples_slot(const struct samples *s, uint32_t parent, uint64_t frame)
{
    uint64_t h = (frame ^ ((uint64_t)parent << 32 | parent)) * 0x9e3779b97f4a7c15ULL;
    size_t i = (size_t)(h ^ (h >> 29)) & (s->index_cap - 1);

    while (s->index[i]) {
        const struct samples_node *n = &s->nodes[s->index[i]];
        if (n->parent == parent && n->frame == frame) break;
        i = (i + 1) & (s->index_cap - 1);
    }
    return i;
}

static int samples_grow(struct samples *s)
{
    size_t cap = s->nodes_cap ? s->nodes_cap * 2 : 256, i;
    struct samples_node *nodes;
    uint32_t *index;

    if (cap > UINT32_MAX / 2) return CLI_ERR;
    if (!(nodes = realloc(s->nodes, cap * sizeof(*nodes)))) return CLI_ERR;
    s->nodes = nodes;
    s->nodes_cap = cap;
    if (!(index = calloc(cap * 2, sizeof(*index)))) return CLI_ERR;
    free(s->index);
    s->index = index;
    s->index_cap = cap * 2;
    for (i = 1; i < s->n_nodes; i++)
        s->index[samples_slot(s, s->nodes[i].parent, s->nodes[i].frame)] = (uint32_t)i;
    return CLI_OK;
}

/* The node of frame under parent, made if new; 0 when out of memory. */
static uint32_t samples_node(struct samples *s, uint32_t parent, uint64_t frame)
{
    size_t slot;
    uint32_t n;

    if (s->index_cap) {
        slot = samples_slot(s, parent, frame);
        if (s->index[slot]) return s->index[slot];
    }
    if (s->n_nodes + 1 >= s->nodes_cap && samples_grow(s) != CLI_OK) return 0;
    n = (uint32_t)s->n_nodes++;
    s->nodes[n].parent = parent;
    s->nodes[n].frame = frame;
    s->nodes[n].weight = 0;
    s->index[samples_slot(s, parent, frame)] = n;
    return n;
}

/* ---- events ---- */

static struct samples_thread *samples_thread(struct samples *s, uint64_t id)
{
    struct samples_thread *t;
    size_t i;

    for (i = 0; i < s->n_threads; i++)
        if (s->threads[i].id == id) return &s->threads[i];
    t = realloc(s->threads, (s->n_threads + 1) * sizeof(*t));
    if (!t) return NULL;
    s->threads = t;
    t = &s->threads[s->n_threads];
    memset(t, 0, sizeof(*t));
    t->id = id;
    if (!(t->root = samples_node(s, 0, s->n_threads))) return NULL;
    s->n_threads++;
    return t;
}

/* ---- names ---- */

/* Where a frame's counts go: the first frame of its name (itself if unnamed). */
static struct samples_frame *samples_row(struct samples *s, uint64_t id)
{
    return &s->frames[s->frames[id].row ? s->frames[id].row : id];
}

/* The slot of name in the names table: the frame holding it, or a free one. */
static size_t samples_name_slot(const struct samples *s, const char *name, size_t len)
{
    uint64_t h = 14695981039346656037ULL; /* FNV-1a */
    size_t i;

    for (i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 1099511628211ULL;
    for (i = (size_t)h & (s->names_cap - 1); s->names[i]; i = (i + 1) & (s->names_cap - 1)) {
        const struct samples_frame *f = &s->frames[s->names[i]];

        if (f->len == len && memcmp(f->name, name, len) == 0) break;
    }
    return i;
}

/* Sets the frame's row: the first frame named as it is. */
static int samples_name_row(struct samples *s, uint32_t id)
{
    struct samples_frame *f = &s->frames[id];
    size_t slot;

    if ((s->names_used + 1) * 2 > s->names_cap) {
        uint32_t *old = s->names;
        size_t old_cap = s->names_cap, i;

        if (!(s->names = calloc(old_cap ? old_cap * 2 : 1024, sizeof(*s->names)))) {
            s->names = old;
            return CLI_ERR;
        }
        s->names_cap = old_cap ? old_cap * 2 : 1024;
        for (i = 0; i < old_cap; i++)
            if (old[i]) {
                const struct samples_frame *g = &s->frames[old[i]];

                s->names[samples_name_slot(s, g->name, g->len)] = old[i];
            }
        free(old);
    }
    slot = samples_name_slot(s, f->name, f->len);
    if (!s->names[slot]) {
        s->names[slot] = id;
        s->names_used++;
    }
    f->row = s->names[slot];
    return CLI_OK;
}

static int samples_frame(struct samples *s, const struct rbtrace_event *ev, char *err)
{
    size_t id = (size_t)ev->method_id, n;
    char *name, *p;

    if (ev->method_id == 0 || ev->method_id > (1u << 24)) {
        snprintf(err, RBTRACE_ERRLEN, "profile frame id %" PRIu64 " out of range", ev->method_id);
        return CLI_ERR;
    }
    if (id >= s->n_frames) {
        size_t cap = id + 1 > s->n_frames * 2 ? id + 1 : s->n_frames * 2;
        struct samples_frame *f = realloc(s->frames, cap * sizeof(*f));

        if (!f) return samples_oom(err);
        memset(f + s->n_frames, 0, (cap - s->n_frames) * sizeof(*f));
        s->frames = f;
        s->n_frames = cap;
    }
    if (!(name = malloc((size_t)ev->text.len * ESCAPE_MAX_PER_BYTE + 1))) return samples_oom(err);
    n = escape_text(name, ev->text.ptr, ev->text.len, 0);
    for (p = name; (p = memchr(p, ';', (size_t)(name + n - p))); p++) *p = ',';
    free(s->frames[id].name);
    s->frames[id].name = name;
    s->frames[id].len = n;
    free(s->frames[id].raw);
    free(s->frames[id].path);
    s->frames[id].raw = malloc(ev->text.len + 1);
    s->frames[id].path = malloc(ev->text2.len + 1);
    if (!s->frames[id].raw || !s->frames[id].path) return samples_oom(err);
    memcpy(s->frames[id].raw, ev->text.ptr, ev->text.len);
    memcpy(s->frames[id].path, ev->text2.ptr, ev->text2.len);
    s->frames[id].raw_len = ev->text.len;
    s->frames[id].path_len = ev->text2.len;
    s->frames[id].line = ev->line;
    if (samples_name_row(s, (uint32_t)id) != CLI_OK) return samples_oom(err);
    return CLI_OK;
}

static int samples_sample(struct samples *s, const struct rbtrace_event *ev, char *err)
{
    struct samples_thread *t = samples_thread(s, ev->thread_id);
    const uint64_t *ids = ev->frames;
    uint32_t n = ev->n_frames, i, node;

    if (!t) return samples_oom(err);
    if (n == 0) {
        ids = t->last;
        n = t->last_n;
    } else {
        memcpy(t->last, ev->frames, n * sizeof(ev->frames[0]));
        t->last_n = n;
    }
    t->states[ev->status] += ev->count;
    t->istates[ev->status] += ev->count;
    s->total += ev->count;
    s->itotal += ev->count;
    if (!s->stamp || ev->time_ns < s->first_ns) s->first_ns = ev->time_ns;
    if (ev->time_ns > s->last_ns) s->last_ns = ev->time_ns;
    s->stamp++;
    node = t->root;
    for (i = n; i-- > 0;) {
        uint64_t id = ids[i];

        if (!(node = samples_node(s, node, id))) return samples_oom(err);
        if (id < s->n_frames) {
            struct samples_frame *row = samples_row(s, id);

            if (row->stamp != s->stamp) {
                row->stamp = s->stamp;
                row->total += ev->count;
                row->itotal += ev->count;
            }
        }
    }
    s->nodes[node].weight += ev->count;
    if (n && ids[0] < s->n_frames) {
        samples_row(s, ids[0])->self += ev->count;
        samples_row(s, ids[0])->iself += ev->count;
    }
    if (t->n_runs && t->runs[t->n_runs - 1].node == node) {
        t->runs[t->n_runs - 1].weight += ev->count;
        return CLI_OK;
    }
    if (t->n_runs == t->runs_cap) {
        size_t cap = t->runs_cap ? t->runs_cap * 2 : 64;
        struct samples_run *runs = realloc(t->runs, cap * sizeof(*runs));

        if (!runs) return samples_oom(err);
        t->runs = runs;
        t->runs_cap = cap;
    }
    t->runs[t->n_runs].node = node;
    t->runs[t->n_runs++].weight = ev->count;
    return CLI_OK;
}

static int samples_thread_name(struct samples *s, const struct rbtrace_event *ev, char *err)
{
    struct samples_thread *t = samples_thread(s, ev->thread_id);
    char *name;

    if (!t) return samples_oom(err);
    if (!(name = malloc((size_t)ev->text.len * ESCAPE_MAX_PER_BYTE + 1))) return samples_oom(err);
    name[escape_text(name, ev->text.ptr, ev->text.len, 0)] = '\0';
    free(t->name);
    t->name = name;
    return CLI_OK;
}

int samples_event(struct samples *s, const struct rbtrace_event *ev, char *err)
{
    switch (ev->type) {
    case RBTRACE_EV_PROFILE_FRAME:
        return samples_frame(s, ev, err);
    case RBTRACE_EV_PROFILE_SAMPLE:
        return samples_sample(s, ev, err);
    case RBTRACE_EV_PROFILE_MISSED:
        s->missed += ev->number;
        s->imissed += ev->number;
        return CLI_OK;
    case RBTRACE_EV_THREAD_NAME:
        return samples_thread_name(s, ev, err);
    default:
        return CLI_OK;
    }
}

/* ---- the end ---- */

static void samples_put_frame(const struct samples *s, uint64_t id, FILE *out)
{
    if (id < s->n_frames && s->frames[id].name)
        fwrite_unlocked(s->frames[id].name, 1, s->frames[id].len, out);
    else fprintf(out, "(frame %" PRIu64 ")", id);
}

static void samples_put_thread(const struct samples *s, size_t ti, FILE *out)
{
    const struct samples_thread *t = &s->threads[ti];

    fprintf(out, "Thread t%zu", ti + 1);
    if (t->name && *t->name) {
        const char *p;

        fputc_unlocked(' ', out);
        for (p = t->name; *p; p++) fputc_unlocked(*p == ';' ? ',' : *p, out);
    }
}

int samples_path(struct samples *s, uint32_t node, size_t *n_out)
{
    size_t n = 0;

    for (; node; node = s->nodes[node].parent) {
        if (n == s->path_cap) {
            size_t cap = s->path_cap ? s->path_cap * 2 : 64;
            uint32_t *path = realloc(s->path, cap * sizeof(*path));

            if (!path) return CLI_ERR;
            s->path = path;
            s->path_cap = cap;
        }
        s->path[n++] = node;
    }
    *n_out = n;
    return CLI_OK;
}

int samples_write_folded(struct samples *s, FILE *out)
{
    size_t i, n;

    for (i = 1; i < s->n_nodes; i++) {
        if (!s->nodes[i].weight) continue;
        if (samples_path(s, (uint32_t)i, &n) != CLI_OK) return CLI_ERR;
        while (n--) {
            const struct samples_node *sn = &s->nodes[s->path[n]];

            if (sn->parent == 0) samples_put_thread(s, (size_t)sn->frame, out);
            else samples_put_frame(s, sn->frame, out);
            fputc_unlocked(n ? ';' : ' ', out);
        }
        fprintf(out, "%" PRIu64 "\n", s->nodes[i].weight);
    }
    return CLI_OK;
}

static int samples_by_self(const void *a, const void *b, void *arg)
{
    const struct samples *s = arg;
    const struct samples_frame *x = &s->frames[*(const uint32_t *)a];
    const struct samples_frame *y = &s->frames[*(const uint32_t *)b];

    if (x->self != y->self) return x->self < y->self ? 1 : -1;
    if (x->total != y->total) return x->total < y->total ? 1 : -1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static double samples_pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

int samples_write_table(struct samples *s, FILE *out)
{
    uint32_t *order = malloc((s->n_frames ? s->n_frames : 1) * sizeof(*order));
    size_t i, n = 0;
    int st;

    if (!order) return CLI_ERR;
    for (i = 1; i < s->n_frames; i++)
        if (s->frames[i].total && s->frames[i].name) order[n++] = (uint32_t)i;
    qsort_r(order, n, sizeof(*order), samples_by_self, s);
    fprintf(out, "*** profile: %" PRIu64 " samples of %zu thread%s, %" PRIu64 " missed\n", s->total,
            s->n_threads, s->n_threads == 1 ? "" : "s", s->missed);
    fprintf(out, "%% self  %% total  self  total  method\n");
    for (i = 0; i < n; i++) {
        const struct samples_frame *f = &s->frames[order[i]];

        fprintf(out, "%6.2f  %7.2f  %4" PRIu64 "  %5" PRIu64 "  ", samples_pct(f->self, s->total),
                samples_pct(f->total, s->total), f->self, f->total);
        samples_put_frame(s, order[i], out);
        fputc_unlocked('\n', out);
    }
    free(order);
    for (i = 0; i < s->n_threads; i++) {
        const struct samples_thread *t = &s->threads[i];
        uint64_t all = 0;
        const char *sep = ": ";

        for (st = 0; st <= RBTRACE_STATE_MAX; st++) all += t->states[st];
        samples_put_thread(s, i, out);
        fprintf(out, " %" PRIu64 " samples", all);
        for (st = 0; st <= RBTRACE_STATE_MAX; st++) {
            if (!t->states[st]) continue;
            fprintf(out, "%s%s %.1f%%", sep, samples_state_name((unsigned)st),
                    samples_pct(t->states[st], all));
            sep = ", ";
        }
        fputc_unlocked('\n', out);
    }
    return CLI_OK;
}

/* ---- --top ---- */

/* A row of the view: the frames of one name, their counts summed. */
struct samples_top_row {
    uint32_t id; /* the first frame of the name */
    uint64_t iself, itotal, self, total;
};

static int samples_top_order(const void *a, const void *b)
{
    const struct samples_top_row *x = a, *y = b;

    if (x->iself != y->iself) return x->iself < y->iself ? 1 : -1;
    if (x->itotal != y->itotal) return x->itotal < y->itotal ? 1 : -1;
    if (x->self != y->self) return x->self < y->self ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int samples_write_top(struct samples *s, FILE *out, const struct samples_top *how)
{
    struct samples_top_row *rows = malloc((s->n_frames ? s->n_frames : 1) * sizeof(*rows));
    size_t i, n_rows = 0;
    int st;

    if (!rows) return CLI_ERR;
    /* a row a method: the frames of one name count in the first (samples_row) */
    for (i = 1; i < s->n_frames; i++) {
        const struct samples_frame *f = &s->frames[i];

        if (f->itotal && f->name)
            rows[n_rows++] = (struct samples_top_row){ (uint32_t)i, f->iself, f->itotal, f->self,
                                                       f->total };
    }
    qsort(rows, n_rows, sizeof(*rows), samples_top_order);
    if (how->tty) fputs("\033[H\033[2J", out); /* home, then clear the screen */
    fprintf(out,
            "*** top of process %d (--profile %s, %u Hz): %" PRIu64 " samples in the last %.1f s"
            ", %" PRIu64 " missed; %" PRIu64 " in all\n",
            how->pid, how->mode, how->hz, s->itotal, how->secs, s->imissed, s->total);
    fprintf(out, "last: %% self  %% total   all: self  total  method\n");
    for (i = 0; i < n_rows && i < how->rows; i++) {
        const struct samples_top_row *r = &rows[i];

        fprintf(out, "      %6.2f  %7.2f       %5" PRIu64 "  %5" PRIu64 "  ",
                samples_pct(r->iself, s->itotal), samples_pct(r->itotal, s->itotal), r->self,
                r->total);
        samples_put_frame(s, r->id, out);
        fputc_unlocked('\n', out);
    }
    if (n_rows > how->rows) fprintf(out, "      (%zu more)\n", n_rows - how->rows);
    for (i = 0; i < s->n_threads; i++) {
        struct samples_thread *t = &s->threads[i];
        uint64_t all = 0;
        const char *sep = ": ";

        for (st = 0; st <= RBTRACE_STATE_MAX; st++) all += t->istates[st];
        samples_put_thread(s, i, out);
        if (!all) fputs(": no samples", out);
        for (st = 0; st <= RBTRACE_STATE_MAX; st++) {
            if (!t->istates[st]) continue;
            fprintf(out, "%s%s %.1f%%", sep, samples_state_name((unsigned)st),
                    samples_pct(t->istates[st], all));
            sep = ", ";
        }
        fputc_unlocked('\n', out);
        memset(t->istates, 0, sizeof(t->istates));
    }
    if (!how->tty) fputc_unlocked('\n', out); /* blocks apart */
    for (i = 1; i < s->n_frames; i++) s->frames[i].iself = s->frames[i].itotal = 0;
    s->itotal = s->imissed = 0;
    free(rows);
    return CLI_OK;
}
