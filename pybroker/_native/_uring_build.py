"""cffi build of ``pybroker._native._uring``: appends through io_uring, or pwritev.

Out-of-line API mode (compiled against <liburing.h>) because most of liburing's
submission helpers (``io_uring_get_sqe``, ``io_uring_prep_writev``, ``io_uring_cqe_seen``)
are ``static inline`` in the header and do not exist in the shared library.
cffi releases the GIL around every call, so an append never stalls the event loop's
other threads.

One ring per thread (created on that thread's first append, destroyed when the thread
exits, dropped in a forked child): a ring is used by one thread only, so no locking,
and the kernel can be told so (SINGLE_ISSUER, DEFER_TASKRUN where available).
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
    """
)

ffibuilder.set_source(
    "pybroker._native._uring",
    r"""
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <liburing.h>

/* Appends are synchronous (submit, wait), so a ring never holds more than one
 * request; a few entries keep its locked memory to one page. */
#define PB_RING_ENTRIES 4

enum pb_ring_state { PB_RING_UNTRIED = 0, PB_RING_READY = 1 };  /* < 0: -errno of setup */

struct pb_ring {
    struct io_uring ring;
    int state;
};

static __thread struct pb_ring pb_thread_ring;
static pthread_key_t pb_ring_key;
static pthread_once_t pb_ring_once = PTHREAD_ONCE_INIT;

static void pb_ring_destroy(void *arg)
{
    struct pb_ring *r = arg;
    if (r->state == PB_RING_READY)
        io_uring_queue_exit(&r->ring);
    r->state = PB_RING_UNTRIED;
}

/* A forked child shares the parent's rings; it must never submit to them. */
static void pb_ring_atfork_child(void)
{
    pb_ring_destroy(&pb_thread_ring);
}

static void pb_ring_init_once(void)
{
    pthread_key_create(&pb_ring_key, pb_ring_destroy);
    pthread_atfork(NULL, NULL, pb_ring_atfork_child);
}

static struct io_uring *pb_ring_get(int *err)
{
    struct pb_ring *r = &pb_thread_ring;
    struct io_uring_params params;
    int ret;

    if (r->state == PB_RING_READY)
        return &r->ring;
    if (r->state < 0) {           /* failed before on this thread: do not retry per call */
        *err = r->state;
        return NULL;
    }
    pthread_once(&pb_ring_once, pb_ring_init_once);
    memset(&params, 0, sizeof params);
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    ret = io_uring_queue_init_params(PB_RING_ENTRIES, &r->ring, &params);
    if (ret == -EINVAL) {          /* kernel older than 6.1: plain ring */
        memset(&params, 0, sizeof params);
        ret = io_uring_queue_init_params(PB_RING_ENTRIES, &r->ring, &params);
    }
    if (ret < 0) {
        r->state = *err = ret;
        return NULL;
    }
    r->state = PB_RING_READY;
    pthread_setspecific(pb_ring_key, r);
    return &r->ring;
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
""",
    libraries=["uring"],
    extra_compile_args=["-O2", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wsign-compare"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
