/*
 * devmode.h - --devmode, selectors that follow reloaded classes (devmode.c).
 */
#ifndef RBTRACE_DEVMODE_H
#define RBTRACE_DEVMODE_H

#include <ruby.h>

void rbtrace_devmode_start(void);
int rbtrace_devmode_watch(VALUE selector);
void rbtrace_devmode_traced(VALUE selector);
void rbtrace_devmode_failed(VALUE selector, VALUE error);
void rbtrace_devmode_stop(void);
int rbtrace_devmode_active(void);
void rbtrace_devmode_mark(void);

#endif
