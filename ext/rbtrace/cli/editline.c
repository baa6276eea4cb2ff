/*
 * editline.c - loads libedit with dlopen when -i needs it (editline.h).
 *
 * By its soname, found at build time (extconf.rb: RBTRACE_LIBEDIT_SONAME),
 * then by the ones libedit has had on Linux for years. The library stays
 * loaded until the client exits.
 */
#include "editline.h"

#ifdef RBTRACE_HAVE_LIBEDIT
#include <dlfcn.h>
#include <string.h>

#ifndef RBTRACE_LIBEDIT_SONAME
#define RBTRACE_LIBEDIT_SONAME "libedit.so.2"
#endif

static void *editline_open(char *err, size_t err_len)
{
    static const char *const names[] = { RBTRACE_LIBEDIT_SONAME, "libedit.so.2", "libedit.so" };
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        const char *why;

        if (lib) return lib;
        why = dlerror();
        if (i == 0) snprintf(err, err_len, "%s", why ? why : names[i]);
    }
    return NULL;
}

/* One symbol of lib into *slot (a pointer of any kind); 0 or -1. */
static int editline_symbol(void *lib, const char *name, void *slot, char *err, size_t err_len)
{
    void *sym;

    dlerror();
    sym = dlsym(lib, name);
    if (!sym) {
        const char *why = dlerror();

        snprintf(err, err_len, "%s", why ? why : name);
        return -1;
    }
    memcpy(slot, &sym, sizeof(sym)); /* object pointer to function pointer: POSIX's way */
    return 0;
}

int editline_load(struct editline *e, char *err, size_t err_len)
{
    void *lib = editline_open(err, err_len);

    if (!lib) return -1;
    if (editline_symbol(lib, "readline", &e->readline, err, err_len) < 0 ||
        editline_symbol(lib, "add_history", &e->add_history, err, err_len) < 0 ||
        editline_symbol(lib, "stifle_history", &e->stifle_history, err, err_len) < 0 ||
        editline_symbol(lib, "read_history", &e->read_history, err, err_len) < 0 ||
        editline_symbol(lib, "history_list", &e->history_list, err, err_len) < 0 ||
        editline_symbol(lib, "history_length", &e->history_length, err, err_len) < 0 ||
        editline_symbol(lib, "rl_readline_name", &e->readline_name, err, err_len) < 0 ||
        editline_symbol(lib, "rl_catch_signals", &e->catch_signals, err, err_len) < 0 ||
        editline_symbol(lib, "rl_getc_function", &e->getc_function, err, err_len) < 0) {
        dlclose(lib);
        return -1;
    }
    return 0;
}
#endif
