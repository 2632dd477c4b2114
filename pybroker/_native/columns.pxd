from libc.stdint cimport int32_t, int64_t, uint8_t

from pybroker._native.records cimport pb_batch_header


cdef extern from "pb_columns.h" nogil:
    ctypedef struct pb_binary_builder:
        int32_t *offsets
        uint8_t *data
        size_t data_len
        uint8_t *validity
        int64_t length
        int64_t null_count

    ctypedef struct pb_record_columns:
        int64_t length
        int64_t *offset
        int64_t *timestamp
        int32_t *timestamp_type
        pb_binary_builder key
        pb_binary_builder value
        int32_t *header_offsets
        pb_binary_builder header_key
        pb_binary_builder header_value

    int pb_columns_init(pb_record_columns *c)
    void pb_columns_free(pb_record_columns *c)
    int pb_columns_add_records(pb_record_columns *c, const pb_batch_header *h,
                               const uint8_t *records, size_t len, int64_t min_offset,
                               int64_t max_offset)
