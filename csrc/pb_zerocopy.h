/* Moving a file region to a socket without copying it through user memory.
 *
 * sendfile(2): file -> socket in one call (what Kafka's FileChannel.transferTo does).
 * splice(2):   file -> pipe -> socket, through a pipe owned by the connection; bytes
 *              that the socket did not take stay in the pipe ("pending") and go out
 *              first on the next call, which must resume at the next file offset.
 *
 * Both are written for non-blocking sockets: a full socket buffer ends the call with
 * the bytes sent so far (0 when none), never blocks. Results are bytes sent or -errno.
 * Reaching the end of the file before anything was sent is -ENODATA (the region was
 * truncated under the caller; returning 0 would make it wait for writability forever).
 *
 * Counters of bytes sent zero-copy and bytes the server copied from user memory are
 * process-wide relaxed atomics (any thread may add to them).
 *
 * Residency. A sendfile/splice of pages that are not in the page cache reads the disk
 * while the caller waits, so a caller that must not wait (an event loop, the threads that
 * serve warm data) asks first, with pb_region_resident: one cachestat(2) (Linux 6.5+)
 * says whether every page of the region is cached, and a one-byte preadv2(RWF_NOWAIT)
 * of the region's last byte whether it is readable now (cachestat counts pages whose read
 * is still in flight, e.g. readahead we started, as cached). Without cachestat (ENOSYS,
 * or a seccomp filter's EPERM) the preadv2 of the first and the last byte is the test:
 * it misses a hole in the middle, which costs a stall, never wrong bytes. Where neither
 * works everything counts as resident. What is not resident is read in the background
 * (POSIX_FADV_WILLNEED) from the moment it is found out.
 *
 * The *_wait functions are for I/O threads (pybroker.net's num.network.threads): they
 * loop syscall + poll(2) on the same non-blocking socket, so the thread sleeps while the
 * socket is not ready without the socket having to change mode. They stop when the whole
 * count has moved, the socket fails, the peer ends the stream (receive), or the socket
 * stayed not ready for `patience_ms`, or the call has run `slice_ms` (> 0) and has to
 * wait again: the caller's event loop then takes the socket back, waits for it without
 * holding a thread and queues the rest behind other connections' transfers, so neither a
 * dead peer nor a slow one keeps a thread from the others. They
 * return 0, or -errno on failure, and always set *moved to the bytes moved (a failure
 * after some progress still reports it, for the counters).
 */
#ifndef PB_ZEROCOPY_H
#define PB_ZEROCOPY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Pipe capacity asked for (F_SETPIPE_SZ). Bigger means fewer syscalls per MiB, but a
 * user's pipe pages are capped (fs.pipe-user-pages-soft, 64 MiB by default) and every
 * connection has one pipe: 256 KiB keeps hundreds of connections under the cap. */
#define PB_SPLICE_PIPE_SIZE (256 * 1024)

ssize_t pb_sendfile(int out_fd, int in_fd, int64_t offset, size_t count);

typedef struct pb_splice_pipe {
    int read_fd;          /* -1 when closed */
    int write_fd;
    size_t capacity;      /* bytes the pipe holds (F_GETPIPE_SZ) */
    size_t pending;       /* bytes in the pipe not yet taken by the socket */
    int pending_fd;       /* the file they came from ... */
    int64_t pending_offset; /* ... and the file offset of the first of them */
} pb_splice_pipe;

int pb_splice_pipe_open(pb_splice_pipe *p);
void pb_splice_pipe_close(pb_splice_pipe *p);
ssize_t pb_splice(pb_splice_pipe *p, int out_fd, int in_fd, int64_t offset, size_t count);

/* `p` NULL: sendfile; else splice through `p` (the connection's pipe). `warm_only`: for
 * a thread that must not wait for the disk; the region is sent only if it is resident
 * (else PB_COLD, nothing sent), as pb_region_resident(..., ahead) tells. */
int pb_send_region_wait(pb_splice_pipe *p, int out_fd, int in_fd, int64_t offset,
                        size_t count, int patience_ms, int slice_ms, int warm_only,
                        size_t ahead, size_t *moved);
int pb_recv_wait(int fd, char *buf, size_t count, int patience_ms, int slice_ms,
                 size_t *moved);

/* How pb_region_resident tests residency, process-wide. A kernel that lacks one moves
 * the process to the next (pb_residency_get says where it is). */
typedef enum pb_residency {
    PB_RESIDENCY_CACHESTAT,
    PB_RESIDENCY_NOWAIT,
    PB_RESIDENCY_NONE
} pb_residency;

void pb_residency_set(pb_residency how);
pb_residency pb_residency_get(void);

/* 1: every page of [offset, offset + count) is cached and readable now; 0: not, and its
 * reading (and that of the `ahead` bytes after it) was started; with 1, the reading of
 * the `ahead` bytes after it was started. -errno when the test failed (a bad fd). */
int pb_region_resident(int fd, int64_t offset, size_t count, size_t ahead);

/* What pb_send_region_wait returns, having sent nothing, for a region that is not
 * resident when the caller asked for warm data only. */
#define PB_COLD 1

/* PB_COLD_REGIONS: regions pb_region_resident found not resident. */
typedef enum pb_zerocopy_counter {
    PB_ZERO_COPY_BYTES,
    PB_COPIED_BYTES,
    PB_COLD_REGIONS,
    PB_COUNTERS
} pb_zerocopy_counter;

void pb_zerocopy_count(pb_zerocopy_counter which, uint64_t n);
uint64_t pb_zerocopy_counter_value(pb_zerocopy_counter which);

#endif
