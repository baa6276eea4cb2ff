/*
 * ps.h - --ps PATTERN: the processes whose command line matches PATTERN
 * and that have loaded rbtrace; several are offered to choose from.
 */
#ifndef RBTRACE_CLI_PS_H
#define RBTRACE_CLI_PS_H

#include <stdio.h>
#include "cli.h"
#include "options.h"

/*
 * Fills o->pids (and o->pid) with the processes to trace: the one that
 * matches, or those the user picks from a list read from `in` when it is a
 * terminal. CLI_OK, or CLI_ERR after printing why on stderr.
 */
int ps_choose(struct options *o, FILE *in);

#endif
