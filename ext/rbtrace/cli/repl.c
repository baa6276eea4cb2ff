/*
 * repl.c - rbtrace -p PID -i: a Ruby prompt in the target process.
 *
 * One attach (session.c) for the whole REPL. Each entry is sent as one
 * EVAL, with a new id, and its answer printed: "=> inspect" on stdout, an
 * exception's text as it is, a syntax error's message; all of them text of
 * the target's, escaped (escape.h). When the syntax
 * error only says that the input ended too soon (unfinished.c), the
 * entry is kept, one more line read (continuation prompt) and the whole
 * entry sent again; the target only compiles code that does not parse, so
 * nothing runs twice.
 *
 * Lines come from libedit's readline() when stdin and stdout are terminals
 * and the client was built with it (RBTRACE_HAVE_LIBEDIT; the library is
 * loaded then, editline.c), else from getline() on stdin (a pipe: no
 * prompts).
 *
 * Signals: the session counts SIGINT, SIGTERM and SIGHUP (session.c).
 * libedit's own handling is off (rl_catch_signals = 0) and it reads through
 * repl_getc, which waits in ppoll() with those signals blocked everywhere
 * else: a signal that comes while the editor works between two keys is
 * not lost, as it would be if only a blocking read(2) could see it. On a
 * signal repl_getc reports an end of input, readline() returns NULL, and
 * session_take_signal() tells ^C (drop the line) from SIGTERM/SIGHUP
 * (detach) and from a real end of input (no signal: detach). A ^C that
 * comes after the line's last key drops the line too. repl_getc also checks
 * every REPL_TICK_MS that the target still exists, so that its end shows
 * at once on a terminal (from a pipe, it shows when the next entry is sent).
 */
#define _GNU_SOURCE /* getline */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "editline.h"
#include "escape.h"
#include "protocol.h"
#include "repl.h"
#include "session.h"
#include "unfinished.h"

#define REPL_HISTORY_FILE ".rbtrace_history"
/* Lines kept in the history. */
#define REPL_HISTORY_MAX 1000
/* How often the editor checks that the target still exists. */
#define REPL_TICK_MS 250
/* The longest entry, in bytes: far more than anyone types or pastes. */
#define REPL_ENTRY_MAX (64 * 1024 * 1024)

/* What reading a line gave. */
enum repl_read {
    REPL_LINE,      /* a line, appended to the entry */
    REPL_BLANK,     /* nothing to send: a blank line at the prompt, or a dropped entry */
    REPL_INTERRUPT, /* ^C: drop the entry */
    REPL_EOF,       /* end of input (Ctrl-D): detach */
    REPL_STOP,      /* SIGTERM or SIGHUP: detach */
    REPL_GONE,      /* the target exited while we waited for a key */
    REPL_ERR        /* could not read, or out of memory (said so) */
};

/* What sending an entry gave. */
enum repl_step {
    REPL_GO_ON, /* read the next line */
    REPL_ENDED, /* the session ended: session_end says how */
    REPL_FAILED /* could not write the output (said so) */
};

struct repl {
    const struct options *opts;
    struct session *session;
    int tty;              /* stdin is a terminal: prompts, newlines after ^C/^D */
    int editing;          /* libedit reads the lines (stdin and stdout are terminals) */
    char prompt[48];      /* "rbtrace(PID)> " */
    char more_prompt[48]; /* "rbtrace(PID)* ": the lines that continue an entry */
    char *entry;          /* the entry so far: its lines joined by '\n', NUL-terminated */
    size_t len;           /* its length */
    size_t cap;           /* its buffer's size */
    char *line;           /* getline's buffer */
    size_t line_cap;      /* its size */
    int incomplete;       /* the last answer: the entry needs more lines */
    char *syntax;         /* that answer's message (shown if the input ends there) */
    int history_dir;      /* $HOME, opened and checked; -1: no history */
};

/* ---- the answers ---- */

/* text without its trailing newlines, then one newline, on stdout; the
 * target's text, escaped as multi-line text (escape.h), after
 * ESCAPE_BODY_NOTE on stderr if it had to be. */
static void repl_print(const char *prefix, const char *text, size_t len)
{
    while (len > 0 && text[len - 1] == '\n') len--;
    if (escape_body_needed(text, len)) {
        fflush(stdout);
        fprintf(stderr, "%s\n", ESCAPE_BODY_NOTE);
    }
    fputs(prefix, stdout);
    escape_fwrite_body(stdout, text, len);
    fputc('\n', stdout);
}

/* session_eval_sink: prints the answer, or notes that the entry needs
 * more lines. Write errors show when repl_flush flushes stdout. */
static void repl_on_result(void *ctx, uint32_t status, const char *text, size_t len)
{
    struct repl *r = ctx;

    r->incomplete = 0;
    switch (status) {
    case RBTRACE_EVAL_OK:
        repl_print("=> ", text, len);
        return;
    case RBTRACE_EVAL_RAISED:
        repl_print("", text, len);
        return;
    case RBTRACE_EVAL_SYNTAX:
        if (syntax_error_unfinished(text, len)) {
            r->incomplete = 1;
            free(r->syntax);
            r->syntax = strndup(text, len); /* NULL (no memory): a shorter note at EOF */
            return;
        }
        repl_print("", text, len);
        return;
    case RBTRACE_EVAL_TIMEOUT:
        fflush(stdout);
        fprintf(stderr,
                "rbtrace: the code did not finish within %g s; it was stopped in the "
                "process\n",
                r->opts->timeout);
        return;
    }
    fflush(stdout);
    fprintf(stderr, "rbtrace: unknown eval status %u: ", (unsigned)status);
    escape_fwrite(stderr, text, len, 0);
    fputc('\n', stderr);
}

/* A write error on stdout (full disk, closed pipe) ends the REPL. */
static enum repl_step repl_flush(void)
{
    if (fflush(stdout) == 0) return REPL_GO_ON;
    fprintf(stderr, "rbtrace: could not write the output: %s\n", strerror(errno));
    return REPL_FAILED;
}

static void repl_drop_entry(struct repl *r)
{
    r->len = 0;
    if (r->entry) r->entry[0] = '\0';
    r->incomplete = 0;
    free(r->syntax);
    r->syntax = NULL;
}

/* Sends the entry and shows what came of it. */
static enum repl_step repl_send(struct repl *r)
{
    switch (session_eval_code(r->session, r->entry, (uint32_t)r->len, repl_on_result, r)) {
    case SESSION_EVAL_ANSWERED:
        if (!r->incomplete) repl_drop_entry(r);
        return repl_flush();
    case SESSION_EVAL_INTERRUPTED:
        repl_drop_entry(r);
        fprintf(stderr,
                "%srbtrace: interrupted; the code goes on in process %d until it ends "
                "or its timeout (%g s) stops it, and the next entry runs after it\n",
                r->tty ? "\n" : "", (int)r->opts->pid, r->opts->timeout);
        return REPL_GO_ON;
    case SESSION_EVAL_UNANSWERED:
        repl_drop_entry(r);
        fprintf(stderr,
                "rbtrace: no answer from process %d within %g s: its answer, if it "
                "comes, will not be shown\n",
                (int)r->opts->pid, r->opts->timeout);
        return REPL_GO_ON;
    case SESSION_EVAL_ENDED:
        break;
    }
    return REPL_ENDED;
}

/* ---- the lines ---- */

/* Appends line (n bytes) to the entry, after a '\n' if it has lines. */
static enum repl_read repl_append(struct repl *r, const char *line, size_t n)
{
    size_t need = r->len + (r->len ? 1 : 0) + n + 1;

    if (r->len == 0 && strspn(line, " \t\r") == n) return REPL_BLANK;
    if (need > REPL_ENTRY_MAX) {
        fprintf(stderr, "rbtrace: the entry is longer than %d MiB: dropped\n",
                REPL_ENTRY_MAX >> 20);
        repl_drop_entry(r);
        return REPL_BLANK;
    }
    if (need > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        char *entry;

        while (cap < need) cap *= 2;
        entry = realloc(r->entry, cap);
        if (!entry) {
            fprintf(stderr, "rbtrace: out of memory\n");
            return REPL_ERR;
        }
        r->entry = entry;
        r->cap = cap;
    }
    if (r->len) r->entry[r->len++] = '\n';
    memcpy(r->entry + r->len, line, n);
    r->len += n;
    r->entry[r->len] = '\0';
    return REPL_LINE;
}

/* After a read that gave no line: ^C, another signal, or the end. */
static enum repl_read repl_no_line(struct repl *r)
{
    int sig = session_take_signal(r->session);

    if (sig == SIGINT) return REPL_INTERRUPT;
    if (sig) return REPL_STOP;
    return REPL_EOF;
}

static enum repl_read repl_plain_line(struct repl *r, const char *prompt)
{
    ssize_t n;

    if (r->tty) fputs(prompt, stderr);
    n = getline(&r->line, &r->line_cap, stdin);
    if (n >= 0) {
        if (n > 0 && r->line[n - 1] == '\n') n--;
        return repl_append(r, r->line, (size_t)n);
    }
    if (ferror(stdin)) {
        int err = errno;

        clearerr(stdin);
        if (err == EINTR) return repl_no_line(r);
        fprintf(stderr, "rbtrace: could not read the input: %s\n", strerror(err));
        return REPL_ERR;
    }
    return repl_no_line(r);
}

#ifdef RBTRACE_HAVE_LIBEDIT
static struct editline repl_editline; /* libedit, once loaded */

/* What repl_getc needs: libedit's hook takes no context. */
static struct session *repl_getc_session;
static sigset_t repl_getc_mask; /* the signal mask outside readline() */
static int repl_getc_gone;      /* repl_getc found the target gone */

/*
 * A ^D typed while an entry ran, when libedit did not hold the terminal,
 * was taken by the tty's canonical mode as an end of file; once libedit
 * switches the terminal to raw mode, Linux hands it over as a NUL byte.
 * Read back as the ^D it was (^@, set-mark, is all a NUL would do).
 */
#define REPL_CTRL_D 0x04

/*
 * libedit's rl_getc_function: one byte of the terminal, or -1 (end of
 * input, for libedit) on a signal, an end of input or an error. Called
 * with the session's signals blocked: they come only inside ppoll.
 */
static int repl_getc(FILE *in)
{
    const struct timespec tick = { 0, REPL_TICK_MS * 1000000L };
    struct pollfd pfd = { fileno(in), POLLIN, 0 };
    unsigned char c;
    ssize_t n;

    for (;;) {
        if (session_signal_pending(repl_getc_session)) return -1;
        n = ppoll(&pfd, 1, &tick, &repl_getc_mask);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) {
            if (session_target_alive(repl_getc_session)) continue;
            repl_getc_gone = 1;
            return -1;
        }
        n = read(pfd.fd, &c, 1);
        if (n == 1) return c == '\0' ? REPL_CTRL_D : c;
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        return -1; /* end of input, or the terminal went away (EIO) */
    }
}

/* readline() with the session's signals blocked but in repl_getc. */
static char *repl_readline(const char *prompt)
{
    sigset_t block;
    char *line;

    session_signal_set(&block);
    if (sigprocmask(SIG_BLOCK, &block, &repl_getc_mask) < 0) {
        fprintf(stderr, "rbtrace: sigprocmask: %s\n", strerror(errno));
        return NULL;
    }
    line = repl_editline.readline(prompt);
    if (sigprocmask(SIG_SETMASK, &repl_getc_mask, NULL) < 0)
        fprintf(stderr, "rbtrace: sigprocmask: %s\n", strerror(errno));
    return line;
}

static enum repl_read repl_edited_line(struct repl *r, const char *prompt)
{
    char *line = repl_readline(prompt);
    enum repl_read rc;

    if (!line) return repl_getc_gone ? REPL_GONE : repl_no_line(r);
    rc = repl_append(r, line, strlen(line));
    if (rc == REPL_LINE && *line)
        (void)repl_editline.add_history(line); /* a line the history misses loses nothing else */
    free(line);
    return rc;
}
#endif

/* Reads one line into the entry. */
static enum repl_read repl_read_line(struct repl *r)
{
    const char *prompt = r->len ? r->more_prompt : r->prompt;
    int sig = session_take_signal(r->session);
    enum repl_read rc;

    /* A ^C that came while we printed concerns what was already done. */
    if (sig && sig != SIGINT) return REPL_STOP;
#ifdef RBTRACE_HAVE_LIBEDIT
    rc = r->editing ? repl_edited_line(r, prompt) : repl_plain_line(r, prompt);
#else
    rc = repl_plain_line(r, prompt);
#endif
    if (rc != REPL_LINE || !session_signal_pending(r->session)) return rc;
    return repl_no_line(r); /* a signal after the line's last key */
}

/* A newline on the terminal, where the prompt is, after ^C or ^D. */
static void repl_end_line(struct repl *r)
{
    if (!r->tty) return;
    fputc('\n', r->editing ? stdout : stderr);
    fflush(stdout);
}

/* The input ended inside an entry that needs more lines. */
static void repl_unfinished(struct repl *r)
{
    if (r->syntax) repl_print("", r->syntax, strlen(r->syntax));
    fflush(stdout);
    fprintf(stderr, "rbtrace: the input ended inside an unfinished entry: it was not run\n");
}

static enum cli_exit repl_loop(struct repl *r)
{
    for (;;) {
        switch (repl_read_line(r)) {
        case REPL_LINE:
            break;
        case REPL_BLANK:
            continue;
        case REPL_INTERRUPT:
            repl_drop_entry(r);
            repl_end_line(r);
            continue;
        case REPL_EOF:
            repl_end_line(r);
            if (r->len) repl_unfinished(r);
            return CLI_EXIT_OK;
        case REPL_STOP:
        case REPL_GONE: /* session_end finds it gone and says so */
            repl_end_line(r);
            return CLI_EXIT_OK;
        case REPL_ERR:
            return CLI_EXIT_FAIL;
        }
        switch (repl_send(r)) {
        case REPL_GO_ON:
            continue;
        case REPL_ENDED:
            return CLI_EXIT_OK; /* session_end gives the real exit code */
        case REPL_FAILED:
            return CLI_EXIT_FAIL;
        }
    }
}

/* ---- the history (libedit only) ---- */

/*
 * ~/.rbtrace_history is only ever a plain file of the user that runs
 * rbtrace (its effective uid), in a home directory of that user's that
 * nobody else may write to. Under `sudo -E`, root with the user's HOME,
 * the home is not root's: there is no history, rather than root reading
 * or writing a path the user controls (a symbolic link to /etc/shadow).
 * The directory is opened once and checked; the file is opened in it with
 * O_NOFOLLOW and checked through its descriptor (a plain file, ours, one
 * link), for reading and again for writing, so that nothing swapped in
 * between is used. libedit reads it through /proc/self/fd (the same open
 * file, not the path); we write it ourselves in libedit's format, as
 * libedit's write_history would open the path again and chmod it. A new
 * file is created 0600 with O_EXCL; an existing one keeps its mode.
 */
#ifdef RBTRACE_HAVE_LIBEDIT

/* HOME for the messages, or "" (repl_history_dir found none). */
static const char *repl_home(void)
{
    const char *home = getenv("HOME");

    return home ? home : "";
}

/* Opens and checks $HOME into r->history_dir; -1 (no history) when HOME
 * is unset, empty or too long (silently), or fails a check (said why). */
static void repl_history_dir(struct repl *r)
{
    const char *home = getenv("HOME");
    struct stat st;
    int fd;

    r->history_dir = -1;
    if (!home || !*home || strlen(home) >= PATH_MAX) return;
    fd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "rbtrace: no history: cannot open HOME (%s): %s\n", home, strerror(errno));
        return;
    }
    if (fstat(fd, &st) < 0) {
        fprintf(stderr, "rbtrace: no history: cannot stat HOME (%s): %s\n", home, strerror(errno));
    } else if (st.st_uid != geteuid()) {
        fprintf(stderr,
                "rbtrace: no history: HOME (%s) belongs to uid %u, not to uid %u that "
                "runs rbtrace (sudo -E keeps your HOME): run rbtrace as that user, or give it a "
                "HOME of its own\n",
                home, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        fprintf(stderr,
                "rbtrace: no history: HOME (%s) may be written by other users; make it "
                "yours alone (chmod go-w %s) or set HOME to a directory of your own\n",
                home, home);
    } else {
        r->history_dir = fd;
        return;
    }
    close(fd);
}

/* Checks the open history file fd: a plain file of ours with one link.
 * 0, or -1 (said why: no history). */
static int repl_history_check(int fd)
{
    struct stat st;
    const char *why = NULL;

    if (fstat(fd, &st) < 0) {
        fprintf(stderr, "rbtrace: no history: cannot stat %s/" REPL_HISTORY_FILE ": %s\n",
                repl_home(), strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) why = "is not a plain file";
    else if (st.st_uid != geteuid()) why = "belongs to another user";
    else if (st.st_nlink != 1) why = "has other hard links";
    if (!why) return 0;
    fprintf(stderr,
            "rbtrace: no history: %s/" REPL_HISTORY_FILE " %s; rbtrace keeps its history "
            "only in a plain file of its own: remove it to start a new one\n",
            repl_home(), why);
    return -1;
}

/* Opens the history file in the checked directory, with flags (O_NOFOLLOW
 * added); checks it. The descriptor; -2 when it does not exist (and flags
 * do not create it); -1 when it must not be used (said why). */
static int repl_history_open(struct repl *r, int flags)
{
    int fd = openat(r->history_dir, REPL_HISTORY_FILE, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                    0600);

    if (fd < 0) {
        if (errno == ENOENT) return -2;
        if (errno == ELOOP)
            fprintf(stderr,
                    "rbtrace: no history: %s/" REPL_HISTORY_FILE " is a symbolic link; "
                    "rbtrace reads and writes only a plain file there: remove the link\n",
                    repl_home());
        else
            fprintf(stderr, "rbtrace: no history: cannot open %s/" REPL_HISTORY_FILE ": %s\n",
                    repl_home(), strerror(errno));
        return -1;
    }
    if (repl_history_check(fd) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Stops using the history (a check failed). */
static void repl_history_off(struct repl *r)
{
    if (r->history_dir >= 0) close(r->history_dir);
    r->history_dir = -1;
}

static void repl_history_load(struct repl *r)
{
    char path[64];
    int fd, err;

    repl_editline.stifle_history(REPL_HISTORY_MAX);
    repl_history_dir(r);
    if (r->history_dir < 0) return;
    fd = repl_history_open(r, O_RDONLY);
    if (fd == -2) return; /* none yet */
    if (fd < 0) {
        repl_history_off(r);
        return;
    }
    /* libedit opens a path: this one is the file we checked, not a name. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    err = repl_editline.read_history(path);
    if (err != 0)
        fprintf(stderr,
                "rbtrace: could not read the history file %s/" REPL_HISTORY_FILE ": %s "
                "(it will be written anew)\n",
                repl_home(), strerror(err));
    close(fd);
}

/* One history line as libedit writes it (strvis, VIS_WHITE): a backslash,
 * white space and control bytes as \ooo, the rest as it is. */
static void repl_history_put_line(FILE *f, const char *line)
{
    const unsigned char *p;

    for (p = (const unsigned char *)line; *p; p++) {
        if (*p == '\\' || *p <= ' ' || *p == 0x7f) fprintf(f, "\\%03o", *p);
        else fputc(*p, f);
    }
    fputc('\n', f);
}

/* Writes the history, in libedit's format, to the checked file: created
 * 0600 if there was none. */
static void repl_history_save(struct repl *r)
{
    HIST_ENTRY **list;
    FILE *f;
    int fd, i;

    if (r->history_dir < 0) return;
    fd = repl_history_open(r, O_WRONLY);
    if (fd == -2) fd = repl_history_open(r, O_WRONLY | O_CREAT | O_EXCL);
    if (fd < 0) return; /* said why; -2 again: it came and went, leave it */
    if (ftruncate(fd, 0) < 0 || !(f = fdopen(fd, "w"))) {
        fprintf(stderr, "rbtrace: could not write the history file %s/" REPL_HISTORY_FILE ": %s\n",
                repl_home(), strerror(errno));
        close(fd);
        return;
    }
    fputs("_HiStOrY_V2_\n", f);
    list = *repl_editline.history_length > 0 ? repl_editline.history_list() : NULL;
    for (i = 0; list && list[i]; i++)
        if (list[i]->line) repl_history_put_line(f, list[i]->line);
    if (fclose(f) != 0)
        fprintf(stderr, "rbtrace: could not write the history file %s/" REPL_HISTORY_FILE ": %s\n",
                repl_home(), strerror(errno));
}

/* Loads libedit and sets it up: these before anything else of libedit's,
 * which reads them once. 0, or -1 (said so: lines are read plain). */
static int repl_editor_init(struct repl *r)
{
    char err[256];

    if (editline_load(&repl_editline, err, sizeof(err)) < 0) {
        fprintf(stderr,
                "rbtrace: could not load libedit (%s): lines are read plain, "
                "without editing or history; install libedit (Debian: libedit2) for them\n",
                err);
        return -1;
    }
    *repl_editline.readline_name = "rbtrace"; /* for "rbtrace:" lines in ~/.editrc */
    *repl_editline.catch_signals = 0;         /* see the top of this file */
    *repl_editline.getc_function = repl_getc;
    repl_getc_session = r->session;
    repl_history_load(r);
    return 0;
}

const char *repl_line_editing(void)
{
    return "on a terminal, lines are edited with libedit, history in ~/.rbtrace_history";
}
#else
const char *repl_line_editing(void)
{
    return "plain lines: this rbtrace was built without libedit (no editing, no history)";
}
#endif

/* ---- the REPL ---- */

static void repl_init(struct repl *r, const struct options *opts, struct session *s)
{
    memset(r, 0, sizeof(*r));
    r->opts = opts;
    r->session = s;
    r->tty = isatty(STDIN_FILENO);
    snprintf(r->prompt, sizeof(r->prompt), "rbtrace(%d)> ", (int)opts->pid);
    snprintf(r->more_prompt, sizeof(r->more_prompt), "rbtrace(%d)* ", (int)opts->pid);
    r->history_dir = -1;
#ifdef RBTRACE_HAVE_LIBEDIT
    r->editing = r->tty && isatty(STDOUT_FILENO);
    if (r->editing && repl_editor_init(r) < 0) r->editing = 0;
#endif
}

static void repl_free(struct repl *r)
{
#ifdef RBTRACE_HAVE_LIBEDIT
    if (r->editing) repl_history_save(r);
    repl_history_off(r);
#endif
    free(r->entry);
    free(r->line);
    free(r->syntax);
}

enum cli_exit repl_run(const struct options *opts)
{
    struct session *s;
    struct repl r;
    enum cli_exit rc = session_start(opts, &s);

    if (rc != CLI_EXIT_OK) return rc;
    repl_init(&r, opts, s);
    rc = repl_loop(&r);
    repl_free(&r);
    return session_end(s, rc);
}
