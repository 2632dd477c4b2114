/* Waiting on a non-blocking socket from a network thread: the slice deadline and the
 * poll(2) between system calls that every *_wait transfer loop shares (pb_zerocopy.c's
 * plaintext transfers, pb_tls.c's TLS receive). */
#ifndef PB_WAIT_H
#define PB_WAIT_H

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>

static inline int64_t pb_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t pb_deadline(int slice_ms)
{
    return slice_ms > 0 ? pb_now_ms() + slice_ms : INT64_MAX;
}

/* Whether an unfinished transfer goes on: sleeps until `fd` is ready for `events` (or
 * has failed: the next call reports why). 0: go on; 1: stop and hand the socket back
 * (not ready for patience_ms, or the slice is used up); -errno: poll failed. */
static inline int pb_go_on(int fd, short events, int patience_ms, int64_t deadline_ms)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    int n;

    do
        n = poll(&pfd, 1, patience_ms);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    return n == 0 || pb_now_ms() >= deadline_ms;
}

#endif
