/*
 * editline.h - libedit for -i, loaded when -i starts on a terminal.
 *
 * The client is not linked with libedit: every run (`-e`, `-m`, ...) would
 * load it and the libraries it needs (libtinfo, libbsd, libmd) for nothing,
 * about 1 ms of each start on our machines, a tenth of an attach. Built
 * only where libedit's headers were found (RBTRACE_HAVE_LIBEDIT).
 */
#ifndef RBTRACE_CLI_EDITLINE_H
#define RBTRACE_CLI_EDITLINE_H

#ifdef RBTRACE_HAVE_LIBEDIT
#include <stddef.h>
#include <stdio.h>
#include <editline/readline.h>

/* What repl.c uses of libedit, typed as its header declares it. */
struct editline {
    __typeof__(readline) *readline;
    __typeof__(add_history) *add_history;
    __typeof__(stifle_history) *stifle_history;
    __typeof__(read_history) *read_history;
    __typeof__(history_list) *history_list;
    __typeof__(history_length) *history_length;
    __typeof__(rl_readline_name) *readline_name;
    __typeof__(rl_catch_signals) *catch_signals;
    __typeof__(rl_getc_function) *getc_function;
};

/* Loads libedit into *e. 0, or -1 with why in err (dlerror's words). */
int editline_load(struct editline *e, char *err, size_t err_len);
#endif

#endif
