/*
 * profile.h - --profile, a sampling profiler of every Ruby thread
 * (profile.c; docs/DESIGN.md, "Sampling").
 */
#ifndef RBTRACE_PROFILE_H
#define RBTRACE_PROFILE_H

#include <ruby.h>
#include <stdint.h>

void rbtrace_profile_start(uint32_t mode, uint32_t hz); /* GVL held */
void rbtrace_profile_stop(void);                        /* GVL held; a forked child too */
int rbtrace_profile_active(void);
/* The sampler asked for a drain (read without the GVL); the drain itself
 * sends the samples taken so far, GVL held (the helper thread). */
int rbtrace_profile_drain_due(void);
void rbtrace_profile_drain(void);
void rbtrace_profile_mark(void);
void Init_rbtrace_profile(VALUE mod);

#endif
