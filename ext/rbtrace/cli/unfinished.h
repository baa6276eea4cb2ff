/*
 * unfinished.h - whether an eval's syntax error only says that the entry
 * ended too soon, so that `rbtrace -i` reads another line and sends the
 * whole entry again.
 */
#ifndef RBTRACE_CLI_UNFINISHED_H
#define RBTRACE_CLI_UNFINISHED_H

#include <stddef.h>

/* 1 if the target's syntax error message (len bytes of text) says only
 * that the input ended too soon; 0 for any other error. */
int syntax_error_unfinished(const char *text, size_t len);

#endif
