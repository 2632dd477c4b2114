#include "pb_partitioner.h"

#include <string.h>

#include "pb_common.h"

int32_t pb_murmur2(const uint8_t *data, size_t length) {
    /* Java arithmetic on int: wrap-around multiplication and logical shifts, so the
     * hash is computed in uint32_t and only reinterpreted at the end. */
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    size_t blocks = length / 4;
    for (size_t i = 0; i < blocks; i++) {
        uint32_t k;
        memcpy(&k, data + 4 * i, 4); /* little-endian load, as Java assembles it */
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + 4 * blocks;
    switch (length & 3) {
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: h ^= (uint32_t)tail[0];
            h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

int pb_partition_keys(const int32_t *offsets, const uint8_t *data, size_t data_len,
                      const uint8_t *validity, size_t n_rows, int32_t num_partitions,
                      int32_t null_key_partition, int32_t *partition_of) {
    for (size_t i = 0; i < n_rows; i++) {
        if (validity && !(validity[i >> 3] & (1u << (i & 7)))) {
            partition_of[i] = null_key_partition;
            continue;
        }
        int32_t start = offsets[i], end = offsets[i + 1];
        if (PB_UNLIKELY(start < 0 || end < start || (size_t)end > data_len))
            return -1;
        uint32_t hash = (uint32_t)pb_murmur2(data + start, (size_t)(end - start));
        partition_of[i] = (int32_t)((hash & 0x7fffffffu) % (uint32_t)num_partitions);
    }
    return 0;
}

void pb_group_rows(const int32_t *partition_of, size_t n_rows, int32_t num_partitions,
                   int32_t *row_order, int64_t *starts) {
    memset(starts, 0, sizeof(int64_t) * ((size_t)num_partitions + 1));
    for (size_t i = 0; i < n_rows; i++)
        starts[partition_of[i] + 1]++;
    for (int32_t p = 0; p < num_partitions; p++)
        starts[p + 1] += starts[p];
    /* Fill with a moving cursor per partition; starts[p] is restored afterwards. */
    for (size_t i = 0; i < n_rows; i++)
        row_order[starts[partition_of[i]]++] = (int32_t)i;
    for (int32_t p = num_partitions; p > 0; p--)
        starts[p] = starts[p - 1];
    starts[0] = 0;
}
