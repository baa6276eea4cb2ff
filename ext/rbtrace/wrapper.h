/*
 * wrapper.h - tracing one method by wrapping it (wrapper.c).
 */
#ifndef RBTRACE_WRAPPER_H
#define RBTRACE_WRAPPER_H

#include <ruby.h>

void rbtrace_wrapper_add(VALUE owner, VALUE name, VALUE mid, VALUE visibility, VALUE arity);
int rbtrace_wrapper_module_p(VALUE klass);
void rbtrace_wrapper_shadow(VALUE klass, ID mid);
void rbtrace_wrapper_clear(void);
int rbtrace_wrapper_any(void); /* a method is wrapped */
void rbtrace_wrapper_mark(void);
void Init_rbtrace_wrapper(VALUE mod);

#endif
