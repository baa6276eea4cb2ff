/*
 * cli.h - what every part of the rbtrace client shares: return codes,
 * exit codes, the clock helpers and the output file of util.c.
 *
 * The client's parts, one job per file:
 *   main.c     main(), usage
 *   options.c  command line -> struct options
 *   tracers.c  tracer files (-c) -> selectors
 *   attach.c   target checks, private socket, message queue, accept
 *   container.c a target in a container: its namespaces, its $TMPDIR
 *   session.c  event loop: socket -> stream -> format; signals; detach
 *   stream.c   the target's bytes -> events (no I/O; fuzzed as it is)
 *   reports.c  -b, --memory, --heapdump, ...: the Ruby code each one runs
 *   repl.c     -i: read entries (libedit or plain lines), eval each, print
 *   editline.c libedit, loaded when -i needs it (not linked)
 *   format.c   --format: the interface of the formats, one file each:
 *              format_text.c (render.c: events -> rbtrace's text lines),
 *              format_json.c, format_chrome.c, format_folded.c (sharing
 *              calls.c: names and call stacks; json.c: JSON strings)
 *   multi.c    several pids: one session each in a child, output merged
 *   ps.c       --ps: processes by command line
 *   exec.c     --exec: start a program with rbtrace loaded
 *   util.c     monotonic clock, sleeping, -o FILE opened safely
 */
#ifndef RBTRACE_CLI_H
#define RBTRACE_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Return codes of the client's functions (hiredis style). */
#define CLI_OK 0
#define CLI_ERR (-1)
#define CLI_INTERRUPTED (-2) /* the user asked us to stop (SIGINT, ...) */

/* Room for an error message in a context struct. */
#define CLI_ERRLEN 512

/* The client's exit codes. */
enum cli_exit {
    CLI_EXIT_OK = 0,         /* traced and detached, or eval returned */
    CLI_EXIT_FAIL = 1,       /* could not attach, eval failed, I/O error */
    CLI_EXIT_USAGE = 2,      /* bad command line */
    CLI_EXIT_TARGET_GONE = 3 /* the target exited while we traced it */
};

/* Milliseconds of CLOCK_MONOTONIC. */
int64_t cli_now_ms(void);

/* Sleeps ms milliseconds (returns early on a signal). */
void cli_sleep_ms(int ms);

/* Opens -o FILE (append: -a) for writing: created mode 0600, never
 * through a symbolic link; an existing file only if it is the user's
 * own plain file with one link (truncated unless append), a FIFO of
 * theirs or a device. The stream; NULL with errstr set (what to do). */
FILE *cli_open_output(const char *path, int append, char *errstr, size_t size);

#endif
