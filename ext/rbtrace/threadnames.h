/*
 * threadnames.h - --thread-names: each traced thread's name sent as a
 * THREAD_NAME event before its calls (threadnames.c).
 */
#ifndef RBTRACE_THREADNAMES_H
#define RBTRACE_THREADNAMES_H

#include <stdint.h>
#include <ruby.h>

void rbtrace_thread_names_start(void);
void rbtrace_thread_names_stop(void);
/* Forgets the names sent: the next session gets each again. */
void rbtrace_thread_names_forget(void);
void rbtrace_thread_names_after_fork(void);
/* The emitters of call events, with the GVL, for a thread that is not the
 * chain's: its name sent if new or changed (a Ruby call). */
void rbtrace_thread_name_note(uint64_t thread);
/* --profile's drain, GVL held: the named thread's name, sent if new or
 * changed (id: its rbtrace_thread_id). */
void rbtrace_thread_name_of(VALUE thread, uint64_t id);
void Init_rbtrace_threadnames(VALUE mod);

#endif
