/* Kafka's default key partitioner, for the bulk producer and the Spark writer.
 *
 * Keyed records must land where the Java client would put them (Utils.murmur2 with seed
 * 0x9747b28c, then (hash & 0x7fffffff) % numPartitions), so data written by pybroker and
 * by any other Kafka client co-partitions. Keys arrive as Arrow binary columns: an int32
 * offsets array (n + 1 entries, offsets[0] need not be 0 for a sliced array), a data
 * buffer, and an optional validity bitmap (bit i set = key i present; LSB first). */
#ifndef PB_PARTITIONER_H
#define PB_PARTITIONER_H

#include <stddef.h>
#include <stdint.h>

int32_t pb_murmur2(const uint8_t *data, size_t length);

/* partition_of[i] for every row; rows with a null key go to null_key_partition.
 * Returns 0, or -1 if an offset runs outside data_len (malformed column). */
int pb_partition_keys(const int32_t *offsets, const uint8_t *data, size_t data_len,
                      const uint8_t *validity, size_t n_rows, int32_t num_partitions,
                      int32_t null_key_partition, int32_t *partition_of);

/* A stable counting sort of rows by partition: row_order lists the row numbers grouped by
 * partition (ascending within a partition) and starts[p]..starts[p+1] is partition p's
 * range in row_order; starts has num_partitions + 1 entries. */
void pb_group_rows(const int32_t *partition_of, size_t n_rows, int32_t num_partitions,
                   int32_t *row_order, int64_t *starts);

#endif /* PB_PARTITIONER_H */
