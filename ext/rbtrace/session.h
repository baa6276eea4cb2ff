/*
 * session.h - carrying out the client's commands (session.c).
 */
#ifndef RBTRACE_SESSION_H
#define RBTRACE_SESSION_H

#include <ruby.h>
#include <stddef.h>

/* from_socket: the attached client's socket (else the queue: ATTACH only). */
void rbtrace_session_execute(const char *buf, size_t len, int from_socket);
void rbtrace_session_run_deferred(void);
void rbtrace_session_drop_deferred(void);
void rbtrace_session_detach(int tell_client);
void rbtrace_session_after_fork(void);
void rbtrace_session_check_peer(void);
void Init_rbtrace_session(VALUE mod);

#endif
