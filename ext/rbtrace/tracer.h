/*
 * tracer.h - method selectors and the hooks that watch them (tracer.c).
 */
#ifndef RBTRACE_TRACER_H
#define RBTRACE_TRACER_H

#include <ruby.h>
#include <stdint.h>

/* A hot function without the stack protector (extconf.rb's check). */
#ifdef RBTRACE_HAVE_NO_STACK_PROTECTOR
#define RBTRACE_NO_STACK_PROTECTOR __attribute__((no_stack_protector))
#else
#define RBTRACE_NO_STACK_PROTECTOR
#endif

void rbtrace_tracer_add(VALUE selectors);
int rbtrace_tracer_add_one(VALUE selector, VALUE *error);
void rbtrace_tracer_firehose(void);
void rbtrace_tracer_slow(uint64_t threshold_ns, int cpu, VALUE selectors);
void rbtrace_tracer_gc(void);
void rbtrace_tracer_raise(void);
void rbtrace_report_selector_error(VALUE selector, VALUE error);
VALUE rbtrace_selector_error(ID name);
void rbtrace_tracer_clear(void);
void rbtrace_tracer_after_fork(void);
void rbtrace_tracer_mark(void);
void Init_rbtrace_tracer(VALUE mod);

#endif
