# C interface of csrc/pb_records.h (STYLE 2) and the cdef classes other modules (the
# wire codec, the log) cimport to read batch fields without attribute lookups.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef extern from "pb_records.h" nogil:
    enum:
        PB_BATCH_HEADER_SIZE
        PB_LOG_OVERHEAD
        PB_ATTR_COMPRESSION_MASK
        PB_ATTR_LOG_APPEND_TIME
        PB_ATTR_TRANSACTIONAL
        PB_ATTR_CONTROL
        PB_OK
        PB_ERR_TRUNCATED
        PB_ERR_BATCH_LENGTH
        PB_ERR_COUNT
        PB_ERR_INVALID
        PB_ERR_TRAILING
        PB_ERR_UNSUPPORTED
        PB_ERR_NO_MEMORY

    ctypedef struct pb_batch_header:
        int64_t base_offset
        int32_t batch_length
        int32_t partition_leader_epoch
        int8_t magic
        uint32_t crc
        int16_t attributes
        int32_t last_offset_delta
        int64_t first_timestamp
        int64_t max_timestamp
        int64_t producer_id
        int16_t producer_epoch
        int32_t base_sequence
        int32_t records_count

    ctypedef struct pb_record:
        int8_t attributes
        int64_t timestamp_delta
        int32_t offset_delta
        const uint8_t *key
        int32_t key_len
        const uint8_t *value
        int32_t value_len
        int32_t header_count
        const uint8_t *headers
        const uint8_t *headers_end

    ctypedef struct pb_scan:
        size_t valid_end
        int64_t next_offset
        int64_t max_timestamp
        int64_t offset_of_max_timestamp
        int64_t batch_count
        uint8_t *offset_index
        size_t offset_index_len
        uint8_t *time_index
        size_t time_index_len
        int err
        size_t err_pos

    ctypedef struct pb_column:
        const int32_t *offsets
        const uint8_t *data
        size_t data_len
        const uint8_t *validity
        int64_t validity_offset
        int64_t length

    ctypedef struct pb_encode_input:
        int32_t count
        pb_column keys
        pb_column values
        const int64_t *timestamps
        int64_t default_timestamp
        const int32_t *header_offsets
        pb_column header_keys
        pb_column header_values
        const int32_t *rows
        int64_t timestamps_length
        int64_t header_offsets_length
        int64_t base_timestamp
        int64_t max_timestamp

    const char *pb_err_message(int err)
    int pb_read_header(const uint8_t *buf, size_t len, pb_batch_header *h)
    int pb_check_batch(const uint8_t *buf, size_t len, pb_batch_header *h)
    ctypedef struct pb_keyless:
        int32_t *index
        int32_t len
        int32_t cap

    void pb_keyless_free(pb_keyless *k)
    int pb_validate_batch(const uint8_t *buf, size_t len, pb_batch_header *h, size_t *err_pos,
                          pb_keyless *keyless)
    int pb_validate_records(const uint8_t *p, size_t len, int32_t count, size_t *err_pos,
                            pb_keyless *keyless)

    ctypedef struct pb_record_walker:
        int32_t count
        int32_t index
        uint64_t pos
        uint64_t err_pos

    void pb_walker_init(pb_record_walker *w, int32_t count, pb_keyless *keyless)
    int pb_walker_feed(pb_record_walker *w, const uint8_t *p, size_t len)
    int pb_walker_finish(pb_record_walker *w)
    int pb_record_parse(const uint8_t **pp, const uint8_t *end, pb_record *r)
    int pb_header_next(const uint8_t **pp, const uint8_t *end, const uint8_t **key,
                       int32_t *key_len, const uint8_t **value, int32_t *value_len)
    int pb_records_find_timestamp(const uint8_t *p, size_t len, int32_t count,
                                  int64_t base_ts, int64_t target, int32_t *offset_delta,
                                  int64_t *ts)
    int pb_stamp_batch(uint8_t *buf, size_t len, int64_t base_offset, int32_t leader_epoch,
                       int64_t log_append_time)
    int pb_find_position(const uint8_t *buf, size_t start, size_t end, int64_t target_offset,
                         size_t *pos, pb_batch_header *h)
    int pb_find_timestamp(const uint8_t *buf, size_t start, size_t end, int64_t target_ts,
                          size_t *pos, pb_batch_header *h)
    int pb_scan_log(const uint8_t *buf, size_t start, size_t end, int64_t base_offset,
                    int64_t index_interval_bytes, pb_scan *out)
    void pb_scan_free(pb_scan *s)
    int64_t pb_encode_records_size(pb_encode_input *inp, const char **why)
    void pb_encode_records(uint8_t *out, const pb_encode_input *inp)
    void pb_finish_batch(uint8_t *out, size_t total_size, const pb_batch_header *h)

    ctypedef struct pb_batch_builder:
        uint8_t *buf
        size_t capacity
        size_t len
        int32_t count
        int64_t base_timestamp
        int64_t max_timestamp
        uint32_t records_crc

    void pb_builder_init(pb_batch_builder *b, uint8_t *buf, size_t capacity)
    int64_t pb_builder_append(pb_batch_builder *b, const pb_encode_input *inp, int32_t start,
                              size_t *need, const char **why)
    void pb_builder_finish(pb_batch_builder *b, pb_batch_header *h)


cdef enum:
    # Validation, stamping and scans release the GIL from this size on: below it the
    # work (~10 us at 5+ GB/s) is cheaper than risking a contended GIL reacquire.
    RECORDS_GIL_THRESHOLD = 65536
    # Decompressed records section bound (decompression bombs), see compression.py.
    DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024


cdef class BatchInfo:
    cdef readonly int64_t base_offset
    cdef readonly Py_ssize_t size
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int compression
    cdef readonly int timestamp_type
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t records_count
    # a control batch's record type (Kafka's ControlRecordType: 0 abort, 1 commit) and
    # the coordinator epoch of its value, when the reader had the whole batch; -1 otherwise
    cdef readonly int control_type
    cdef readonly int32_t coordinator_epoch


cdef class ScanResult:
    cdef readonly Py_ssize_t valid_end
    cdef readonly int64_t next_offset
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t offset_of_max_timestamp
    cdef readonly int64_t batch_count
    cdef readonly bytes offset_index
    cdef readonly bytes time_index
    cdef readonly object error


cdef BatchInfo batch_info_from_header(const pb_batch_header *h)
