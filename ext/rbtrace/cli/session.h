/*
 * session.h - one run of the client: attach, send the command the options
 * ask for, read and render events until the user stops us or the target
 * goes away, detach.
 */
#ifndef RBTRACE_CLI_SESSION_H
#define RBTRACE_CLI_SESSION_H

#include "cli.h"
#include "options.h"

/* Runs the session opts describe; returns the exit code. Status lines
 * and errors go to stderr. */
enum cli_exit session_run(const struct options *opts);

#endif
