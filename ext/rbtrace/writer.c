/*
 * writer.c - the writer pthread: moves events from the ring buffer to the
 * client's socket, so that the app's threads never make a syscall for an
 * event and never wait for the client.
 *
 * It is a plain pthread with every signal blocked; it never touches Ruby.
 * It polls: while events flow it looks at the ring every millisecond
 * (WRITER_BATCH_MS), sending what it holds in one batch; after
 * WRITER_IDLE_LOOKS looks that found nothing it dozes (rbtrace_ring_doze):
 * it sleeps until the producer's next event wakes it through the eventfd
 * (a syscall on the app's thread, once per doze), or for WRITER_DOZE_MS at
 * most, so that an idle session costs the app ten wake-ups a second, not a
 * thousand. poll(2) watches the socket meanwhile, which also tells it when
 * the client has gone (hang-up or EOF): it then sets peer_gone and wakes
 * the helper thread, which detaches at the next safe point. Bytes from the
 * client are its commands: the writer reads none of them, it sets
 * sock_readable and wakes the helper thread, which reads them (channel.c),
 * and looks for more only once the helper cleared the flag and nudged it
 * (else poll would find the same bytes at once, and spin).
 *
 * Calls and returns wait for the next batch; the events a client waits on
 * (the attach's answer, an eval's result, a message, DETACHED) and a stop
 * nudge it awake through the eventfd, so that they do not wait out the
 * sleep.
 */
#include "state.h" /* first: ruby.h sets _GNU_SOURCE */
#include "clock.h"
#include "handoff.h"
#include "ring.h"
#include "writer.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* Sleep between looks at the ring while events flow: they go out in
 * batches a millisecond apart, not one send per event. */
#define WRITER_BATCH_MS 1

/* Looks in a row that find the ring empty before the writer dozes. Events
 * a few milliseconds apart or closer keep it looking (no wake-up syscall
 * on the app's threads); sparser ones each wake it. */
#define WRITER_IDLE_LOOKS 8

/* The longest doze: what bounds an event's wait in the race that
 * rbtrace_ring_doze allows (and nothing else: every other event, a stop,
 * a command wakes the writer). Ten wake-ups a second. */
#define WRITER_DOZE_MS 100

/* How long a writer waits for the client to make room in its socket. */
#define WRITER_ROOM_MS 10

/* How long a stopping writer keeps trying to deliver what is left. */
#define WRITER_DRAIN_MS 1000

/* The writer's eventfd: written by Ruby threads to end its sleep. */
static int writer_wake_fd = -1;

static void writer_peer_gone(void)
{
    rbtrace.peer_gone = 1;
    rbtrace_channel_wake();
}

/* Whether the client hung up; on the way, hands the commands it sent to
 * the helper thread. */
static int writer_hung_up(int fd, short revents)
{
    char byte;
    ssize_t n;

    if (revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return 1;
    if (!(revents & POLLIN)) return 0;
    n = recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n > 0) {
        rbtrace.sock_readable = 1;
        rbtrace_channel_wake();
        return 0;
    }
    return n == 0 || (errno != EAGAIN && errno != EINTR);
}

/* What to poll the socket for, besides room to write: commands, unless
 * the helper thread has yet to read those that came. */
static short writer_poll_events(void)
{
    return rbtrace.sock_readable ? POLLRDHUP : POLLIN | POLLRDHUP;
}

/* Sends what the ring holds. Returns 0, or -1 when the client is gone. */
static int writer_send_some(int fd)
{
    const char *data;
    size_t avail = rbtrace_ring_peek(&rbtrace.ring, &data);
    ssize_t n;

    if (avail == 0) return 0;
    n = send(fd, data, avail, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
        rbtrace_ring_consume(&rbtrace.ring, (size_t)n);
        return 0;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        /* The client reads slower than we write: wait for room, briefly. */
        struct pollfd p = { fd, POLLOUT | POLLRDHUP, 0 };
        if (poll(&p, 1, WRITER_ROOM_MS) < 0 && errno != EINTR) return -1;
        if (writer_hung_up(fd, p.revents & ~POLLIN)) return -1;
        return 0;
    }
    return -1;
}

/* Sends what the ring holds: two pieces when it wraps around. */
static int writer_flush(int fd)
{
    int i;

    for (i = 0; i < 2 && rbtrace_ring_used(&rbtrace.ring) > 0; i++)
        if (writer_send_some(fd) != 0) return -1;
    return 0;
}

/* Sleeps until the next batch or a nudge (for timeout_ms: 0 only looks).
 * Returns 1 if nudged, 0 if not, -1 if the client hung up. */
static int writer_sleep(int fd, int timeout_ms)
{
    struct pollfd p[2] = { { fd, writer_poll_events(), 0 }, { writer_wake_fd, POLLIN, 0 } };
    int r = poll(p, 2, timeout_ms);
    uint64_t nudges;

    if (r < 0) return errno == EINTR ? 0 : -1;
    if (r > 0 && writer_hung_up(fd, p[0].revents)) return -1;
    if (!(p[1].revents & POLLIN)) return 0;
    /* Resets the count. Should the read fail, the nudges only stay pending:
     * the sleeps end at once until the next read succeeds. */
    (void)!read(writer_wake_fd, &nudges, sizeof(nudges));
    return 1;
}

/* Any Ruby thread: ends the writer's sleep, so that what was just pushed
 * (or a stop) is seen now rather than at the next batch. */
void rbtrace_writer_nudge(void)
{
    static int reported;
    uint64_t one = 1;

    if (!rbtrace.writer_running) return;
    /* EAGAIN: the count is full, the writer is waking anyway. Otherwise
     * the events wait for the next look, WRITER_DOZE_MS at most: said once. */
    if (write(writer_wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN && errno != EINTR &&
        !reported) {
        reported = 1;
        fprintf(stderr,
                "rbtrace: waking the writer thread: %s (events reach the client "
                "up to %d ms later)\n",
                strerror(errno), WRITER_DOZE_MS);
    }
}

/* How long to sleep after a look, given how many looks in a row found the
 * ring empty (idle); dozes from WRITER_IDLE_LOOKS on. -1: do not sleep,
 * events came as it dozed off. */
static int writer_timeout(unsigned idle)
{
    if (rbtrace_ring_used(&rbtrace.ring) > rbtrace.ring.size / 2) return 0;
    if (idle < WRITER_IDLE_LOOKS) return WRITER_BATCH_MS;
    if (rbtrace_ring_doze(&rbtrace.ring) > 0) return -1;
    /* The first doze is short: the one event rbtrace_ring_doze may miss
     * (published as it dozed off) is found a millisecond later. */
    return idle == WRITER_IDLE_LOOKS ? WRITER_BATCH_MS : WRITER_DOZE_MS;
}

/* Looks closely again (events came, or a nudge): no longer dozing. */
static unsigned writer_wake_up(unsigned idle)
{
    if (idle >= WRITER_IDLE_LOOKS) rbtrace_ring_awake(&rbtrace.ring);
    return 0;
}

/*
 * Sends in batches: everything the ring holds, then a millisecond's sleep,
 * so that a steady stream of events costs about a thousand wake-ups and
 * sends a second rather than one per event. It goes on at once only while
 * the ring is more than half full, and dozes when events stop (above).
 */
static void *writer_main(void *unused)
{
    int fd = rbtrace.sock, timeout, r;
    uint64_t stop_at = 0;
    unsigned idle = 0;

    for (;;) {
        if (rbtrace_ring_used(&rbtrace.ring) > 0) idle = writer_wake_up(idle);
        else if (idle <= WRITER_IDLE_LOOKS) idle++;
        if (writer_flush(fd) != 0) break;
        if (rbtrace.writer_stop) {
            if (rbtrace_ring_used(&rbtrace.ring) == 0) return NULL;
            /* Stopping, with a client that does not read: give up in time. */
            if (stop_at == 0) stop_at = rbtrace_now_ns() + WRITER_DRAIN_MS * 1000000ull;
            if (rbtrace_now_ns() > stop_at) return NULL;
            continue;
        }
        /* Busy: on at once, but a look at the socket first, so that a
         * firehose does not keep the client's commands (a detach) waiting. */
        timeout = writer_timeout(idle);
        if ((r = writer_sleep(fd, timeout < 0 ? 0 : timeout)) < 0) break;
        if (r > 0 || timeout < 0) idle = writer_wake_up(idle);
    }
    writer_peer_gone();
    return NULL;
}

static void writer_close_wake_fd(void)
{
    if (writer_wake_fd >= 0 && close(writer_wake_fd) != 0)
        fprintf(stderr, "rbtrace: closing the writer's eventfd: %s\n", strerror(errno));
    writer_wake_fd = -1;
}

/* In a forked child, where the writer thread does not exist. */
void rbtrace_writer_after_fork(void)
{
    rbtrace.writer_running = 0;
    writer_close_wake_fd();
}

/* Starts the writer on rbtrace.sock. Returns 0, or -1 with errno set
 * (pthread's error number, for a thread that did not start). */
int rbtrace_writer_start(void)
{
    sigset_t all, old;
    int err;

    rbtrace.writer_stop = 0;
    rbtrace.peer_gone = 0;
    writer_close_wake_fd(); /* none is open: a stop or a fork closed it */
    if ((writer_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) return -1;
    /* The producer's way to end a doze (rbtrace_ring_doze). */
    rbtrace.ring.wake = rbtrace_writer_nudge;
    /* The writer must never run a signal handler meant for Ruby threads. */
    sigfillset(&all);
    if ((err = pthread_sigmask(SIG_SETMASK, &all, &old)) == 0) {
        err = pthread_create(&rbtrace.writer, NULL, writer_main, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (err != 0) {
        writer_close_wake_fd();
        errno = err;
        return -1;
    }
    rbtrace.writer_running = 1;
    return 0;
}

static void *writer_join_nogvl(void *joined)
{
    int err = pthread_join(rbtrace.writer, NULL);

    if (err != 0) fprintf(stderr, "rbtrace: joining the writer thread: %s\n", strerror(err));
    *(int *)joined = 1;
    return NULL;
}

/*
 * Asks the writer to deliver what is left (for at most WRITER_DRAIN_MS)
 * and waits for it, without the GVL so the app runs meanwhile. Returns 0,
 * or -1 when an interrupt arrived meanwhile: its state in *state, for the
 * caller to re-raise once the detach is complete; the join is then
 * finished with the GVL held.
 */
int rbtrace_writer_stop(int *state)
{
    int joined = 0, rc;

    *state = 0;
    if (!rbtrace.writer_running) return 0;
    rbtrace.writer_stop = 1;
    rbtrace_writer_nudge();
    rbtrace.writer_running = 0;
    rc = rbtrace_nogvl(writer_join_nogvl, &joined, NULL, NULL, state);
    if (!joined) writer_join_nogvl(&joined);
    writer_close_wake_fd();
    return rc;
}
