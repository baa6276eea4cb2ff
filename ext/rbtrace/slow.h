/*
 * slow.h - --slow, --slowcpu, fed by trace.c's hook (slow.c).
 */
#ifndef RBTRACE_SLOW_H
#define RBTRACE_SLOW_H

#include <ruby.h>
#include <ruby/debug.h>
#include <stdint.h>

int rbtrace_slow_start(uint64_t threshold_ns, int cpu, VALUE selectors);
void rbtrace_slow_event(rb_event_flag_t ev, VALUE klass, ID mid);
void rbtrace_slow_stop(void);
void rbtrace_slow_mark(void);
void Init_rbtrace_slow(VALUE mod);

#endif
