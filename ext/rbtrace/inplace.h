/*
 * inplace.h - Kernel#trap, Signal.trap, Process.daemon replaced in place
 * (inplace.c).
 */
#ifndef RBTRACE_INPLACE_H
#define RBTRACE_INPLACE_H

void rbtrace_inplace_install(void);

#endif
