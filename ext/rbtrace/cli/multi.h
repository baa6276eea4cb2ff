/*
 * multi.h - tracing several processes at once (-p PID PID...): one
 * session per process in a child of the client, output merged by line.
 */
#ifndef RBTRACE_CLI_MULTI_H
#define RBTRACE_CLI_MULTI_H

#include "cli.h"
#include "options.h"

/* Runs a session for each of o->pids; returns the highest exit code. */
enum cli_exit multi_run(const struct options *o);

#endif
