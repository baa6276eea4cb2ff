/*
 * session.c - the client's event loop.
 *
 * Reads the target's socket into a buffer of its own, decodes each event
 * and hands it to the trace's format (format.h), or acts on it (ATTACHED, REFUSED, DETACHED,
 * EVAL_RESULT, ERROR, NOTICE); the decoding is stream.c's. SIGINT, SIGTERM
 * and SIGHUP only count and write a byte to a self-pipe; the loop polls
 * that pipe with the socket, and every 200 ms checks that the target still
 * exists. --duration SECS ends a trace as the first of those signals does.
 *
 * Every byte of the target's that is printed (trace events, results,
 * reports, notices, errors) is escaped (escape.h): the app must not write
 * to the client's terminal.
 *
 * Output to a file or pipe is buffered in big blocks and flushed whenever
 * the socket has nothing more to read, so that a busy trace costs few
 * writes and a quiet one still shows at once.
 */
#define _GNU_SOURCE /* accept4, pipe2, struct ucred */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "attach.h"
#include "inject.h"
#include "escape.h"
#include "format.h"
#include "inject.h"
#include "reports.h"
#include "samples.h"
#include "session.h"
#include "stream.h"

#define SESSION_TICK_MS 200
/* How long a held raise line waits for re-raises once the target is quiet
 * (render.h): the re-raises of one exception come microseconds apart, but
 * for the thread losing the GVL between them (Rails' DebugExceptions logs
 * before it re-raises): Ruby gives each busy thread 100 ms in turn. */
#define SESSION_RERAISE_MS 500
/* The read buffer's size (it grows for bigger events), and the output's. */
#define SESSION_READ_SIZE (256 * 1024)
#define SESSION_OUT_BUFFER (256 * 1024)
/* Eval: how long past its own timeout we wait for the target's answer. */
#define SESSION_EVAL_GRACE_MS 2000
/* The -e eval's id; the REPL's evals count up from it. */
#define SESSION_EVAL_ID 1

/* The signals a session counts: they end a trace, or interrupt an eval. */
static const int session_signal_list[] = { SIGINT, SIGTERM, SIGHUP };
#define SESSION_NSIGNALS (sizeof(session_signal_list) / sizeof(session_signal_list[0]))

/* Signals seen; read by attach.c through struct attach's stop. */
static volatile sig_atomic_t session_signals;
/* The number of the last signal caught (the REPL tells ^C from the rest). */
static volatile sig_atomic_t session_last_signal;
/* The self-pipe: [0] polled by the loop, [1] written by the handler. */
static int session_wake[2] = { -1, -1 };
/* The output's buffer: static, as stdout is closed after the session. */
static char session_out_buffer[SESSION_OUT_BUFFER];

/* What a wait ended with. */
enum session_wait {
    SESSION_DONE,      /* the flag we waited for was set */
    SESSION_TIMEOUT,   /* the deadline passed */
    SESSION_SIGNAL,    /* the user asked us to stop */
    SESSION_EOF,       /* the target closed the connection */
    SESSION_GONE,      /* the target exited */
    SESSION_MALFORMED, /* the target sent something we cannot decode */
    SESSION_FAILED     /* our error (output, memory), in errstr */
};

/* Bytes read from the socket: data[head, tail) are not decoded yet. */
struct session_input {
    char *data;
    size_t cap;
    size_t head;
    size_t tail;
};

struct session {
    const struct options *opts;
    struct attach at;
    struct format *format; /* how the trace is written (--format) */
    FILE *out;             /* stdout or the -o file */
    struct session_input in;
    struct stream stream;        /* the decoder of the target's bytes */
    int timeout_ms;              /* --timeout */
    int eval_timeout_ms;         /* the eval's: --timeout, or longer for the dumps */
    sig_atomic_t signals_seen;   /* signals already acted on */
    int answered;                /* ATTACHED or REFUSED received */
    int attached;                /* ATTACHED received */
    int detached;                /* DETACHED received */
    int say_attached_at_sync;    /* a trace: "attached" once SYNCED comes */
    int sync_wait_over;          /* SYNCED, or DETACHED before it, received */
    int traces_nothing;          /* SYNCED said nothing is traced */
    int gvl_unsupported;         /* --gvl asked of a target without its hooks */
    uint64_t features;           /* ATTACHED's: what the target can do */
    int stream_broken;           /* undecodable bytes: stop reading */
    int eval_done;               /* our EVAL_RESULT received */
    enum cli_exit eval_exit;     /* the exit code that result calls for */
    uint32_t eval_id;            /* the id of the eval we wait for */
    session_eval_sink eval_sink; /* the REPL's: takes the result instead of */
    void *eval_sink_ctx;         /* printing it as -e does; NULL for -e */
    int ended;                   /* the REPL's session cannot go on: */
    enum session_wait end_wait;  /* how its last wait ended */
    int64_t top_at_ms;           /* --top: when the last view was drawn (0: none yet) */
    int64_t quiet_since_ms;      /* when the socket was last found empty with a
                                  raise line held, or 0: the quiet's start */
    int out_failed;              /* the output could not be written (a closed
                                  pipe: | head): said once, written no more */
    char errstr[CLI_ERRLEN];     /* why the session failed (SESSION_FAILED) */
};

/* ---- signals ---- */

static void session_on_signal(int sig)
{
    int saved = errno;

    session_signals = session_signals + 1;
    session_last_signal = sig;
    if (write(session_wake[1], "!", 1) < 0) {
        /* The pipe is full: the loop is already awake. */
    }
    errno = saved;
}

void session_signal_set(sigset_t *set)
{
    size_t i;

    sigemptyset(set);
    for (i = 0; i < SESSION_NSIGNALS; i++) sigaddset(set, session_signal_list[i]);
}

static int session_install_signals(struct session *s)
{
    struct sigaction sa;
    size_t i;

    if (pipe2(session_wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        snprintf(s->errstr, sizeof(s->errstr), "pipe: %s", strerror(errno));
        return CLI_ERR;
    }
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = session_on_signal;
    for (i = 0; i < SESSION_NSIGNALS; i++) {
        if (sigaction(session_signal_list[i], &sa, NULL) < 0) goto fail;
    }
    /* A closed output pipe is a write error we report, not a death. */
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &sa, NULL) < 0) goto fail;
    return CLI_OK;
fail:
    snprintf(s->errstr, sizeof(s->errstr), "sigaction: %s", strerror(errno));
    return CLI_ERR;
}

static void session_drain_wake(void)
{
    char buf[64];

    while (read(session_wake[0], buf, sizeof(buf)) > 0) {
    }
}

/* ---- output ---- */

static void session_vstatus(struct session *s, int end_line, const char *fmt, va_list ap)
{
    if (end_line && s->format) format_end_line(s->format);
    fflush(s->out);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

/*
 * A status line on stderr, after any pending output. An open line on
 * stdout is ended first (both usually share a terminal); one in a -o file
 * stays open for its duration.
 */
static void session_status(struct session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void session_status(struct session *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    session_vstatus(s, s->out == stdout, fmt, ap);
    va_end(ap);
}

/*
 * A status line that ends with text of the target's: fmt's text, then the
 * text escaped, on one line; or, lines set, as multi-line text the user
 * asked for (a syntax error's message), after ESCAPE_BODY_NOTE if that
 * text had to be escaped.
 */
static void session_status_text(struct session *s, int lines, struct rbtrace_str text,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void session_status_text(struct session *s, int lines, struct rbtrace_str text,
                                const char *fmt, ...)
{
    va_list ap;

    if (s->out == stdout && s->format) format_end_line(s->format);
    fflush(s->out);
    if (lines && escape_body_needed(text.ptr, text.len)) fprintf(stderr, "%s\n", ESCAPE_BODY_NOTE);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (lines) escape_fwrite_body(stderr, text.ptr, text.len);
    else escape_fwrite(stderr, text.ptr, text.len, 0);
    fputc('\n', stderr);
}

/* The output failed (errno set, or the format's errstr given): the
 * session fails with why, once; from then on nothing is written to it, so
 * that the detach that follows cannot fail, and say so, again. CLI_ERR. */
static int session_output_failed(struct session *s, const char *format_errstr)
{
    if (format_errstr) snprintf(s->errstr, sizeof(s->errstr), "%s", format_errstr);
    else snprintf(s->errstr, sizeof(s->errstr), "could not write the output: %s", strerror(errno));
    s->out_failed = 1;
    return CLI_ERR;
}

/*
 * A result the user asked for (-e, a report) on the output, escaped as
 * multi-line text (escape.h), after ESCAPE_BODY_NOTE on stderr if it had to
 * be. CLI_OK, or CLI_ERR with errstr set.
 */
static int session_print_body(struct session *s, struct rbtrace_str text)
{
    if (escape_body_needed(text.ptr, text.len)) {
        fflush(s->out);
        fprintf(stderr, "%s\n", ESCAPE_BODY_NOTE);
    }
    if (escape_fwrite_body(s->out, text.ptr, text.len) == 0) return CLI_OK;
    return session_output_failed(s, NULL);
}

/* The session's last status line: the open line ends, wherever it is. */
static void session_final_status(struct session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void session_final_status(struct session *s, const char *fmt, ...)
{
    va_list ap;

    if (s->opts->stats && s->attached) {
        format_end_line(s->format);
        fflush(s->out);
        fprintf(stderr, "*** %llu events received, %llu lost\n",
                (unsigned long long)s->format->received, (unsigned long long)s->format->lost);
    }
    va_start(ap, fmt);
    session_vstatus(s, 1, fmt, ap);
    va_end(ap);
}

static int session_flush(struct session *s)
{
    if (s->out_failed || fflush(s->out) == 0) return CLI_OK;
    return session_output_failed(s, NULL);
}

static double session_timeout_s(const struct session *s)
{
    return s->timeout_ms / 1000.0;
}

/* ---- events ---- */

static int session_on_attached(struct session *s, const struct rbtrace_event *ev)
{
    s->answered = 1;
    if (ev->number != RBTRACE_PROTOCOL_VERSION) {
        session_status(s,
                       "rbtrace: process %d speaks protocol version %llu, this rbtrace %d: "
                       "use the rbtrace of the app's gem",
                       (int)s->at.pid, (unsigned long long)ev->number, RBTRACE_PROTOCOL_VERSION);
        return CLI_OK;
    }
    s->attached = 1;
    s->features = ev->features;
    format_set_wall_origin(s->format, ev->wall_origin_ns);
    /* Here, not once the wait for it ends: a one-shot run's result may come
     * in the same read (session_attach), and is printed as it is handled. A
     * trace says it once the target has taken its modes (session_on_synced). */
    if (!s->say_attached_at_sync) fprintf(stderr, "*** attached to process %d\n", (int)s->at.pid);
    return CLI_OK;
}

/* SYNCED: what the app does from here on is traced; the user (or a script
 * that waits for the line) may go on. The trace's first lines may come
 * before it: an open one is left open (on a terminal, its text is still in
 * stdout's buffer and shows after this line, whole). A trace of nothing
 * says so instead, and fails (session_traces_nothing). */
static int session_on_synced(struct session *s, const struct rbtrace_event *ev)
{
    if (s->sync_wait_over) return CLI_OK;
    s->sync_wait_over = 1;
    s->traces_nothing = ev->number == 0;
    if (s->traces_nothing) return CLI_OK;
    if (s->gvl_unsupported)
        session_status(s,
                       "*** --gvl needs Ruby 3.2 or newer (its thread event hooks), and process %d "
                       "runs an older Ruby: tracing without GVL waits",
                       (int)s->at.pid);
    fprintf(stderr, "*** attached to process %d\n", (int)s->at.pid);
    return CLI_OK;
}

static int session_on_refused(struct session *s, const struct rbtrace_event *ev)
{
    s->answered = 1;
    if (ev->number == RBTRACE_REFUSED_BUSY && ev->pid == 0) /* a client outside its PID namespace */
        session_status(s,
                       "rbtrace: process %d is already traced by an rbtrace outside its "
                       "container; stop that tracer first",
                       (int)s->at.pid);
    else if (ev->number == RBTRACE_REFUSED_BUSY)
        session_status(s,
                       "rbtrace: process %d is already traced by rbtrace (pid %llu%s); stop "
                       "that tracer first",
                       (int)s->at.pid, (unsigned long long)ev->pid,
                       s->at.ct.pid_ns ? ", inside its container" : "");
    else session_status_text(s, 0, ev->text, "rbtrace: ");
    return CLI_OK;
}

/*
 * A dump written by a target in a container is in the container's files:
 * says where the host sees it, /proc/PID/root and the path the report's
 * first line names ("heap dump: PATH"), escaped (the app's text).
 */
static void session_container_file(struct session *s, struct rbtrace_str text)
{
    const char *colon = memchr(text.ptr, ':', text.len < 64 ? text.len : 64), *end;
    size_t len;

    if ((s->opts->mode != OPTIONS_MODE_HEAPDUMP && s->opts->mode != OPTIONS_MODE_SHAPESDUMP) ||
        !s->at.ct.mnt_ns || !colon || colon + 2 >= text.ptr + text.len || colon[1] != ' ' ||
        colon[2] != '/')
        return;
    colon += 2;
    end = memchr(colon, '\n', (size_t)(text.ptr + text.len - colon));
    len = (size_t)((end ? end : text.ptr + text.len) - colon);
    fprintf(stderr, "*** the file is in the container of process %d; from the host: /proc/%d/root",
            (int)s->at.pid, (int)s->at.pid);
    escape_fwrite(stderr, colon, len < PATH_MAX ? len : PATH_MAX, 0);
    fputc('\n', stderr);
}

/* A report's result: its text as is on success; a failure on stderr. */
static int session_on_report_result(struct session *s, const struct rbtrace_event *ev)
{
    const char *what = reports_option(s->opts->mode);

    switch (ev->status) {
    case RBTRACE_EVAL_OK:
        if (session_print_body(s, ev->text) != CLI_OK) return CLI_ERR;
        s->eval_exit = CLI_EXIT_OK;
        if (session_flush(s) != CLI_OK) return CLI_ERR;
        session_container_file(s, ev->text);
        return CLI_OK;
    case RBTRACE_EVAL_TIMEOUT:
        session_status(s,
                       "rbtrace: %s did not finish within %g s; it was stopped in the "
                       "process (give a longer --timeout)",
                       what, s->eval_timeout_ms / 1000.0);
        return CLI_OK;
    default:
        session_status_text(s, 1, ev->text, "rbtrace: %s failed in process %d: ", what,
                            (int)s->at.pid);
        return CLI_OK;
    }
}

static int session_on_eval_result(struct session *s, const struct rbtrace_event *ev)
{
    if (ev->number != s->eval_id || s->eval_done) return CLI_OK;
    s->eval_done = 1;
    if (s->eval_sink) {
        s->eval_sink(s->eval_sink_ctx, ev->status, ev->text.ptr, ev->text.len);
        return CLI_OK;
    }
    s->eval_exit = CLI_EXIT_FAIL;
    if (reports_is_report(s->opts->mode)) return session_on_report_result(s, ev);
    switch (ev->status) {
    case RBTRACE_EVAL_OK:
    case RBTRACE_EVAL_RAISED:
        fprintf(s->out, ">> %s\n=> ", s->opts->eval_code);
        if (session_print_body(s, ev->text) != CLI_OK) return CLI_ERR;
        fputc('\n', s->out);
        if (ev->status == RBTRACE_EVAL_OK) s->eval_exit = CLI_EXIT_OK;
        return session_flush(s);
    case RBTRACE_EVAL_SYNTAX:
        session_status_text(s, 1, ev->text, "rbtrace: syntax error in the code: ");
        return CLI_OK;
    case RBTRACE_EVAL_TIMEOUT:
        /* The code's line, as with a result: which code it was (the
         * output may be a file, the status goes to the terminal). */
        fprintf(s->out, ">> %s\n", s->opts->eval_code);
        if (session_flush(s) != CLI_OK) return CLI_ERR;
        session_status(s,
                       "rbtrace: the code did not finish within %g s; it was stopped in the "
                       "process",
                       s->eval_timeout_ms / 1000.0);
        return CLI_OK;
    }
    session_status_text(s, 0, ev->text, "rbtrace: unknown eval status %u: ", ev->status);
    return CLI_OK;
}

static int session_render(struct session *s, const struct rbtrace_event *ev)
{
    if (!s->attached || s->out_failed) return CLI_OK;
    if (format_event(s->format, ev) == CLI_OK) return CLI_OK;
    return session_output_failed(s, s->format->errstr);
}

static int session_on_event(struct session *s, const struct rbtrace_event *ev)
{
    switch (ev->type) {
    case RBTRACE_EV_ATTACHED:
        return session_on_attached(s, ev);
    case RBTRACE_EV_REFUSED:
        return session_on_refused(s, ev);
    case RBTRACE_EV_DETACHED:
        s->detached = 1;
        s->sync_wait_over = 1;
        return CLI_OK;
    case RBTRACE_EV_SYNCED:
        return session_on_synced(s, ev);
    case RBTRACE_EV_EVAL_RESULT:
        return session_on_eval_result(s, ev);
    case RBTRACE_EV_ERROR:
        session_status_text(s, 0, ev->text, "*** error: ");
        return CLI_OK;
    case RBTRACE_EV_NOTICE:
        session_status_text(s, 0, ev->text, "*** ");
        return CLI_OK;
    default:
        return session_render(s, ev);
    }
}

static enum session_wait session_malformed(struct session *s, const char *why)
{
    session_status(s, "*** malformed event from process %d: %s", (int)s->at.pid, why);
    return SESSION_MALFORMED;
}

static enum session_wait session_handled(int cli_rc)
{
    return cli_rc == CLI_OK ? SESSION_DONE : SESSION_FAILED;
}

/* Decodes and handles every complete event in the input (stream.h). */
static enum session_wait session_decode(struct session *s)
{
    struct session_input *in = &s->in;
    enum session_wait rc = SESSION_DONE;

    while (rc == SESSION_DONE && in->head < in->tail) {
        size_t used = 0;

        switch (stream_next(&s->stream, in->data + in->head, in->tail - in->head, &used)) {
        case STREAM_EVENT:
            /* CALL and RETURN, nearly every event, straight to the format */
            rc = session_handled(s->stream.fast ? session_render(s, s->stream.ev)
                                                : session_on_event(s, s->stream.ev));
            break;
        case STREAM_PARTIAL:
            return rc;
        case STREAM_BAD_EVENT:
            rc = session_malformed(s, s->stream.errstr);
            break;
        case STREAM_BROKEN:
            s->stream_broken = 1;
            return session_malformed(s, s->stream.errstr);
        }
        in->head += used;
    }
    return rc;
}

/* Room to read into: the undecoded rest moved to the front, the buffer
 * doubled when one incomplete event fills it. */
static int session_input_room(struct session *s)
{
    struct session_input *in = &s->in;
    char *data;

    if (in->head > 0) {
        memmove(in->data, in->data + in->head, in->tail - in->head);
        in->tail -= in->head;
        in->head = 0;
    }
    if (in->tail < in->cap) return CLI_OK;
    data = realloc(in->data, in->cap * 2);
    if (!data) {
        snprintf(s->errstr, sizeof(s->errstr), "out of memory");
        return CLI_ERR;
    }
    in->data = data;
    in->cap *= 2;
    return CLI_OK;
}

/* One read from the socket; SESSION_DONE when it went well. */
static enum session_wait session_read(struct session *s)
{
    struct session_input *in = &s->in;
    ssize_t n;

    if (session_input_room(s) != CLI_OK) return SESSION_FAILED;
    n = read(s->at.conn_fd, in->data + in->tail, in->cap - in->tail);
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) return SESSION_DONE;
        if (errno == ECONNRESET) return SESSION_EOF;
        snprintf(s->errstr, sizeof(s->errstr), "could not read from the process: %s",
                 strerror(errno));
        return SESSION_FAILED;
    }
    if (n == 0) return SESSION_EOF;
    in->tail += (size_t)n;
    return session_decode(s);
}

/* Milliseconds to poll: until the next tick, or the deadline if sooner. */
static int session_poll_ms(int64_t now, int64_t next_tick, int64_t deadline)
{
    int64_t ms = next_tick - now;

    if (deadline >= 0 && deadline - now < ms) ms = deadline - now;
    return ms < 0 ? 0 : (int)ms;
}

/*
 * Lets in a signal that came while they were blocked (ppoll only does when
 * it sleeps, and a busy stream keeps it from sleeping). 1 if one came.
 */
static int session_deliver_pending(const sigset_t *outside)
{
    sigset_t pending, blocked;
    size_t i;

    if (sigpending(&pending) < 0) return 0;
    for (i = 0; i < SESSION_NSIGNALS && !sigismember(&pending, session_signal_list[i]); i++)
        ;
    if (i == SESSION_NSIGNALS) return 0;
    /* The handler runs as the mask lets it in; cannot fail with valid sets. */
    (void)sigprocmask(SIG_SETMASK, outside, &blocked);
    (void)sigprocmask(SIG_SETMASK, &blocked, NULL);
    return 1;
}

/*
 * poll, but once the socket has nothing more to read, the output goes out
 * before we sleep; the session's signals come in only while it sleeps
 * (ppoll with the mask from outside the wait). SESSION_DONE,
 * SESSION_SIGNAL if a signal interrupted it, or SESSION_FAILED with errstr
 * set.
 */
static enum session_wait session_poll(struct session *s, struct pollfd *fds, int timeout_ms,
                                      const sigset_t *outside)
{
    int n;

    if (session_deliver_pending(outside)) return SESSION_SIGNAL;
    n = poll(fds, 2, 0);
    if (n == 0) {
        /* A held raise line waits for re-raises to fold into it until the
         * target has been quiet SESSION_RERAISE_MS (however many waits
         * that takes: a tick may end one sooner), then is printed, so
         * that a pipe or -p PID PID gets it whole. */
        int raise_open = format_raise_open(s->format);
        int64_t now = cli_now_ms();
        int wait_ms = timeout_ms;
        struct timespec ts;

        if (raise_open) {
            int64_t left;

            if (s->quiet_since_ms == 0) s->quiet_since_ms = now;
            left = s->quiet_since_ms + SESSION_RERAISE_MS - now;
            if (left < 0) left = 0;
            if (left < wait_ms) wait_ms = (int)left;
        }
        ts.tv_sec = wait_ms / 1000;
        ts.tv_nsec = (long)(wait_ms % 1000) * 1000000L;
        if (session_flush(s) != CLI_OK) return SESSION_FAILED;
        n = ppoll(fds, 2, &ts, outside);
        if (n == 0 && raise_open && cli_now_ms() - s->quiet_since_ms >= SESSION_RERAISE_MS) {
            s->quiet_since_ms = 0;
            if (!s->out_failed && format_end_line(s->format) != CLI_OK) {
                session_output_failed(s, s->format->errstr);
                return SESSION_FAILED;
            }
            if (session_flush(s) != CLI_OK) return SESSION_FAILED;
        }
    }
    if (n > 0) s->quiet_since_ms = 0; /* events (or a signal): not quiet */
    if (n >= 0) return SESSION_DONE;
    if (errno == EINTR) return SESSION_SIGNAL;
    snprintf(s->errstr, sizeof(s->errstr), "poll: %s", strerror(errno));
    return SESSION_FAILED;
}

/* --top: a view a second (the first a second after the wait began). */
#define SESSION_TOP_MS 1000

/* --top's view of the samples of the last second. CLI_OK or CLI_ERR
 * (errstr set). */
static int session_top(struct session *s, int64_t now)
{
    struct samples_top how = { 0 };
    struct winsize ws;
    int fd = fileno(s->out);

    how.tty = isatty(fd);
    /* a terminal: as many methods as its lines leave (header 2, the
     * threads, the cursor's line); else 20 */
    how.rows = 20;
    if (how.tty && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
        size_t threads = s->format->samples ? s->format->samples->n_threads : 0;
        long rows = (long)ws.ws_row - 4 - (long)threads;

        how.rows = rows < 5 ? 5 : (unsigned)rows;
    }
    how.pid = (int)s->at.pid;
    how.mode = s->opts->profile == 1 + RBTRACE_PROFILE_CPU ? "cpu" : "wall";
    how.hz = s->opts->hz;
    how.secs = (double)(now - s->top_at_ms) / 1000.0;
    s->top_at_ms = now;
    if (format_top(s->format, &how) != CLI_OK || session_flush(s) != CLI_OK) {
        snprintf(s->errstr, sizeof(s->errstr), "%s", s->format->errstr);
        return CLI_ERR;
    }
    return CLI_OK;
}

/* session_wait's loop, with the session's signals blocked but in ppoll. */
static enum session_wait session_wait_events(struct session *s, const int *flag, int64_t deadline,
                                             const sigset_t *outside)
{
    int64_t now = cli_now_ms(), next_tick = now + SESSION_TICK_MS;

    for (;;) {
        struct pollfd fds[2] = { { s->at.conn_fd, POLLIN, 0 }, { session_wake[0], POLLIN, 0 } };
        enum session_wait rc;

        if (*flag) return SESSION_DONE;
        if (session_signals != s->signals_seen) {
            s->signals_seen = session_signals;
            return SESSION_SIGNAL;
        }
        if (s->stream_broken) return SESSION_EOF;
        now = cli_now_ms();
        if (now >= next_tick) {
            if (!attach_target_alive(&s->at)) return SESSION_GONE;
            next_tick = now + SESSION_TICK_MS;
        }
        if (deadline >= 0 && now >= deadline) return SESSION_TIMEOUT;
        if (s->opts->top && s->sync_wait_over && !s->traces_nothing) {
            if (!s->top_at_ms) s->top_at_ms = now;
            if (now >= s->top_at_ms + SESSION_TOP_MS && session_top(s, now) != CLI_OK)
                return SESSION_FAILED;
        }
        rc = session_poll(s, fds,
                          session_poll_ms(now,
                                          s->opts->top && s->top_at_ms &&
                                                  s->top_at_ms + SESSION_TOP_MS < next_tick
                                              ? s->top_at_ms + SESSION_TOP_MS
                                              : next_tick,
                                          deadline),
                          outside);
        if (rc == SESSION_SIGNAL) continue; /* counted, if it was ours: see above */
        if (rc != SESSION_DONE) return rc;
        if (fds[1].revents) session_drain_wake();
        if (fds[0].revents && (rc = session_read(s)) != SESSION_DONE) return rc;
    }
}

/*
 * Reads and handles events until *flag is set, the deadline (-1: none)
 * passes, the user interrupts, or the target goes away; then flushes the
 * output (a failure to write it fails only a wait that went well: the
 * error sticks to the FILE and shows again when it is closed).
 *
 * SIGINT, SIGTERM and SIGHUP are blocked meanwhile but for the sleeps: a
 * ^C that came while a write to a slow pipe was blocked made it fail with
 * EINTR, and stdio then drops what it had buffered (the trace lost its
 * end, the client failed). It now waits for the write, and is acted on
 * at the next sleep.
 */
static enum session_wait session_wait(struct session *s, const int *flag, int64_t deadline)
{
    enum session_wait rc;
    sigset_t block, outside;

    session_signal_set(&block);
    if (sigprocmask(SIG_BLOCK, &block, &outside) < 0) {
        snprintf(s->errstr, sizeof(s->errstr), "sigprocmask: %s", strerror(errno));
        return SESSION_FAILED;
    }
    rc = session_wait_events(s, flag, deadline, &outside);
    if (session_flush(s) != CLI_OK && rc == SESSION_DONE) rc = SESSION_FAILED;
    if (sigprocmask(SIG_SETMASK, &outside, NULL) < 0 && rc == SESSION_DONE) {
        snprintf(s->errstr, sizeof(s->errstr), "sigprocmask: %s", strerror(errno));
        rc = SESSION_FAILED;
    }
    return rc;
}

/* ---- setup and teardown ---- */

/* A terminal stays line-buffered, so that a live trace shows line by
 * line; a file or a pipe gets big writes. */
static int session_buffer_output(struct session *s)
{
    if (isatty(fileno(s->out))) return CLI_OK;
    if (setvbuf(s->out, session_out_buffer, _IOFBF, sizeof(session_out_buffer)) == 0) return CLI_OK;
    snprintf(s->errstr, sizeof(s->errstr), "could not buffer the output");
    return CLI_ERR;
}

static int session_open_output(struct session *s)
{
    const struct options *o = s->opts;

    if (!o->output_path) {
        s->out = stdout;
        return session_buffer_output(s);
    }
    s->out = cli_open_output(o->output_path, o->append, s->errstr, sizeof(s->errstr));
    return s->out ? session_buffer_output(s) : CLI_ERR;
}

static int session_alloc(struct session *s)
{
    s->in.data = malloc(SESSION_READ_SIZE);
    s->in.cap = SESSION_READ_SIZE;
    if (s->in.data && stream_init(&s->stream) == CLI_OK) return CLI_OK;
    snprintf(s->errstr, sizeof(s->errstr), "out of memory");
    return CLI_ERR;
}

static int session_init(struct session *s, const struct options *opts)
{
    struct format_opts fopts = { { opts->start_time, opts->no_duration, opts->prefix,
                                   opts->raise_all, opts->gvl_ms >= 0,
                                   (uint64_t)(opts->gvl_ms * 1e6 + 0.5), opts->alloc,
                                   opts->alloc_sample, opts->thread_names },
                                 (int)opts->pid,
                                 opts->sort,
                                 opts->profile != 0,
                                 opts->hz,
                                 opts->profile ? opts->profile - 1 : 0 };

    memset(s, 0, sizeof(*s));
    s->opts = opts;
    s->eval_id = SESSION_EVAL_ID;
    s->timeout_ms = (int)(opts->timeout * 1000 + 0.5);
    if (s->timeout_ms < 1) s->timeout_ms = 1;
    s->eval_timeout_ms = reports_timeout_ms(opts, s->timeout_ms);
    attach_init(&s->at, opts->pid, s->timeout_ms, &session_signals, -1);
    if (session_open_output(s) != CLI_OK) return CLI_ERR;
    if (format_open(opts->format, s->out, &fopts, &s->format) != CLI_OK) {
        snprintf(s->errstr, sizeof(s->errstr), "out of memory");
        return CLI_ERR;
    }
    if (session_alloc(s) != CLI_OK) return CLI_ERR;
    if (session_install_signals(s) != CLI_OK) return CLI_ERR;
    s->at.wake_fd = session_wake[0];
    return CLI_OK;
}

/* Releases everything; a failing close of the output makes rc a failure. */
static enum cli_exit session_close(struct session *s, enum cli_exit rc)
{
    int i;

    attach_close(&s->at);
    free(s->in.data);
    stream_free(&s->stream);
    /* The output whole, however the trace ended (chrome closes its
     * document, folded writes its stacks). */
    if (s->format && format_finish(s->format) != CLI_OK) {
        /* An output that failed during the trace (a closed pipe: | head)
         * fails again here: said once, then. */
        if (!s->out_failed) fprintf(stderr, "rbtrace: %s\n", s->format->errstr);
        if (rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    }
    /* What the output had no room for (speedscope's spans past its cap):
     * the last line, where it is seen. */
    if (s->format && s->format->note[0]) {
        if (s->out && !s->out_failed) fflush(s->out);
        fprintf(stderr, "*** %s\n", s->format->note);
    }
    /* -p PID PID --summary: multi.c combines the tables of the processes
     * traced (one never attached to has none to add) */
    if (s->format && s->attached && s->opts->summary_dump &&
        s->opts->format == OPTIONS_FORMAT_SUMMARY &&
        format_summary_dump(s->format, s->opts->summary_dump) != CLI_OK) {
        fprintf(stderr, "rbtrace: could not hand the summary on: %s\n", strerror(errno));
        if (rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    }
    format_close(s->format);
    s->format = NULL;
    for (i = 0; i < 2; i++) {
        if (session_wake[i] >= 0) close(session_wake[i]);
        session_wake[i] = -1;
    }
    if (s->out && s->out != stdout && fclose(s->out) != 0) {
        fprintf(stderr, "rbtrace: could not write %s: %s\n", s->opts->output_path, strerror(errno));
        if (rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
    }
    s->out = NULL;
    return rc;
}

/* ---- attach, detach, and the target's end ---- */

static enum cli_exit session_attach_error(struct session *s, int rc)
{
    if (rc == CLI_INTERRUPTED) fprintf(stderr, "rbtrace: interrupted before attaching\n");
    else fprintf(stderr, "rbtrace: %s\n", s->at.errstr);
    return CLI_EXIT_FAIL;
}

/*
 * Sends ATTACH and waits for the target to connect and answer. first, if
 * not NULL, is a one-shot run's command (-e, a report), sent on the
 * connection once the target said ATTACHED, as every command after the
 * attach is (protocol.h).
 */
static enum cli_exit session_attach(struct session *s, struct rbtrace_command *first)
{
    struct rbtrace_command cmd;
    int rc;

    memset(&cmd, 0, sizeof(cmd));
    if (s->opts->inject &&
        (rc = inject_rbtrace(s->at.pid, s->opts->inject_dir, s->timeout_ms, s->at.stop,
                             s->at.errstr, sizeof(s->at.errstr))) != CLI_OK)
        return session_attach_error(s, rc);
    if ((rc = attach_check_target(&s->at)) != CLI_OK) return session_attach_error(s, rc);
    if ((rc = attach_listen(&s->at)) != CLI_OK) return session_attach_error(s, rc);
    if ((rc = attach_find_queue(&s->at)) != CLI_OK) return session_attach_error(s, rc);
    cmd.type = RBTRACE_CMD_ATTACH;
    cmd.client_pid = (uint32_t)attach_client_pid(&s->at);
    cmd.protocol_version = RBTRACE_PROTOCOL_VERSION;
    cmd.text.ptr = s->at.sock_path;
    cmd.text.len = (uint32_t)strlen(s->at.sock_path);
    if ((rc = attach_send_attach(&s->at, &cmd)) != CLI_OK) return session_attach_error(s, rc);
    if ((rc = attach_accept(&s->at)) != CLI_OK) return session_attach_error(s, rc);

    switch (session_wait(s, &s->answered, cli_now_ms() + s->timeout_ms)) {
    case SESSION_DONE:
        /* Refused: already said why. Attached: said so (session_on_attached). */
        if (!s->attached) return CLI_EXIT_FAIL;
        if (!first) return CLI_EXIT_OK;
        first->client_pid = cmd.client_pid;
        if (attach_send(&s->at, first) == CLI_OK) return CLI_EXIT_OK;
        fprintf(stderr, "rbtrace: %s\n", s->at.errstr);
        return CLI_EXIT_FAIL;
    case SESSION_TIMEOUT:
        fprintf(stderr, "rbtrace: process %d did not answer the attach within %g s\n",
                (int)s->at.pid, session_timeout_s(s));
        return CLI_EXIT_FAIL;
    case SESSION_SIGNAL:
        return session_attach_error(s, CLI_INTERRUPTED);
    case SESSION_EOF:
        fprintf(stderr, "rbtrace: process %d closed the connection before attaching\n",
                (int)s->at.pid);
        return CLI_EXIT_FAIL;
    case SESSION_GONE:
        fprintf(stderr, "rbtrace: process %d exited\n", (int)s->at.pid);
        return CLI_EXIT_FAIL;
    case SESSION_MALFORMED:
        return CLI_EXIT_FAIL;
    case SESSION_FAILED:
        break;
    }
    fprintf(stderr, "rbtrace: %s\n", s->errstr);
    return CLI_EXIT_FAIL;
}

static enum cli_exit session_gone(struct session *s)
{
    session_final_status(s, "*** process %d exited", (int)s->at.pid);
    return CLI_EXIT_TARGET_GONE;
}

/* The connection closed without DETACHED: did the target exit? */
static enum cli_exit session_closed(struct session *s)
{
    int64_t deadline = cli_now_ms() + 1000;

    while (cli_now_ms() < deadline) {
        if (!attach_target_alive(&s->at)) return session_gone(s);
        cli_sleep_ms(10);
    }
    session_final_status(s, "*** process %d closed the connection", (int)s->at.pid);
    return CLI_EXIT_FAIL;
}

/* Sends DETACH, waits (bounded) for DETACHED, says so; returns rc. */
static enum cli_exit session_detach(struct session *s, enum cli_exit rc)
{
    struct rbtrace_command cmd;

    memset(&cmd, 0, sizeof(cmd));
    cmd.type = RBTRACE_CMD_DETACH;
    cmd.client_pid = (uint32_t)getpid();
    if (attach_send(&s->at, &cmd) != CLI_OK) {
        if (!attach_target_alive(&s->at)) return session_gone(s);
        session_status(s, "rbtrace: %s", s->at.errstr);
        return CLI_EXIT_FAIL;
    }
    switch (session_wait(s, &s->detached, cli_now_ms() + s->timeout_ms)) {
    case SESSION_GONE:
        return session_gone(s);
    case SESSION_TIMEOUT:
        session_status(s, "rbtrace: process %d did not confirm the detach within %g s",
                       (int)s->at.pid, session_timeout_s(s));
        break;
    case SESSION_FAILED:
        session_status(s, "rbtrace: %s", s->errstr);
        if (rc == CLI_EXIT_OK) rc = CLI_EXIT_FAIL;
        break;
    default:
        break;
    }
    session_final_status(s, "*** detached from process %d", (int)s->at.pid);
    return rc;
}

/* What to do when a wait for the end of a session ends. */
static enum cli_exit session_finish(struct session *s, enum session_wait w, enum cli_exit rc)
{
    switch (w) {
    case SESSION_DONE:
    case SESSION_SIGNAL:
        return session_detach(s, rc);
    case SESSION_TIMEOUT:
    case SESSION_MALFORMED:
        return session_detach(s, CLI_EXIT_FAIL);
    case SESSION_EOF:
        return session_closed(s);
    case SESSION_GONE:
        return session_gone(s);
    case SESSION_FAILED:
        break;
    }
    session_status(s, "rbtrace: %s", s->errstr);
    return session_detach(s, CLI_EXIT_FAIL);
}

/* ---- the modes ---- */

static enum cli_exit session_send_mode(struct session *s, struct rbtrace_command *cmd)
{
    cmd->client_pid = (uint32_t)getpid();
    if (attach_send(&s->at, cmd) == CLI_OK) return CLI_EXIT_OK;
    session_status(s, "rbtrace: %s", s->at.errstr);
    return CLI_EXIT_FAIL;
}

/* A command with no fields of its own (GC, RAISE, DEVMODE, RESUME). */
static enum cli_exit session_send_bare(struct session *s, enum rbtrace_command_type type)
{
    struct rbtrace_command cmd;

    memset(&cmd, 0, sizeof(cmd));
    cmd.type = type;
    return session_send_mode(s, &cmd);
}

/* --exec: the program waits for this once its tracing is set up. */
static enum cli_exit session_send_resume(struct session *s)
{
    return s->opts->resume ? session_send_bare(s, RBTRACE_CMD_RESUME) : CLI_EXIT_OK;
}

static void session_set_selectors(struct rbtrace_command *cmd, const char **selectors, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        cmd->selectors[i].ptr = selectors[i];
        cmd->selectors[i].len = (uint32_t)strlen(selectors[i]);
    }
    cmd->n_selectors = (uint32_t)n;
}

/*
 * --gvl, where the target has the thread event hooks (Ruby 3.2+). Where it
 * has not, it is said once SYNCED comes: the rest is traced, or, with
 * nothing else traced, the run fails (session_traces_nothing).
 */
static enum cli_exit session_send_gvl(struct session *s)
{
    const struct options *o = s->opts;

    if (o->gvl_ms < 0) return CLI_EXIT_OK;
    if (s->features & RBTRACE_FEATURE_GVL) return session_send_bare(s, RBTRACE_CMD_GVL);
    s->gvl_unsupported = 1;
    return CLI_EXIT_OK;
}

/* --alloc: the target counts objects, one in alloc_sample. */
static enum cli_exit session_send_alloc(struct session *s, struct rbtrace_command *cmd)
{
    if (!s->opts->alloc) return CLI_EXIT_OK;
    memset(cmd, 0, sizeof(*cmd));
    cmd->type = RBTRACE_CMD_ALLOC;
    cmd->sample = s->opts->alloc_sample;
    return session_send_mode(s, cmd);
}

/* --profile: the target samples every thread at o->hz. */
static enum cli_exit session_send_profile(struct session *s, struct rbtrace_command *cmd)
{
    if (!s->opts->profile) return CLI_EXIT_OK;
    memset(cmd, 0, sizeof(*cmd));
    cmd->type = RBTRACE_CMD_PROFILE;
    cmd->mode = (uint32_t)(s->opts->profile - 1);
    cmd->hz = s->opts->hz;
    return session_send_mode(s, cmd);
}

/* --thread-names, and json and chrome, whose viewers label threads by
 * name: asked first, so that the first calls come named. */
static enum cli_exit session_send_thread_names(struct session *s)
{
    const struct options *o = s->opts;

    if (!o->thread_names && o->format != OPTIONS_FORMAT_JSON && o->format != OPTIONS_FORMAT_CHROME)
        return CLI_EXIT_OK;
    return session_send_bare(s, RBTRACE_CMD_THREAD_NAMES);
}

/* The commands that start tracing: --raise and --gc first (so that they
 * see what the others do, e.g. selectors that fail), --gvl and --alloc (so
 * that the first calls have their waits and objects), --slow, then -m or
 * -f. */
static enum cli_exit session_send_modes(struct session *s, struct rbtrace_command *cmd)
{
    const struct options *o = s->opts;

    if (session_send_thread_names(s) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (o->raises && session_send_bare(s, RBTRACE_CMD_RAISE) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (o->gc && session_send_bare(s, RBTRACE_CMD_GC) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (session_send_gvl(s) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (session_send_alloc(s, cmd) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (session_send_profile(s, cmd) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (o->slow_ms >= 0) {
        memset(cmd, 0, sizeof(*cmd));
        cmd->type = RBTRACE_CMD_SLOW;
        cmd->threshold_ns = (uint64_t)(o->slow_ms * 1e6 + 0.5);
        cmd->cpu = o->slow_cpu;
        session_set_selectors(cmd, o->slow_selectors, o->n_slow_selectors);
        if (session_send_mode(s, cmd) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    }
    /* --exec: the program defines its classes after we attach. */
    if ((o->devmode || (o->resume && o->mode == OPTIONS_MODE_METHODS)) &&
        session_send_bare(s, RBTRACE_CMD_DEVMODE) != CLI_EXIT_OK)
        return CLI_EXIT_FAIL;
    if (o->mode == OPTIONS_MODE_FIREHOSE || o->mode == OPTIONS_MODE_METHODS) {
        memset(cmd, 0, sizeof(*cmd));
        cmd->type = o->mode == OPTIONS_MODE_FIREHOSE ? RBTRACE_CMD_FIREHOSE : RBTRACE_CMD_METHODS;
        session_set_selectors(cmd, o->selectors, o->n_selectors);
        if (session_send_mode(s, cmd) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    }
    if (session_send_bare(s, RBTRACE_CMD_SYNC) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    return session_send_resume(s);
}

/* The modes and SYNC, in one write (attach_cork). */
static enum cli_exit session_send_trace(struct session *s, struct rbtrace_command *cmd)
{
    enum cli_exit rc;

    attach_cork(&s->at);
    rc = session_send_modes(s, cmd);
    if (attach_uncork(&s->at) == CLI_OK || rc != CLI_EXIT_OK) return rc;
    session_status(s, "rbtrace: %s", s->at.errstr);
    return CLI_EXIT_FAIL;
}

/*
 * Waits for SYNCED (or the end). The app's thread carries out the commands
 * when it gets the GVL: if it has not within the time-out (an app thread
 * in a long C call holds it), says so once and waits on.
 */
static enum session_wait session_wait_synced(struct session *s)
{
    enum session_wait w = session_wait(s, &s->sync_wait_over, cli_now_ms() + s->timeout_ms);

    if (w != SESSION_TIMEOUT) return w;
    session_status(s,
                   "*** process %d has not started tracing within %g s: rbtrace's thread waits "
                   "for Ruby's lock (the GVL), which a long C call may hold; still waiting "
                   "(^C gives up)",
                   (int)s->at.pid, session_timeout_s(s));
    return session_wait(s, &s->sync_wait_over, -1);
}

/*
 * SYNCED said nothing is traced: every selector failed (the errors before
 * it say why) and no other mode is on. Waiting for ^C would show nothing:
 * says so, detaches, fails (exit status 1). --devmode is never "nothing":
 * it waits for its classes.
 */
static enum cli_exit session_traces_nothing(struct session *s)
{
    const struct options *o = s->opts;
    int pid = (int)s->at.pid;

    if (s->gvl_unsupported && o->mode == OPTIONS_MODE_NONE && o->slow_ms < 0 && !o->gc &&
        !o->raises && !o->alloc)
        session_status(s,
                       "rbtrace: --gvl needs Ruby 3.2 or newer (its thread event hooks), and "
                       "process %d runs an older Ruby: nothing to trace",
                       pid);
    else if (o->mode == OPTIONS_MODE_METHODS || o->n_slow_selectors)
        session_status(s,
                       "rbtrace: nothing to trace in process %d: no selector could be traced "
                       "(the errors above say why)%s. Check the names; for a class the app has "
                       "not loaded yet (a gem not required, a constant still to be autoloaded), "
                       "--devmode traces it once it is defined",
                       pid, s->gvl_unsupported ? ", and --gvl needs Ruby 3.2 or newer" : "");
    else
        session_status(s,
                       "rbtrace: nothing to trace in process %d: none of the modes asked for "
                       "could start (the errors above say why)",
                       pid);
    return session_detach(s, CLI_EXIT_FAIL);
}

/* When the trace ends by itself: --duration SECS after the "attached"
 * line (SYNCED: what the app does from then on is traced), or -1: never. */
static int64_t session_deadline(const struct session *s)
{
    double secs = s->opts->duration_s;
    int64_t ms;

    if (secs <= 0) return -1;
    ms = (int64_t)(secs * 1000 + 0.5);
    return cli_now_ms() + (ms < 1 ? 1 : ms);
}

/* -m, -f, --slow, --gc, --raise: render events until ^C, --duration or
 * the target goes away. */
static enum cli_exit session_trace(struct session *s)
{
    struct rbtrace_command *cmd = calloc(1, sizeof(*cmd));
    enum session_wait w;
    enum cli_exit rc;

    if (!cmd) {
        fprintf(stderr, "rbtrace: out of memory\n");
        return session_detach(s, CLI_EXIT_FAIL);
    }
    rc = session_send_trace(s, cmd);
    free(cmd);
    if (rc != CLI_EXIT_OK) return session_detach(s, rc);
    w = session_wait_synced(s);
    if (w == SESSION_DONE && s->traces_nothing) return session_traces_nothing(s);
    if (w == SESSION_DONE && !s->detached) w = session_wait(s, &s->detached, session_deadline(s));
    /* --duration is over: the end ^C makes (session_finish) */
    if (w == SESSION_TIMEOUT) w = SESSION_SIGNAL;
    if (w == SESSION_DONE) {
        /* The target detached on its own. */
        session_final_status(s, "*** detached from process %d", (int)s->at.pid);
        return CLI_EXIT_OK;
    }
    return session_finish(s, w, CLI_EXIT_OK);
}

/* -e and the reports: the command that runs the code. *report: the
 * report's code, to free once the command is sent. CLI_EXIT_OK, or
 * CLI_EXIT_FAIL (said so). */
static enum cli_exit session_eval_command(struct session *s, struct rbtrace_command *cmd,
                                          char **report)
{
    const char *code = s->opts->eval_code;

    memset(cmd, 0, sizeof(*cmd));
    *report = NULL;
    cmd->result_format = RBTRACE_RESULT_INSPECT;
    if (reports_is_report(s->opts->mode)) {
        if (reports_code(s->opts, report, s->errstr) != CLI_OK) {
            fprintf(stderr, "rbtrace: %s\n", s->errstr);
            return CLI_EXIT_FAIL;
        }
        code = *report;
        cmd->result_format = RBTRACE_RESULT_TEXT;
    }
    cmd->type = RBTRACE_CMD_EVAL;
    cmd->eval_id = SESSION_EVAL_ID;
    cmd->text.ptr = code;
    cmd->text.len = (uint32_t)strlen(code);
    cmd->timeout_ms = (uint32_t)s->eval_timeout_ms;
    return CLI_EXIT_OK;
}

/* -e and the reports, once attached with the command sent (session_run):
 * waits for its result, prints it, detaches. */
static enum cli_exit session_eval(struct session *s)
{
    enum session_wait w;

    if (session_send_resume(s) != CLI_EXIT_OK) return session_detach(s, CLI_EXIT_FAIL);
    w = session_wait(s, &s->eval_done, cli_now_ms() + s->eval_timeout_ms + SESSION_EVAL_GRACE_MS);
    if (w == SESSION_DONE) return session_detach(s, s->eval_exit);
    if (w == SESSION_TIMEOUT)
        session_status(s, "rbtrace: no eval result from process %d within %g s", (int)s->at.pid,
                       s->eval_timeout_ms / 1000.0);
    if (w == SESSION_SIGNAL) session_status(s, "rbtrace: interrupted");
    return session_finish(s, w, CLI_EXIT_FAIL);
}

enum cli_exit session_run(const struct options *opts)
{
    struct session s;
    enum cli_exit rc;

    if (session_init(&s, opts) != CLI_OK) {
        fprintf(stderr, "rbtrace: %s\n", s.errstr);
        return session_close(&s, CLI_EXIT_FAIL);
    }
    if (opts->mode == OPTIONS_MODE_EVAL || reports_is_report(opts->mode)) {
        struct rbtrace_command cmd;
        char *report;

        rc = session_eval_command(&s, &cmd, &report);
        if (rc == CLI_EXIT_OK) rc = session_attach(&s, &cmd);
        free(report);
        if (rc == CLI_EXIT_OK) rc = session_eval(&s);
    } else {
        s.say_attached_at_sync = 1;
        rc = session_attach(&s, NULL);
        if (rc == CLI_EXIT_OK) rc = session_trace(&s);
    }
    return session_close(&s, rc);
}

/* ---- one attach, many evals: the REPL's (repl.c) ---- */

enum cli_exit session_start(const struct options *opts, struct session **out)
{
    struct session *s = malloc(sizeof(*s));
    enum cli_exit rc;

    *out = NULL;
    if (!s) {
        fprintf(stderr, "rbtrace: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    if (session_init(s, opts) != CLI_OK) {
        fprintf(stderr, "rbtrace: %s\n", s->errstr);
        rc = CLI_EXIT_FAIL;
    } else {
        rc = session_attach(s, NULL);
    }
    if (rc == CLI_EXIT_OK) {
        *out = s;
        return rc;
    }
    rc = session_close(s, rc);
    free(s);
    return rc;
}

static enum session_eval_end session_eval_ended(struct session *s, enum session_wait w)
{
    s->ended = 1;
    s->end_wait = w;
    return SESSION_EVAL_ENDED;
}

enum session_eval_end session_eval_code(struct session *s, const char *code, uint32_t len,
                                        session_eval_sink sink, void *ctx)
{
    struct rbtrace_command cmd;
    enum session_wait w;

    if (s->ended) return SESSION_EVAL_ENDED;
    memset(&cmd, 0, sizeof(cmd));
    cmd.type = RBTRACE_CMD_EVAL;
    cmd.client_pid = (uint32_t)getpid();
    cmd.eval_id = ++s->eval_id; /* a late answer to an earlier one is ignored */
    cmd.text.ptr = code;
    cmd.text.len = len;
    cmd.timeout_ms = (uint32_t)s->timeout_ms;
    s->eval_done = 0;
    if (attach_send(&s->at, &cmd) != CLI_OK) {
        if (!attach_target_alive(&s->at)) return session_eval_ended(s, SESSION_GONE);
        snprintf(s->errstr, sizeof(s->errstr), "%s", s->at.errstr);
        return session_eval_ended(s, SESSION_FAILED);
    }
    s->eval_sink = sink;
    s->eval_sink_ctx = ctx;
    w = session_wait(s, &s->eval_done, cli_now_ms() + s->timeout_ms + SESSION_EVAL_GRACE_MS);
    s->eval_sink = NULL;
    s->eval_sink_ctx = NULL;
    switch (w) {
    case SESSION_DONE:
        return SESSION_EVAL_ANSWERED;
    case SESSION_TIMEOUT:
        return SESSION_EVAL_UNANSWERED;
    case SESSION_SIGNAL:
        if (session_last_signal == SIGINT) return SESSION_EVAL_INTERRUPTED;
        return session_eval_ended(s, w);
    default:
        return session_eval_ended(s, w);
    }
}

int session_target_alive(const struct session *s)
{
    return attach_target_alive(&s->at);
}

int session_signal_pending(const struct session *s)
{
    return session_signals != s->signals_seen;
}

int session_take_signal(struct session *s)
{
    if (session_signals == s->signals_seen) return 0;
    s->signals_seen = session_signals;
    return session_last_signal;
}

enum cli_exit session_end(struct session *s, enum cli_exit rc)
{
    if (s->ended) rc = session_finish(s, s->end_wait, rc);
    else rc = session_detach(s, rc);
    rc = session_close(s, rc);
    free(s);
    return rc;
}
