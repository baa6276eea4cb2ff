/*
 * channel.h - how commands reach the app: the signal, the queue, the
 * client's socket (channel.c).
 */
#ifndef RBTRACE_CHANNEL_H
#define RBTRACE_CHANNEL_H

#include <ruby.h>

void rbtrace_channel_init(void);
void rbtrace_channel_after_fork(void);
int rbtrace_channel_handler_installed(void); /* SIGURG still ours */
VALUE rbtrace_channel_handler_before(void);  /* what trap('URG') returned before rbtrace */
void Init_rbtrace_channel(VALUE mod);

#endif
