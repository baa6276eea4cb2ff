/*
 * format_pprof.c - --format pprof (with --profile): the samples as
 * profile.proto (github.com/google/pprof, proto/profile.proto), gzipped, as
 * `go tool pprof`, Pyroscope, Grafana and Datadog read it. Written when the
 * trace ends, by a small encoder of our own (protobuf's wire format: varint
 * keys, varints, length-delimited messages) and zlib.
 *
 * Sample types: samples (count) and wall or cpu (nanoseconds: samples x
 * the period, 1 s / --hz); one Sample per distinct stack of a thread, its
 * locations innermost first, labelled thread = "t1 NAME". A Location per
 * frame the samples name, with one Line of one Function (name, file, first
 * line). The time of the first sample and the duration the samples cover,
 * which `go tool pprof` prints with the total ("Duration: 2s, Total
 * samples = 6s (300%)" for three threads in wall mode).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#include "cli.h"
#include "format.h"
#include "samples.h"

struct format_pprof {
    struct format base;
    uint64_t wall_origin_ns; /* the ATTACHED event's: the samples' times are since then */
};

/* A growable byte buffer: a message being built. */
struct pb {
    unsigned char *p;
    size_t len, cap;
    int oom;
};

static void pb_bytes(struct pb *b, const void *data, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        unsigned char *p;

        while (cap < b->len + n) cap *= 2;
        if (!(p = realloc(b->p, cap))) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void pb_varint(struct pb *b, uint64_t v)
{
    unsigned char out[10];
    size_t n = 0;

    do {
        out[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) out[n] |= 0x80;
        n++;
    } while (v);
    pb_bytes(b, out, n);
}

/* field: a varint (wire type 0); zero, the default, is left out */
static void pb_uint(struct pb *b, uint32_t field, uint64_t v)
{
    if (!v) return;
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, v);
}

/* field: bytes or a message (wire type 2) */
static void pb_len(struct pb *b, uint32_t field, const void *data, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    pb_bytes(b, data, n);
}

static void pb_message(struct pb *b, uint32_t field, struct pb *m)
{
    if (m->oom) b->oom = 1;
    pb_len(b, field, m->p, m->len);
    m->len = 0;
}

/* The string table: index by a linear search over a small table would be
 * slow for many frames; frames' names and files are added once each, in
 * order, so their indexes are known without a search. */
struct pprof_strings {
    struct pb *profile;
    uint64_t next;
};

static uint64_t pprof_string(struct pprof_strings *st, const char *s, size_t n)
{
    pb_len(st->profile, 6, s, n);
    return st->next++;
}

static void pprof_value_type(struct pb *b, uint32_t field, uint64_t type, uint64_t unit,
                             struct pb *tmp)
{
    pb_uint(tmp, 1, type);
    pb_uint(tmp, 2, unit);
    pb_message(b, field, tmp);
}

/* A sample's frame id as a location id: the frame's own, or, for one
 * never named (0, or past the frames: a malformed stream), the one
 * "(unknown frame)" location after the others; pprof refuses a sample
 * that names a location the file lacks. */
static uint64_t pprof_location_id(const struct samples *s, uint64_t frame)
{
    uint64_t unknown = s->n_frames ? s->n_frames : 1;

    return frame && frame < s->n_frames ? frame : unknown;
}

/* One location (4), in the one mapping, and its function (5), the same
 * id: the function's name, file and first line, the location's line its
 * first too (the samples have no line of their own). No system_name: pprof
 * "demangles" a function whose name is its system_name, and one with <>,
 * [] or :: in it looks like C++ to it, whose <...> and (...) it cuts
 * ("<main>" and "<class:Cart>" became "", "block in <main>" "block in ");
 * a name apart from the system_name it takes as already demangled. */
static void pprof_location(struct pb *b, uint64_t id, uint64_t name, uint64_t file, uint64_t line,
                           struct pb *m)
{
    struct pb l = { 0 };

    pb_uint(&l, 1, id);
    pb_uint(&l, 2, line);
    pb_uint(m, 1, id);
    pb_uint(m, 2, 1); /* mapping_id */
    pb_message(m, 4, &l);
    free(l.p);
    pb_message(b, 4, m);
    pb_uint(m, 1, id);
    pb_uint(m, 2, name);
    pb_uint(m, 4, file);
    pb_uint(m, 5, line);
    pb_message(b, 5, m);
}

/* profile.proto's Profile, into b. wall_origin_ns: CLOCK_REALTIME at the
 * samples' clock origin (0: unknown, the time of writing is used). */
static int pprof_encode(struct samples *s, const struct format_opts *opts, uint64_t wall_origin_ns,
                        struct pb *b)
{
    struct pb m = { 0 }, sub = { 0 };
    struct pprof_strings st = { b, 0 };
    uint64_t period = 1000000000ull / (opts->hz ? opts->hz : 1);
    uint64_t str_samples, str_count, str_kind, str_ns, str_thread, *thread_str;
    uint64_t *name_str, *file_str, unknown_id = pprof_location_id(s, 0), str_unknown = 0;
    unsigned char *used;
    size_t i, id, n, k;
    char label[64];
    int rc = CLI_ERR;

    name_str = calloc(s->n_frames ? s->n_frames : 1, sizeof(*name_str));
    file_str = calloc(s->n_frames ? s->n_frames : 1, sizeof(*file_str));
    used = calloc(s->n_frames + 2, 1); /* by location id, unknown_id (n_frames, or 1) too */
    thread_str = calloc(s->n_threads ? s->n_threads : 1, sizeof(*thread_str));
    if (!name_str || !file_str || !used || !thread_str) goto out;
    /* The locations the samples name, the only ones written (n_frames is
     * the frames' capacity: the slots past the last frame named are none). */
    for (i = 1; i < s->n_nodes; i++)
        if (s->nodes[i].parent) used[pprof_location_id(s, s->nodes[i].frame)] = 1;
    /* string_table (6): "" first, as the format requires */
    pprof_string(&st, "", 0);
    str_samples = pprof_string(&st, "samples", 7);
    str_count = pprof_string(&st, "count", 5);
    str_kind = opts->profile_mode == RBTRACE_PROFILE_CPU ? pprof_string(&st, "cpu", 3)
                                                         : pprof_string(&st, "wall", 4);
    str_ns = pprof_string(&st, "nanoseconds", 11);
    str_thread = pprof_string(&st, "thread", 6);
    for (id = 1; id < s->n_frames; id++) {
        const struct samples_frame *f = &s->frames[id];

        if (!used[id]) continue;
        if (f->raw) name_str[id] = pprof_string(&st, f->raw, f->raw_len);
        else {
            n = (size_t)snprintf(label, sizeof(label), "(frame %zu)", id);
            name_str[id] = pprof_string(&st, label, n);
        }
        file_str[id] = f->path_len ? pprof_string(&st, f->path, f->path_len) : 0;
    }
    if (used[unknown_id]) str_unknown = pprof_string(&st, "(unknown frame)", 15);
    for (i = 0; i < s->n_threads; i++) {
        const struct samples_thread *t = &s->threads[i];

        n = (size_t)snprintf(label, sizeof(label), "t%zu%s%.40s", i + 1,
                             t->name && *t->name ? " " : "", t->name ? t->name : "");
        thread_str[i] = pprof_string(&st, label, n);
    }
    /* sample_type (1): samples/count, wall or cpu/nanoseconds */
    pprof_value_type(b, 1, str_samples, str_count, &sub);
    pprof_value_type(b, 1, str_kind, str_ns, &sub);
    /* sample (2): one per node that ends a stack */
    for (i = 1; i < s->n_nodes; i++) {
        const struct samples_node *node = &s->nodes[i];
        size_t ti;

        if (!node->weight || node->parent == 0) continue;
        if (samples_path(s, (uint32_t)i, &n) != CLI_OK) goto out;
        ti = (size_t)s->nodes[s->path[n - 1]].frame; /* the root: its thread */
        for (k = 0; k + 1 < n; k++)                  /* innermost first */
            pb_varint(&sub, pprof_location_id(s, s->nodes[s->path[k]].frame));
        pb_message(&m, 1, &sub);
        pb_varint(&sub, node->weight);
        pb_varint(&sub, node->weight * period);
        pb_message(&m, 2, &sub);
        {
            struct pb lab = { 0 };

            pb_uint(&lab, 1, str_thread);
            pb_uint(&lab, 2, thread_str[ti]);
            pb_message(&m, 3, &lab);
            free(lab.p);
        }
        pb_message(b, 2, &m);
    }
    /* mapping (3): one, for every location, that says its functions,
     * files and lines are there: with none, pprof makes one up, finds no
     * binary to symbolize it from, and says "Main binary filename not
     * available." on stderr */
    pb_uint(&m, 1, 1);
    pb_uint(&m, 7, 1);
    pb_uint(&m, 8, 1);
    pb_uint(&m, 9, 1);
    pb_message(b, 3, &m);
    /* location (4) and function (5) */
    for (id = 1; id < s->n_frames; id++)
        if (used[id]) pprof_location(b, id, name_str[id], file_str[id], s->frames[id].line, &m);
    if (used[unknown_id]) pprof_location(b, unknown_id, str_unknown, 0, 0, &m);
    /* time_nanos (9): the first sample's wall time; duration_nanos (10):
     * from the first sample to the last, and the period the last stands
     * for (pprof's "Duration: 2s, Total samples = ..."); period_type (11),
     * period (12) */
    pb_uint(b, 9,
            wall_origin_ns ? wall_origin_ns + s->first_ns : (uint64_t)time(NULL) * 1000000000ull);
    if (s->stamp) pb_uint(b, 10, s->last_ns - s->first_ns + period);
    pprof_value_type(b, 11, str_kind, str_ns, &sub);
    pb_uint(b, 12, period);
    rc = m.oom || sub.oom || b->oom ? CLI_ERR : CLI_OK;
out:
    free(m.p);
    free(sub.p);
    free(name_str);
    free(file_str);
    free(used);
    free(thread_str);
    return rc;
}

/* data gzipped (zlib's gzip wrapper) to out. */
static int pprof_gzip(const unsigned char *data, size_t len, FILE *out)
{
    unsigned char chunk[65536];
    z_stream z;
    int zrc;

    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return CLI_ERR;
    z.next_in = (unsigned char *)data;
    z.avail_in = (uInt)len;
    do {
        z.next_out = chunk;
        z.avail_out = sizeof(chunk);
        zrc = deflate(&z, Z_FINISH);
        if (zrc == Z_STREAM_ERROR) break;
        fwrite(chunk, 1, sizeof(chunk) - z.avail_out, out);
    } while (zrc != Z_STREAM_END);
    deflateEnd(&z);
    return zrc == Z_STREAM_END ? CLI_OK : CLI_ERR;
}

static int pprof_event(struct format *base, const struct rbtrace_event *ev)
{
    (void)base;
    (void)ev;
    return CLI_OK; /* the samples are format.c's (samples.h) */
}

static int pprof_finish(struct format *base)
{
    struct samples empty;
    struct pb b = { 0 };
    int rc;

    memset(&empty, 0, sizeof(empty));
    rc = pprof_encode(base->samples ? base->samples : &empty, &base->opts,
                      ((struct format_pprof *)base)->wall_origin_ns, &b);
    if (rc == CLI_OK && b.len > UINT32_MAX) rc = CLI_ERR;
    if (rc == CLI_OK) rc = pprof_gzip(b.p, b.len, base->out);
    free(b.p);
    if (rc != CLI_OK) return format_fail(base, "out of memory (pprof)");
    return format_check_io(base);
}

static void pprof_destroy(struct format *base)
{
    free(base);
}

static void pprof_set_wall_origin(struct format *base, uint64_t wall_origin_ns)
{
    ((struct format_pprof *)base)->wall_origin_ns = wall_origin_ns;
}

static const struct format_ops format_pprof_ops = {
    .event = pprof_event,
    .finish = pprof_finish,
    .destroy = pprof_destroy,
    .set_wall_origin = pprof_set_wall_origin,
};

struct format *format_pprof_new(FILE *out, const struct format_opts *opts)
{
    struct format_pprof *f = calloc(1, sizeof(*f));

    if (!f) return NULL;
    format_base_init(&f->base, &format_pprof_ops, out, opts);
    return &f->base;
}
