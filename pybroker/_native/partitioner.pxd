from libc.stddef cimport size_t
from libc.stdint cimport int32_t, int64_t, uint8_t


cdef extern from "pb_partitioner.h":
    int32_t pb_murmur2(const uint8_t *data, size_t length) nogil
    int pb_partition_keys(const int32_t *offsets, const uint8_t *data, size_t data_len,
                          const uint8_t *validity, size_t n_rows, int32_t num_partitions,
                          int32_t null_key_partition, int32_t *partition_of) nogil
    void pb_group_rows(const int32_t *partition_of, size_t n_rows, int32_t num_partitions,
                       int32_t *row_order, int64_t *starts) nogil
