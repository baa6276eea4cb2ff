/*
 * allocwatch.h - --alloc, the objects the app allocates, per thread and
 * per site (allocwatch.c). The count not yet sent lives in emit.h
 * (rbtrace_alloc_pending): every call event sends it first.
 */
#ifndef RBTRACE_ALLOCWATCH_H
#define RBTRACE_ALLOCWATCH_H

#include <ruby.h>
#include <stdint.h>

void rbtrace_alloc_start(uint64_t sample);
void rbtrace_alloc_stop(void);
int rbtrace_alloc_active(void);
void rbtrace_alloc_report(int send); /* the top sites as ALLOC_SITE events if send; forgets them */
void rbtrace_alloc_mark(void);
void Init_rbtrace_allocwatch(VALUE mod);

#endif
