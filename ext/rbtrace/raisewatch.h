/*
 * raisewatch.h - --raise (raisewatch.c).
 */
#ifndef RBTRACE_RAISEWATCH_H
#define RBTRACE_RAISEWATCH_H

#include <ruby.h>

void rbtrace_raise_start(void);
void rbtrace_raise_stop(void);
int rbtrace_raise_active(void);
void Init_rbtrace_raisewatch(VALUE mod);

#endif
