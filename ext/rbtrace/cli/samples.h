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

struct samples;

/* NULL when out of memory. */
struct samples *samples_new(void);
void samples_free(struct samples *s);

/* Takes PROFILE_FRAME, PROFILE_SAMPLE, PROFILE_MISSED and THREAD_NAME.
 * CLI_OK, or CLI_ERR with a message in err (RBTRACE_ERRLEN bytes). */
int samples_event(struct samples *s, const struct rbtrace_event *ev, char *err);

/* Samples (weights summed) and samples missed so far. */
uint64_t samples_total(const struct samples *s);
uint64_t samples_missed(const struct samples *s);

/* Collapsed stacks, the thread first: "Thread t1;Foo#run;Foo#step 42\n"
 * (weight: samples). CLI_OK or CLI_ERR (out of memory). */
int samples_write_folded(struct samples *s, FILE *out);

/* The table of methods by self samples, as rbspy's summary, then each
 * thread's samples by state. CLI_OK or CLI_ERR (out of memory). */
int samples_write_table(struct samples *s, FILE *out);

#endif
