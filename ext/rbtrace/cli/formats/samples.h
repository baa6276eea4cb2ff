/*
 * samples.h - --profile's samples, kept by the client for the formats
 * (samples.c): the frames named by PROFILE_FRAME, each thread's stacks as
 * a tree weighted by samples, each method's self and total samples, each
 * thread's states, the samples missed.
 *
 * Pure: events in, text out to a FILE* at the end (folded lines or the
 * table of methods).
 */
#ifndef RBTRACE_CLI_SAMPLES_H
#define RBTRACE_CLI_SAMPLES_H

#include <stdint.h>
#include <stdio.h>
#include "codec.h"

/* What the writers of the formats read (samples.c fills it). */
struct samples_frame {
    char *name; /* escaped as text is; ';' as ',' (folded's separator) */
    size_t len;
    char *raw, *path; /* as the target sent them (JSON and pprof escape their own way) */
    size_t raw_len, path_len;
    uint64_t line;
    uint32_t row;           /* the first frame of this name: it holds the counts of all */
    uint64_t self, total;   /* samples (weights) */
    uint64_t stamp;         /* the sample that last counted it in total */
    uint64_t iself, itotal; /* the same, since the last --top view */
};

struct samples_thread {
    uint64_t id;                             /* the target's thread id */
    char *name;                              /* THREAD_NAME's, or NULL */
    uint64_t states[RBTRACE_STATE_MAX + 1];  /* samples by state */
    uint64_t istates[RBTRACE_STATE_MAX + 1]; /* the same, since the last --top view */
    uint32_t root;                           /* its node */
    /* its samples in order, as (node, weight), a run of one stack merged:
     * speedscope's timeline of the thread */
    struct samples_run *runs;
    size_t n_runs, runs_cap;
    uint32_t last_n; /* its last stack, for an empty list */
    uint64_t last[RBTRACE_PROFILE_FRAMES_MAX];
};

struct samples_run {
    uint32_t node;
    uint64_t weight;
};

struct samples_node {
    uint32_t parent; /* 0: a thread's root */
    uint64_t frame;  /* a frame id; a root's: its thread's index */
    uint64_t weight; /* samples whose innermost frame this is */
};

struct samples {
    struct samples_frame *frames; /* by id; 0 unused */
    size_t n_frames;
    struct samples_thread *threads;
    size_t n_threads;
    struct samples_node *nodes; /* 0 unused */
    size_t n_nodes, nodes_cap;
    uint32_t *index; /* (parent, frame) -> node; 0: free */
    size_t index_cap;
    uint32_t *names; /* name -> the first frame of that name; 0: free */
    size_t names_cap, names_used;
    uint64_t total, missed, stamp;
    uint64_t first_ns, last_ns; /* the first and last sample's times (since the clock origin) */
    uint64_t itotal, imissed;   /* since the last --top view */
    uint32_t *path;
    size_t path_cap;
};

/* NULL when out of memory. */
struct samples *samples_new(void);
void samples_free(struct samples *s);

/* Takes PROFILE_FRAME, PROFILE_SAMPLE, PROFILE_MISSED and THREAD_NAME.
 * CLI_OK, or CLI_ERR with a message in err (RBTRACE_ERRLEN bytes). */
int samples_event(struct samples *s, const struct rbtrace_event *ev, char *err);

/* The stack of thread id's last sample, innermost first (*n frame ids; a
 * sample with no list had its thread's last), or NULL (*n 0) for a
 * thread with no sample. */
const uint64_t *samples_last_stack(const struct samples *s, uint64_t id, uint32_t *n);

/* A frame's name as the target sent it (JSON escapes it its own way):
 * NULL for an id never named. */
const char *samples_frame_raw(const struct samples *s, uint64_t id, size_t *len);

/* "running", "GVL wait", "blocked", "GC" (enum rbtrace_state). */
const char *samples_state_name(unsigned state);

/* Samples (weights summed) and samples missed so far. */
uint64_t samples_total(const struct samples *s);
uint64_t samples_missed(const struct samples *s);

/* The nodes from node up to its thread's root (the last), into s->path;
 * *n their count. CLI_OK or CLI_ERR (out of memory). */
int samples_path(struct samples *s, uint32_t node, size_t *n);

/* Collapsed stacks, the thread first: "Thread t1;Foo#run;Foo#step 42\n"
 * (weight: samples). CLI_OK or CLI_ERR (out of memory). */
int samples_write_folded(struct samples *s, FILE *out);

/* --top's view (samples_write_top): where it goes and what it says. */
struct samples_top {
    int tty;          /* out is a terminal: the screen is cleared and redrawn */
    unsigned rows;    /* methods shown at most */
    int pid;          /* the target's */
    const char *mode; /* "wall" or "cpu" */
    unsigned hz;
    double secs; /* since the last view */
};

/* --top: the methods by self and total samples since the last view (and
 * since the start), each thread's states since the last view; then the
 * counts since the last view start again. CLI_OK or CLI_ERR (out of memory). */
int samples_write_top(struct samples *s, FILE *out, const struct samples_top *how);

/* The table of methods by self samples, as rbspy's summary, then each
 * thread's samples by state. CLI_OK or CLI_ERR (out of memory). */
int samples_write_table(struct samples *s, FILE *out);

#endif
