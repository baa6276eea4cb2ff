/*
 * command.h - carrying out the client's commands (command.c).
 */
#ifndef RBTRACE_COMMAND_H
#define RBTRACE_COMMAND_H

#include <ruby.h>
#include <stddef.h>

/* from_socket: the attached client's socket (else the queue: ATTACH only). */
void rbtrace_command_execute(const char *buf, size_t len, int from_socket);
void rbtrace_command_run_deferred(void);
void rbtrace_command_drop_deferred(void);
void rbtrace_command_detach(int tell_client);
void rbtrace_command_after_fork(void);
void rbtrace_command_check_peer(void);
void Init_rbtrace_command(VALUE mod);

#endif
