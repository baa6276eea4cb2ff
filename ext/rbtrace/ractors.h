/*
 * ractors.h - the main Ractor alone is traced (ractors.c).
 */
#ifndef RBTRACE_RACTORS_H
#define RBTRACE_RACTORS_H

#include <ruby.h>
#include <stdint.h>

#ifdef RBTRACE_HAVE_RACTORS
#include <ruby/ractor.h>
extern rb_ractor_local_key_t rbtrace_main_ractor_key;

/* Whether the running thread is the main Ractor's: a call into Ruby, which
 * answers for the main Ractor with two loads. */
static inline int rbtrace_main_ractor_p(void)
{
    return rb_ractor_local_storage_ptr(rbtrace_main_ractor_key) != NULL;
}
#else
static inline int rbtrace_main_ractor_p(void)
{
    return 1;
}
#endif
void rbtrace_ractors_count_other(void);
uint64_t rbtrace_ractors_take_other(void);
void rbtrace_ractors_restore_hooks(void);
void Init_rbtrace_ractors(VALUE mod);

#endif
