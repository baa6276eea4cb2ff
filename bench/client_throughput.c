/*
 * client_throughput.c - how many CALL/RETURN events per second the real
 * rbtrace client renders, with nothing else competing for it.
 *
 * This program plays the target: it creates the message queue the client
 * looks for, maps rbtrace.so (the client checks /proc/PID/maps for it),
 * starts the client on its own pid, answers ATTACH with ATTACHED, and once
 * METHODS arrives (on the connection) it writes the METHOD names, then the events as fast as the
 * socket takes them (a pre-encoded block sent over and over), then DETACHED.
 * The client then exits by itself. The time from the first event to the
 * client's exit, and the client's CPU time, give the rates.
 *
 *   cc -O2 -std=gnu99 -Iext/rbtrace -o tmp/client_throughput \
 *      bench/client_throughput.c ext/rbtrace/codec.c -lmsgpackc
 *   tmp/client_throughput [-n MILLION_EVENTS] [-c CLIENT] [-s flat|nested]
 *                         [-F text|json|chrome|folded|summary] [-o FILE]
 *                         [-- CLIENT_OPTIONS...]
 *
 *   for f in text json chrome folded summary; do for s in flat nested; do
 *     tmp/client_throughput -n 10 -s $s -F $f; done; done
 *
 * Defaults: 10 million events, lib/rbtrace/rbtrace-client, flat, the text
 * format (-F: the client's --format, or summary for --summary), the trace
 * to /dev/null. flat is `-m 'Hash#key?'`: CALL and RETURN of one method.
 * nested is A { B } : every other line is a return on a line of its own.
 * Events are from one thread with 64-bit ids and times, encoded as the
 * target encodes them: each block's first in full, the rest as CALL_NEXT and
 * RETURN_NEXT (time since the event before).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "codec.h"

#define BLOCK_EVENTS 65536            /* events per pre-encoded block (even) */
#define THREAD_ID 0x7f3a12345678ULL   /* like a Ruby VALUE */
#define TIME_BASE 10000000000ULL      /* 10 s after the clock origin */
#define WAIT_MS 5000

struct bench {
    long events;                      /* how many CALL/RETURN events to send */
    const char *client;
    const char *output;               /* -o for the client, or NULL */
    const char *format;               /* --format for the client, or NULL */
    int nested;
    char **client_args;               /* extra options for the client */
    int qid;
    int conn;
    pid_t child;
};

static void die(const char *what)
{
    fprintf(stderr, "client_throughput: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void fail(const char *msg)
{
    fprintf(stderr, "client_throughput: %s\n", msg);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0) die("clock_gettime");
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("write to the client");
        p += n;
        len -= (size_t)n;
    }
}

/* The client refuses a target whose maps do not name rbtrace.so. */
static void map_rbtrace_so(void)
{
    const char *path = "lib/rbtrace/rbtrace.so";
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) die(path);
    if (mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) die("mmap");
    if (close(fd) < 0) die("close");
}

static void start_client(struct bench *b)
{
    char pid[32];
    char *argv[64];
    int n = 0, fd;

    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    argv[n++] = (char *)b->client;
    argv[n++] = "-p";
    argv[n++] = pid;
    argv[n++] = "-m";
    argv[n++] = "Hash#key?";
    if (b->output) {
        argv[n++] = "-o";
        argv[n++] = (char *)b->output;
    }
    if (b->format && !strcmp(b->format, "summary")) {
        argv[n++] = "--summary";
    } else if (b->format) {
        argv[n++] = "--format";
        argv[n++] = (char *)b->format;
    }
    while (b->client_args && *b->client_args && n < 63) argv[n++] = *b->client_args++;
    argv[n] = NULL;
    b->child = fork();
    if (b->child < 0) die("fork");
    if (b->child > 0) return;
    fd = open("/dev/null", O_WRONLY);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) die("/dev/null");
    execv(b->client, argv);
    die(b->client);
}

/* buf (len bytes) decoded into cmd; its strings point into buf. */
static void decode(const char *buf, size_t len, struct rbtrace_command *cmd)
{
    char err[RBTRACE_ERRLEN];
    msgpack_zone zone;

    if (!msgpack_zone_init(&zone, 4096)) fail("out of memory");
    if (rbtrace_command_decode(buf, len, &zone, cmd, err) != RBTRACE_OK) fail(err);
    msgpack_zone_destroy(&zone);   /* only numbers and buf's strings are used */
}

/* The client's ATTACH, one message in the queue (protocol.h). */
static void receive_attach(struct bench *b, char *buf, size_t cap, struct rbtrace_command *cmd)
{
    struct rbtrace_msg msg;
    double deadline = now_s() + WAIT_MS / 1000.0;

    for (;;) {
        ssize_t n = msgrcv(b->qid, &msg, sizeof(msg.mtext), RBTRACE_MSG_TYPE, IPC_NOWAIT);
        if (n < 0 && errno != ENOMSG && errno != EINTR) die("msgrcv");
        if (n > 0) {
            if ((size_t)n - 1 > cap) fail("command too long");
            memcpy(buf, msg.mtext + 1, (size_t)n - 1);
            decode(buf, (size_t)n - 1, cmd);
            return;
        }
        if (now_s() > deadline || waitpid(b->child, NULL, WNOHANG) != 0)
            fail("the client sent no command");
        if (usleep(1000) < 0 && errno != EINTR) die("usleep");
    }
}

static void read_all(int fd, char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("read from the client");
        if (n == 0) fail("the client closed the connection");
        p += n;
        len -= (size_t)n;
    }
}

/* A command after the attach: a frame on the connection (protocol.h). */
static void receive_frame(struct bench *b, char *buf, size_t cap, struct rbtrace_command *cmd)
{
    unsigned char h[RBTRACE_FRAME_HEADER];
    size_t len;

    read_all(b->conn, (char *)h, sizeof(h));
    len = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
    if (len > cap) fail("command too long");
    read_all(b->conn, buf, len);
    decode(buf, len, cmd);
}

static void connect_back(struct bench *b, const struct rbtrace_command *cmd)
{
    struct sockaddr_un sun;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (cmd->text.len >= sizeof(sun.sun_path)) fail("socket path too long");
    memcpy(sun.sun_path, cmd->text.ptr, cmd->text.len);
    b->conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (b->conn < 0) die("socket");
    if (connect(b->conn, (struct sockaddr *)&sun, sizeof(sun)) < 0) die("connect");
}

static void send_packed(struct bench *b, void (*pack)(msgpack_packer *, void *), void *arg)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack(&pk, arg);
    write_all(b->conn, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* A fixed wall clock (2023-11-14 22:13:20 UTC): -t output is the same
 * from run to run, to compare clients. */
static void pack_attached(msgpack_packer *pk, void *arg)
{
    (void)arg;
    rbtrace_event_pack_attached(pk, (uint32_t)getpid(), "3.1.2", 0, 1700000000000000000ULL);
}

static void pack_methods(msgpack_packer *pk, void *arg)
{
    (void)arg;
    rbtrace_event_pack_method(pk, 1, "Hash#key?", 9);
    rbtrace_event_pack_method(pk, 2, "Hash#[]", 7);
}

static void pack_detached(msgpack_packer *pk, void *arg)
{
    (void)arg;
    rbtrace_event_pack_detached(pk);
}

static void pack_synced(msgpack_packer *pk, void *arg)
{
    (void)arg;
    rbtrace_event_pack_synced(pk, 1);
}

/* What an app does between the attach and the trace: the client sends its
 * modes (METHODS, answered with the methods' names; THREAD_NAMES, which a
 * fake app with one thread leaves unanswered), then SYNC, answered SYNCED
 * with something traced (protocol 9). */
static void serve_until_synced(struct bench *b, char *buf, size_t size, struct rbtrace_command *cmd)
{
    int methods = 0;

    for (;;) {
        receive_frame(b, buf, size, cmd);
        if (cmd->type == RBTRACE_CMD_METHODS) {
            send_packed(b, pack_methods, NULL);
            methods = 1;
        } else if (cmd->type == RBTRACE_CMD_SYNC) {
            if (!methods) fail("expected METHODS before SYNC");
            send_packed(b, pack_synced, NULL);
            return;
        } else if (cmd->type != RBTRACE_CMD_THREAD_NAMES) {
            fail("expected METHODS, THREAD_NAMES or SYNC");
        }
    }
}

/* BLOCK_EVENTS events: flat (CALL 1, RETURN 1) or nested (CALL 1, CALL 2,
 * RETURN 2, RETURN 1), with times rising by hundreds of ns, and now and
 * then by up to a second (durations of every size). */
static char *encode_block(int nested, size_t *len)
{
    char *buf = malloc((size_t)BLOCK_EVENTS * RBTRACE_CALL_EVENT_MAX);
    uint64_t t = TIME_BASE;
    struct rbtrace_call_chain chain;
    size_t n = 0;
    long i;

    memset(&chain, 0, sizeof(chain));
    if (!buf) fail("out of memory");
    for (i = 0; i < BLOCK_EVENTS; i++) {
        int step = nested ? (int)(i % 4) : (int)(i % 2) * 3;
        enum rbtrace_event_type type = step < 2 ? RBTRACE_EV_CALL : RBTRACE_EV_RETURN;
        uint64_t method = (step == 1 || step == 2) ? 2 : 1;

        t += 150 + (uint64_t)(i * 7919 % 400);
        if (i % 64 == 63) t += (uint64_t)(i * 104729 % 1000000000);
        n += rbtrace_event_encode_call_chained(buf + n, &chain, type, THREAD_ID, t, method);
        rbtrace_call_chain_note(&chain, THREAD_ID, t);
    }
    *len = n;
    return buf;
}

static void parse_args(struct bench *b, int argc, char **argv)
{
    int c;

    memset(b, 0, sizeof(*b));
    b->events = 10000000;
    b->client = "lib/rbtrace/rbtrace-client";
    while ((c = getopt(argc, argv, "n:c:s:o:F:")) != -1) {
        switch (c) {
        case 'n': b->events = (long)(atof(optarg) * 1e6); break;
        case 'c': b->client = optarg; break;
        case 's': b->nested = !strcmp(optarg, "nested"); break;
        case 'o': b->output = optarg; break;
        case 'F': b->format = optarg; break;
        default: exit(2);
        }
    }
    b->client_args = argv + optind;
    b->events -= b->events % BLOCK_EVENTS;
    if (b->events <= 0) b->events = BLOCK_EVENTS;
}

int main(int argc, char **argv)
{
    static char cmdbuf[RBTRACE_COMMAND_MAX];
    struct rbtrace_command *cmd = malloc(sizeof(*cmd));
    struct bench b;
    struct rusage ru;
    size_t block_len;
    char *block;
    double t0, t1, cpu;
    long sent;
    int status;

    parse_args(&b, argc, argv);
    if (!cmd) fail("out of memory");
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) die("signal");
    map_rbtrace_so();
    b.qid = msgget(RBTRACE_QUEUE_KEY(getpid()), IPC_CREAT | IPC_EXCL | 0600);
    if (b.qid < 0) die("msgget");
    block = encode_block(b.nested, &block_len);
    start_client(&b);

    receive_attach(&b, cmdbuf, sizeof(cmdbuf), cmd);
    if (cmd->type != RBTRACE_CMD_ATTACH) fail("expected ATTACH");
    connect_back(&b, cmd);
    send_packed(&b, pack_attached, NULL);
    serve_until_synced(&b, cmdbuf, sizeof(cmdbuf), cmd);

    t0 = now_s();
    for (sent = 0; sent < b.events; sent += BLOCK_EVENTS) write_all(b.conn, block, block_len);
    send_packed(&b, pack_detached, NULL);
    if (wait4(b.child, &status, 0, &ru) < 0) die("wait4");
    t1 = now_s();

    if (msgctl(b.qid, IPC_RMID, NULL) < 0) die("msgctl");
    if (close(b.conn) < 0) die("close");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("the client failed");
    cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
          ru.ru_stime.tv_usec / 1e6;
    printf("%s, %s, %s: %ld events in %.3f s: %.2f M events/s; client CPU %.3f s: %.2f M events/CPU-s\n",
           b.client, b.format ? b.format : "text", b.nested ? "nested" : "flat", b.events, t1 - t0, b.events / (t1 - t0) / 1e6,
           cpu, b.events / cpu / 1e6);
    free(block);
    free(cmd);
    return 0;
}
