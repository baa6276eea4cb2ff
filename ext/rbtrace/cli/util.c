/*
 * util.c - clock helpers shared by the client's parts.
 */
#include <time.h>
#include "cli.h"

int64_t cli_now_ms(void)
{
    struct timespec ts;

    /* CLOCK_MONOTONIC cannot fail with a valid pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    /* An interrupted sleep is fine: every caller loops on a deadline. */
    nanosleep(&ts, NULL);
}
