/*
 * reports.h - the client's reports (-b, --backtrace, --memory, --heapdump,
 * --shapesdump, --fork): each is one EVAL of an RBTrace::Reports method
 * (lib/rbtrace/reports.rb) whose result, a String, the client prints as is.
 */
#ifndef RBTRACE_CLI_REPORTS_H
#define RBTRACE_CLI_REPORTS_H

#include "options.h"

/* The dumps' eval timeout when --timeout is not given, in ms: writing a
 * big heap takes minutes, and the app does not wait for it. */
#define REPORTS_DUMP_TIMEOUT_MS (300 * 1000)

/* 1 if mode is a report. */
int reports_is_report(enum options_mode mode);

/* The option that asked for the report ("--heapdump"), for messages. */
const char *reports_option(enum options_mode mode);

/* The Ruby code of o's report, in a new string (free it), with a relative
 * dump FILE made absolute against our cwd (the target's cwd is not ours).
 * CLI_OK, or CLI_ERR with a message in errstr (CLI_ERRLEN bytes). */
int reports_code(const struct options *o, char **code, char *errstr);

/* The eval timeout of o's report in ms, given the --timeout one. */
int reports_timeout_ms(const struct options *o, int timeout_ms);

#endif
