# The C interface of csrc/pb_zerocopy.h (STYLE 2): sendfile/splice to sockets, counters.
from libc.stdint cimport int64_t, uint64_t


cdef extern from "pb_zerocopy.h" nogil:
    ctypedef struct pb_splice_pipe:
        int read_fd
        int write_fd
        size_t capacity
        size_t pending
        int pending_fd
        int64_t pending_offset

    ctypedef enum pb_residency:
        PB_RESIDENCY_CACHESTAT
        PB_RESIDENCY_NOWAIT
        PB_RESIDENCY_NONE

    void pb_residency_set(pb_residency how)
    pb_residency pb_residency_get()
    int pb_region_resident(int fd, int64_t offset, size_t count, size_t ahead)
    int PB_COLD

    ctypedef enum pb_zerocopy_counter:
        PB_ZERO_COPY_BYTES
        PB_COPIED_BYTES
        PB_COLD_REGIONS

    ssize_t pb_sendfile(int out_fd, int in_fd, int64_t offset, size_t count)
    int pb_splice_pipe_open(pb_splice_pipe *p)
    void pb_splice_pipe_close(pb_splice_pipe *p)
    ssize_t pb_splice(pb_splice_pipe *p, int out_fd, int in_fd, int64_t offset, size_t count)
    int pb_send_region_wait(pb_splice_pipe *p, int out_fd, int in_fd, int64_t offset,
                            size_t count, int patience_ms, int slice_ms, int warm_only,
                            size_t ahead, size_t *moved)
    int pb_recv_wait(int fd, char *buf, size_t count, int patience_ms, int slice_ms,
                     size_t *moved)
    void pb_zerocopy_count(pb_zerocopy_counter which, uint64_t n)
    uint64_t pb_zerocopy_counter_value(pb_zerocopy_counter which)


cdef class SplicePipe:
    cdef pb_splice_pipe _pipe
