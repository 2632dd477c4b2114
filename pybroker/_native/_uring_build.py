"""cffi build of ``pybroker._native._uring``: appends through io_uring, or pwritev.

Out-of-line API mode (compiled against <liburing.h>) because most of liburing's
submission helpers (``io_uring_get_sqe``, ``io_uring_prep_writev``, ``io_uring_cqe_seen``)
are ``static inline`` in the header and do not exist in the shared library.
cffi releases the GIL around every call, so an append never stalls the event loop's
other threads.

One ring per thread (created on that thread's first append, destroyed when the thread
exits, dropped in a forked child): a ring is used by one thread only, so no locking,
and the kernel can be told so (SINGLE_ISSUER, DEFER_TASKRUN where available).

Asynchronous appends use a second ring per thread (``pb_async_*``): submitted without
waiting, their completions signal an eventfd that the caller's event loop watches, and
``pb_async_reap`` collects them (token, result) from the shared completion queue without
a system call. Why: on ext4 (and tmpfs) a buffered write cannot complete inline, so
io_uring hands it to an ``iou-wrk`` kernel thread; waiting for it left the event loop
idle for the whole page-cache copy, while with the wait moved to the eventfd the loop
parses the next requests as the kernel copies, and writes to different files proceed in
parallel workers. That ring has no DEFER_TASKRUN: with it, completions would only be
posted when this thread enters the kernel for them, and the eventfd would stay silent.
"""

from cffi import FFI

ffibuilder = FFI()

ffibuilder.cdef(
    """
    struct iovec { void *iov_base; size_t iov_len; };

    /* 0 when this thread's ring is up and supports IORING_OP_WRITEV, else -errno. */
    int pb_uring_probe(void);
    /* Write all of iov[0..iovcnt) at `offset`, through the ring when use_uring is set
     * and the thread has one, else pwritev. Returns bytes written or -errno; the
     * iovecs are consumed (advanced) as bytes go out. */
    long long pb_append(int fd, struct iovec *iov, int iovcnt, long long offset, int use_uring);
    /* pb_append of one buffer: saves the caller building an iovec array. */
    long long pb_append_one(int fd, char *buf, size_t len, long long offset, int use_uring);

    /* The eventfd of this thread's asynchronous ring (set up on first call), or -errno. */
    int pb_async_eventfd(void);
    /* Queue a write of iov[0..iovcnt) at `offset` tagged `token`; the iovecs and their
     * buffers must stay valid until the token is reaped. `submit`: enter the kernel now
     * (else the entry waits for the next submit). Returns 0 or -errno. */
    int pb_async_writev(int fd, const struct iovec *iov, int iovcnt, long long offset,
                        unsigned long long token, int submit);
    /* Hand the queued entries to the kernel: the number submitted or -errno. */
    int pb_async_submit(void);
    /* Up to `max` completions: tokens[i] finished with results[i] (bytes or -errno). */
    int pb_async_reap(unsigned long long *tokens, long long *results, int max);
    """
)

ffibuilder.set_source(
    "pybroker._native._uring",
    r"""
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>
#include <liburing.h>

/* Appends are synchronous (submit, wait), so a ring never holds more than one
 * request; a few entries keep its locked memory to one page. */
#define PB_RING_ENTRIES 4

enum pb_ring_state { PB_RING_UNTRIED = 0, PB_RING_READY = 1 };  /* < 0: -errno of setup */

struct pb_ring {
    struct io_uring ring;
    int state;
    int eventfd;    /* the asynchronous ring's completion eventfd; 0 = none yet */
};

/* Writes in flight per thread on the asynchronous ring before submission must wait for
 * room; its completion queue is twice this and the kernel keeps overflowing
 * completions (FEAT_NODROP). */
#define PB_ASYNC_ENTRIES 256

static __thread struct pb_ring pb_thread_ring;   /* synchronous appends */
static __thread struct pb_ring pb_thread_async;  /* append_async, completions by eventfd */
static pthread_key_t pb_ring_key, pb_async_key;
static pthread_once_t pb_ring_once = PTHREAD_ONCE_INIT;

static void pb_ring_destroy(void *arg)
{
    struct pb_ring *r = arg;
    if (r->state == PB_RING_READY) {
        io_uring_queue_exit(&r->ring);
        if (r->eventfd > 0)
            close(r->eventfd);
    }
    r->state = PB_RING_UNTRIED;
    r->eventfd = 0;
}

/* A forked child shares the parent's rings; it must never submit to or reap them. */
static void pb_ring_atfork_child(void)
{
    pb_ring_destroy(&pb_thread_ring);
    pb_ring_destroy(&pb_thread_async);
}

static void pb_ring_init_once(void)
{
    pthread_key_create(&pb_ring_key, pb_ring_destroy);
    pthread_key_create(&pb_async_key, pb_ring_destroy);
    pthread_atfork(NULL, NULL, pb_ring_atfork_child);
}

/* This thread's ring `r`, set up on first use with `entries` and `flags` (without them
 * on kernels that refuse them) and, with `with_eventfd`, a registered eventfd. */
static struct io_uring *pb_ring_open(struct pb_ring *r, pthread_key_t *key, unsigned entries,
                                     unsigned flags, int with_eventfd, int *err)
{
    struct io_uring_params params;
    int ret, efd = -1;

    if (r->state == PB_RING_READY)
        return &r->ring;
    if (r->state < 0) {           /* failed before on this thread: do not retry per call */
        *err = r->state;
        return NULL;
    }
    pthread_once(&pb_ring_once, pb_ring_init_once);
    memset(&params, 0, sizeof params);
    params.flags = flags;
    ret = io_uring_queue_init_params(entries, &r->ring, &params);
    if (ret == -EINVAL) {          /* kernel older than 6.1: plain ring */
        memset(&params, 0, sizeof params);
        ret = io_uring_queue_init_params(entries, &r->ring, &params);
    }
    if (ret == 0 && with_eventfd) {
        efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        ret = efd < 0 ? -errno : io_uring_register_eventfd(&r->ring, efd);
        if (ret < 0) {
            if (efd >= 0)
                close(efd);
            io_uring_queue_exit(&r->ring);
        }
    }
    if (ret < 0) {
        r->state = *err = ret;
        return NULL;
    }
    r->eventfd = with_eventfd ? efd : 0;
    r->state = PB_RING_READY;
    pthread_setspecific(*key, r);
    return &r->ring;
}

static struct io_uring *pb_ring_get(int *err)
{
    return pb_ring_open(&pb_thread_ring, &pb_ring_key, PB_RING_ENTRIES,
                        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, 0, err);
}

/* No DEFER_TASKRUN here: with it, completions would only be posted when this thread
 * enters the kernel for them, and the eventfd would stay silent. */
static struct io_uring *pb_async_get(int *err)
{
    return pb_ring_open(&pb_thread_async, &pb_async_key, PB_ASYNC_ENTRIES,
                        IORING_SETUP_SINGLE_ISSUER, 1, err);
}

int pb_uring_probe(void)
{
    struct io_uring_probe *probe;
    struct io_uring *ring;
    int err = 0, supported;

    ring = pb_ring_get(&err);
    if (!ring)
        return err;
    probe = io_uring_get_probe_ring(ring);
    if (!probe)
        return -ENOSYS;
    supported = io_uring_opcode_supported(probe, IORING_OP_WRITEV);
    io_uring_free_probe(probe);
    return supported ? 0 : -EOPNOTSUPP;
}

/* Returned instead of a write result when there is no usable ring. */
#define PB_NO_RING LLONG_MIN

/* One IORING_OP_WRITEV, waited for. Returns the completion's result (bytes or -errno).
 * If the ring itself fails, it is torn down and PB_NO_RING tells the caller to go on
 * with pwritev: nothing was submitted (io_uring_enter reports an error only when it
 * submitted nothing), and a dropped ring cannot replay a stale entry later. */
static long long pb_uring_writev(struct io_uring *ring, int fd, const struct iovec *iov,
                                 int iovcnt, long long offset)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    struct io_uring_cqe *cqe;
    int ret;

    if (!sqe)
        return -EBUSY;  /* unreachable: one request in flight per ring */
    io_uring_prep_writev(sqe, fd, iov, (unsigned)iovcnt, (unsigned long long)offset);
    do
        ret = io_uring_submit_and_wait(ring, 1);
    while (ret == -EINTR);  /* a signal while waiting: the entry is in, wait again */
    if (ret < 0) {
        pb_ring_destroy(&pb_thread_ring);
        pb_thread_ring.state = ret;
        return PB_NO_RING;
    }
    do
        ret = io_uring_wait_cqe(ring, &cqe);
    while (ret == -EINTR);
    if (ret < 0)
        return ret;
    ret = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return ret;
}

static long long pb_pwritev(int fd, const struct iovec *iov, int iovcnt, long long offset)
{
    ssize_t n;
    do
        n = pwritev(fd, iov, iovcnt, (off_t)offset);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

long long pb_append(int fd, struct iovec *iov, int iovcnt, long long offset, int use_uring)
{
    long long total = 0, n;
    struct io_uring *ring;
    int err = 0;

    while (iovcnt > 0) {
        int chunk = iovcnt < IOV_MAX ? iovcnt : IOV_MAX;
        n = PB_NO_RING;
        if (use_uring && (ring = pb_ring_get(&err)) != NULL)
            n = pb_uring_writev(ring, fd, iov, chunk, offset);
        if (n == PB_NO_RING)  /* this thread could not set up (or lost) its ring */
            n = pb_pwritev(fd, iov, chunk, offset);
        if (n < 0)
            return n;
        if (n == 0 && iov->iov_len > 0)
            return -EIO;  /* no progress on a regular file: never spin */
        total += n;
        offset += n;
        /* Short write: skip the iovecs written, trim the one cut in the middle. */
        while (iovcnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (long long)iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return total;
}

long long pb_append_one(int fd, char *buf, size_t len, long long offset, int use_uring)
{
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    return pb_append(fd, &iov, 1, offset, use_uring);
}

/* ---- asynchronous appends: completions through an eventfd ---- */

int pb_async_eventfd(void)
{
    int err = 0;
    if (!pb_async_get(&err))
        return err;
    return pb_thread_async.eventfd;
}

int pb_async_submit(void)
{
    int err = 0, ret;
    struct io_uring *ring = pb_async_get(&err);
    if (!ring)
        return err;
    do
        ret = io_uring_submit(ring);
    while (ret == -EINTR);
    return ret;
}

int pb_async_writev(int fd, const struct iovec *iov, int iovcnt, long long offset,
                    unsigned long long token, int submit)
{
    int err = 0, ret;
    struct io_uring *ring = pb_async_get(&err);
    struct io_uring_sqe *sqe;

    if (!ring)
        return err;
    sqe = io_uring_get_sqe(ring);
    if (!sqe) {                     /* queue full of unsubmitted entries: submit them */
        ret = pb_async_submit();
        if (ret < 0)
            return ret;
        sqe = io_uring_get_sqe(ring);
        if (!sqe)
            return -EBUSY;
    }
    if (iovcnt == 1)                /* plain WRITE: the kernel need not import an iovec */
        io_uring_prep_write(sqe, fd, iov[0].iov_base, (unsigned)iov[0].iov_len,
                            (unsigned long long)offset);
    else
        io_uring_prep_writev(sqe, fd, iov, (unsigned)iovcnt, (unsigned long long)offset);
    io_uring_sqe_set_data64(sqe, token);
    if (submit) {
        ret = pb_async_submit();
        return ret < 0 ? ret : 0;
    }
    return 0;
}

int pb_async_reap(unsigned long long *tokens, long long *results, int max)
{
    struct pb_ring *r = &pb_thread_async;
    struct io_uring_cqe *cqe;
    int n = 0;

    if (r->state != PB_RING_READY)
        return 0;
    while (n < max && io_uring_peek_cqe(&r->ring, &cqe) == 0) {
        tokens[n] = cqe->user_data;
        results[n] = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        n++;
    }
    return n;
}
""",
    libraries=["uring"],
    extra_compile_args=["-O2", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wsign-compare"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
