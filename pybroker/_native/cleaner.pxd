# C interface of csrc/pb_cleaner.h (STYLE 2).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from pybroker._native.records cimport pb_batch_header


cdef extern from "pb_cleaner.h" nogil:
    enum:
        PB_CLEAN_COMPRESSED
        PB_CLEAN_NOMEM

    ctypedef struct pb_map_slot:
        uint64_t h0
        uint64_t h1
        int64_t offset_plus_one

    ctypedef struct pb_offset_map:
        pb_map_slot *slots
        uint64_t capacity
        uint64_t count
        uint64_t max_count
        int64_t latest_offset
        uint64_t k0
        uint64_t k1

    int pb_map_init(pb_offset_map *m, size_t memory, double load_factor, uint64_t k0,
                    uint64_t k1)
    void pb_map_free(pb_offset_map *m)
    void pb_map_clear(pb_offset_map *m)
    int pb_map_put(pb_offset_map *m, const uint8_t *key, size_t len, int64_t offset)
    int64_t pb_map_get(const pb_offset_map *m, const uint8_t *key, size_t len)
    void pb_siphash128(uint64_t k0, uint64_t k1, const uint8_t *data, size_t len,
                       uint64_t *out)
    ctypedef struct pb_aborted_txn:
        int64_t producer_id
        int64_t first_offset
        int64_t last_offset

    ctypedef struct pb_open_txn:
        int64_t producer_id
        int64_t aborted
        int64_t retained

    ctypedef struct pb_txn_tracker:
        pb_aborted_txn *aborted
        size_t aborted_count
        size_t next
        pb_open_txn *open
        size_t open_count
        size_t open_cap
        int64_t *kept_markers
        size_t kept_count
        size_t kept_cap

    void pb_txn_init(pb_txn_tracker *t, pb_aborted_txn *aborted, size_t count)
    void pb_txn_free(pb_txn_tracker *t)
    int pb_txn_aborted(pb_txn_tracker *t, const pb_batch_header *h)
    int pb_txn_retained(pb_txn_tracker *t, const pb_batch_header *h)
    int pb_txn_close(pb_txn_tracker *t, const pb_batch_header *h)

    int pb_map_add_records(pb_offset_map *m, const pb_batch_header *h, const uint8_t *records,
                           size_t len, int64_t start_offset)
    int pb_map_add_batches(pb_offset_map *m, const uint8_t *buf, size_t len, size_t *pos,
                           int64_t start_offset, pb_txn_tracker *t, int *full,
                           pb_batch_header *h)

    ctypedef struct pb_outbuf:
        uint8_t *data
        size_t len
        size_t cap

    int pb_outbuf_reserve(pb_outbuf *o, size_t more)
    int pb_outbuf_append(pb_outbuf *o, const uint8_t *p, size_t n)
    void pb_outbuf_free(pb_outbuf *o)

    ctypedef struct pb_clean_args:
        const pb_offset_map *map
        int64_t now_ms
        int64_t delete_retention_ms
        const int64_t *producers
        size_t producer_count
        int64_t round_end_offset
        pb_txn_tracker *txn

    ctypedef struct pb_clean_stats:
        int64_t records_read
        int64_t records_retained

    ctypedef struct pb_filtered:
        int32_t retained
        int set_horizon
        int64_t base_timestamp
        int64_t max_timestamp

    int pb_clean_records(const pb_clean_args *a, const pb_batch_header *h,
                         const uint8_t *records, size_t len, int marker, pb_outbuf *out,
                         pb_filtered *f)
    int pb_clean_keeps_empty(const pb_clean_args *a, const pb_batch_header *h)
    int pb_clean_write_empty(pb_outbuf *out, const pb_batch_header *h)
    void pb_clean_finish(pb_outbuf *out, size_t start, const pb_batch_header *h,
                         const pb_filtered *f)
    int pb_clean_batches(const pb_clean_args *a, const uint8_t *buf, size_t len, size_t *pos,
                         pb_outbuf *out, pb_clean_stats *st, pb_batch_header *h)
