/*
 * gvlwatch.h - --gvl, each thread's waits for the GVL (gvlwatch.c).
 */
#ifndef RBTRACE_GVLWATCH_H
#define RBTRACE_GVLWATCH_H

#include <ruby.h>

int rbtrace_gvl_supported(void); /* this build has the thread event hooks */
void rbtrace_gvl_start(void);
void rbtrace_gvl_stop(void);
int rbtrace_gvl_active(void); /* the hook is in place */
void Init_rbtrace_gvlwatch(VALUE mod);

#endif
