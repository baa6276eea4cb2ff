/*
 * writer.h - the writer thread: ring -> the client's socket (writer.c).
 */
#ifndef RBTRACE_WRITER_H
#define RBTRACE_WRITER_H

int rbtrace_writer_start(void);
int rbtrace_writer_stop(int *state);
void rbtrace_writer_nudge(void);
void rbtrace_writer_after_fork(void);

#endif
