/*
 * gcwatch.h - --gc (gcwatch.c).
 */
#ifndef RBTRACE_GCWATCH_H
#define RBTRACE_GCWATCH_H

#include <ruby.h>
#include <stdint.h>

void rbtrace_gc_start(void);
void rbtrace_gc_stop(void);
int rbtrace_gc_active(void);
uint64_t rbtrace_gc_take_other(void);
void Init_rbtrace_gcwatch(VALUE mod);

#endif
