/*
 * trace.h - what is traced: selectors, --firehose, the modes (trace.c).
 */
#ifndef RBTRACE_TRACE_H
#define RBTRACE_TRACE_H

#include <ruby.h>
#include <stdint.h>

/* A hot function without the stack protector (extconf.rb's check). */
#ifdef RBTRACE_HAVE_NO_STACK_PROTECTOR
#define RBTRACE_NO_STACK_PROTECTOR __attribute__((no_stack_protector))
#else
#define RBTRACE_NO_STACK_PROTECTOR
#endif

void rbtrace_trace_add(VALUE selectors);
int rbtrace_trace_add_one(VALUE selector, VALUE *error);
void rbtrace_trace_firehose(void);
void rbtrace_trace_slow(uint64_t threshold_ns, int cpu, VALUE selectors);
void rbtrace_trace_gc(void);
void rbtrace_trace_raise(void);
int rbtrace_trace_any(void);
void rbtrace_trace_clear(void);
void rbtrace_trace_after_fork(void);
void rbtrace_trace_mark(void);
void Init_rbtrace_trace(VALUE mod);

#endif
