# The C interface of csrc/pb_index.h (STYLE 2): floor/ceiling search over index files.

cdef extern from "pb_index.h" nogil:
    const int PB_OFFSET_ENTRY_SIZE
    const int PB_TIME_ENTRY_SIZE

    ptrdiff_t pb_offset_index_floor(const unsigned char *buf, size_t entries, long long target)
    ptrdiff_t pb_time_index_floor(const unsigned char *buf, size_t entries, long long target)
    ptrdiff_t pb_offset_index_position_floor(const unsigned char *buf, size_t entries,
                                             long long target)
    size_t pb_offset_index_ceiling(const unsigned char *buf, size_t entries, long long target)
    size_t pb_time_index_ceiling(const unsigned char *buf, size_t entries, long long target)
    size_t pb_time_index_offset_ceiling(const unsigned char *buf, size_t entries,
                                        long long target)


cdef extern from "pb_common.h" nogil:
    unsigned int pb_load_be32(const unsigned char *p)
    unsigned long long pb_load_be64(const unsigned char *p)
