/* sendfile/splice of file regions to non-blocking sockets. Rules: pb_zerocopy.h. */
#define _GNU_SOURCE
#include "pb_zerocopy.h"
#include "pb_wait.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The kernel moves at most this much per sendfile/splice call (MAX_RW_COUNT). */
#define PB_MAX_RW ((size_t)0x7ffff000)

static uint64_t pb_counters[PB_COUNTERS];

void pb_zerocopy_count(pb_zerocopy_counter which, uint64_t n)
{
    __atomic_fetch_add(&pb_counters[which], n, __ATOMIC_RELAXED);
}

uint64_t pb_zerocopy_counter_value(pb_zerocopy_counter which)
{
    return __atomic_load_n(&pb_counters[which], __ATOMIC_RELAXED);
}

/* What a call that moved `sent` bytes before failing with `err` reports: progress
 * first (the error comes back on the next call), a full socket as 0, EOF as ENODATA. */
static ssize_t pb_result(size_t sent, int err)
{
    if (sent > 0)
        return (ssize_t)sent;
    if (err == EAGAIN)
        return 0;
    return -err;
}

ssize_t pb_sendfile(int out_fd, int in_fd, int64_t offset, size_t count)
{
    size_t sent = 0;

    while (sent < count) {
        size_t want = count - sent < PB_MAX_RW ? count - sent : PB_MAX_RW;
        off_t off = (off_t)(offset + (int64_t)sent);  /* by pointer: in_fd's position stays */
        ssize_t n = sendfile(out_fd, in_fd, &off, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pb_result(sent, errno);
        if (n == 0)
            return pb_result(sent, ENODATA);
        sent += (size_t)n;
        if ((size_t)n < want)  /* the socket buffer is full: skip the EAGAIN round trip */
            break;
    }
    return (ssize_t)sent;
}

int pb_splice_pipe_open(pb_splice_pipe *p)
{
    int fds[2];
    int size;

    p->read_fd = p->write_fd = -1;
    p->pending = 0;
    p->pending_fd = -1;
    p->pending_offset = 0;
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    p->read_fd = fds[0];
    p->write_fd = fds[1];
    (void)fcntl(p->write_fd, F_SETPIPE_SZ, PB_SPLICE_PIPE_SIZE);  /* over the cap: keep default */
    size = fcntl(p->write_fd, F_GETPIPE_SZ);
    p->capacity = size > 0 ? (size_t)size : 65536;
    return 0;
}

void pb_splice_pipe_close(pb_splice_pipe *p)
{
    if (p->read_fd >= 0) {
        close(p->read_fd);
        close(p->write_fd);
    }
    p->read_fd = p->write_fd = -1;
    p->pending = 0;
}

/* Fill the empty pipe from the file. Returns bytes moved or -errno. */
static ssize_t pb_splice_fill(pb_splice_pipe *p, int in_fd, int64_t offset, size_t count)
{
    loff_t off = (loff_t)offset;
    size_t want = count < p->capacity ? count : p->capacity;
    ssize_t n;

    do
        n = splice(in_fd, &off, p->write_fd, NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n == 0)
        return -ENODATA;
    p->pending = (size_t)n;
    p->pending_fd = in_fd;
    p->pending_offset = offset;
    return n;
}

ssize_t pb_splice(pb_splice_pipe *p, int out_fd, int in_fd, int64_t offset, size_t count)
{
    size_t sent = 0;
    ssize_t n;

    if (p->read_fd < 0)
        return -EBADF;
    if (p->pending > 0 && (p->pending_fd != in_fd || p->pending_offset != offset)) {
        /* The caller did not resume where the last call stopped (it gave up on that
         * region): what the pipe holds belongs to nobody. A fresh pipe drops it. */
        pb_splice_pipe_close(p);
        if ((n = pb_splice_pipe_open(p)) < 0)
            return n;
    }
    while (sent < count) {
        if (p->pending == 0 && (n = pb_splice_fill(p, in_fd, offset + (int64_t)sent,
                                                   count - sent)) < 0)
            return pb_result(sent, (int)-n);
        /* never more than the caller asked for, even if the pipe holds more */
        size_t want = p->pending < count - sent ? p->pending : count - sent;
        do
            n = splice(p->read_fd, NULL, out_fd, NULL, want,
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK |
                           (sent + want < count ? SPLICE_F_MORE : 0));
        while (n < 0 && errno == EINTR);
        if (n < 0)
            return pb_result(sent, errno);
        p->pending -= (size_t)n;
        p->pending_offset += n;
        sent += (size_t)n;
        if ((size_t)n < want)  /* the socket buffer is full */
            break;
    }
    return (ssize_t)sent;
}

int pb_send_region_wait(pb_splice_pipe *p, int out_fd, int in_fd, int64_t offset,
                        size_t count, int patience_ms, int slice_ms, int warm_only,
                        size_t ahead, size_t *moved)
{
    int64_t deadline;
    size_t sent = 0;
    int err = 0;

    *moved = 0;
    if (warm_only) {
        int resident = pb_region_resident(in_fd, offset, count, ahead);
        if (resident <= 0)
            return resident < 0 ? resident : PB_COLD;
    }
    deadline = pb_deadline(slice_ms);

    while (sent < count) {
        int64_t at = offset + (int64_t)sent;
        ssize_t n = p != NULL ? pb_splice(p, out_fd, in_fd, at, count - sent)
                              : pb_sendfile(out_fd, in_fd, at, count - sent);
        if (n < 0) {
            err = (int)n;
            break;
        }
        sent += (size_t)n;
        /* Short means the socket buffer is full: poll now rather than after an EAGAIN. */
        if (sent < count && (err = pb_go_on(out_fd, POLLOUT, patience_ms, deadline)) != 0) {
            err = err > 0 ? 0 : err;
            break;
        }
    }
    *moved = sent;
    return err;
}

int pb_recv_wait(int fd, char *buf, size_t count, int patience_ms, int slice_ms,
                 size_t *moved)
{
    int64_t deadline = pb_deadline(slice_ms);
    size_t got = 0;
    int err = 0;

    while (got < count) {
        ssize_t n = recv(fd, buf + got, count - got, 0);
        if (n == 0)
            break;  /* end of stream: the event loop's reader will see it too */
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            err = -errno;
            break;
        }
        if (n > 0)
            got += (size_t)n;
        /* Short means the receive queue is empty: poll now rather than after an EAGAIN. */
        if (got < count && (err = pb_go_on(fd, POLLIN, patience_ms, deadline)) != 0) {
            err = err > 0 ? 0 : err;
            break;
        }
    }
    *moved = got;
    return err;
}

/* cachestat(2) is newer than the C library's headers: its number and structures from
 * include/uapi/linux/mman.h (the number is the same on every architecture). */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

struct pb_cachestat_range {
    uint64_t off;
    uint64_t len;
};

struct pb_cachestat {
    uint64_t nr_cache;
    uint64_t nr_dirty;
    uint64_t nr_writeback;
    uint64_t nr_evicted;
    uint64_t nr_recently_evicted;
};

/* 1 when the byte at `offset` can be read without waiting for the disk, 0 when not
 * (EAGAIN: not cached, or its read is still in flight). Reading at or past the end of
 * the file returns 0 bytes without waiting: that counts as readable. */
static int pb_byte_ready(int fd, int64_t offset)
{
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    ssize_t n;

    do
        n = preadv2(fd, &iov, 1, (off_t)offset, RWF_NOWAIT);
    while (n < 0 && errno == EINTR);
    if (n >= 0)
        return 1;
    if (errno == EAGAIN)
        return 0;
    /* EOPNOTSUPP: this file system cannot say; ENOSYS/EINVAL: the kernel cannot. */
    if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)
        return -ENOSYS;
    return -errno;
}

static int pb_cached_whole(int fd, int64_t offset, size_t count)
{
    static long page_size;
    struct pb_cachestat_range range = {.off = (uint64_t)offset, .len = count};
    struct pb_cachestat stat;
    uint64_t pages;

    if (page_size == 0)
        page_size = sysconf(_SC_PAGESIZE);
    if (syscall(__NR_cachestat, fd, &range, &stat, 0) < 0) {
        /* EPERM: a seccomp filter that does not know the call (containers) */
        if (errno == ENOSYS || errno == EPERM)
            return -ENOSYS;
        /* EOPNOTSUPP: a file system cachestat cannot look into (hugetlbfs): let the
         * RWF_NOWAIT read decide for this file */
        return errno == EOPNOTSUPP ? 1 : -errno;
    }
    /* pages the range touches (the kernel counts whole pages, rounding the ends out) */
    pages = ((uint64_t)offset + count - 1) / (uint64_t)page_size -
            (uint64_t)offset / (uint64_t)page_size + 1;
    return stat.nr_cache >= pages;
}

static pb_residency pb_how = PB_RESIDENCY_CACHESTAT;

void pb_residency_set(pb_residency how)
{
    __atomic_store_n(&pb_how, how, __ATOMIC_RELAXED);
}

pb_residency pb_residency_get(void)
{
    return __atomic_load_n(&pb_how, __ATOMIC_RELAXED);
}

static int pb_resident_by(pb_residency how, int fd, int64_t offset, size_t count)
{
    int r;

    if (count == 0 || how == PB_RESIDENCY_NONE)
        return 1;
    if (how == PB_RESIDENCY_CACHESTAT) {
        if ((r = pb_cached_whole(fd, offset, count)) <= 0)
            return r;
        /* a file system without RWF_NOWAIT: what cachestat said is all we know */
        r = pb_byte_ready(fd, offset + (int64_t)count - 1);
        return r == -ENOSYS ? 1 : r;
    }
    if ((r = pb_byte_ready(fd, offset)) <= 0)
        return r;
    return pb_byte_ready(fd, offset + (int64_t)count - 1);
}

int pb_region_resident(int fd, int64_t offset, size_t count, size_t ahead)
{
    pb_residency how = pb_residency_get();
    int r;

    /* A kernel without `how` moves the process to the next test, once and for all
     * (threads racing here store the same next value). NONE never fails. */
    while ((r = pb_resident_by(how, fd, offset, count)) == -ENOSYS)
        pb_residency_set(++how);
    if (r < 0)
        return r;
    /* Advice only: a file that cannot take it is sent all the same. */
    if (r == 0) {
        pb_zerocopy_count(PB_COLD_REGIONS, 1);
        (void)posix_fadvise(fd, (off_t)offset, (off_t)(count + ahead), POSIX_FADV_WILLNEED);
    } else if (ahead > 0)
        (void)posix_fadvise(fd, (off_t)(offset + (int64_t)count), (off_t)ahead,
                            POSIX_FADV_WILLNEED);
    return r;
}
