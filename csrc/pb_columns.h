/* Record batches to Arrow columns, for the client's fetcher and the Spark reader.
 *
 * Consumers that want columns (Spark, analytics) should not pay a Python object per
 * record: the records of each batch are decoded straight into growable Arrow-layout
 * buffers (offsets + data + validity bitmap for binary columns, plain arrays for numbers),
 * handed to pyarrow at the end without another pass.
 *
 * Columns (Spark's Kafka source schema): offset i64, timestamp i64 (ms), timestamp_type
 * i32 (0 CreateTime, 1 LogAppendTime), key binary, value binary, headers as
 * list<struct<key, value>> = header_offsets[n + 1] into header_key / header_value. */
#ifndef PB_COLUMNS_H
#define PB_COLUMNS_H

#include <stddef.h>
#include <stdint.h>

#include "pb_records.h"

typedef struct pb_binary_builder {
    int32_t *offsets;               /* length + 1 entries */
    uint8_t *data;
    size_t data_len, data_cap;
    uint8_t *validity;              /* bit i set = entry i present */
    int64_t length, capacity, null_count;
} pb_binary_builder;

typedef struct pb_record_columns {
    int64_t length, capacity;
    int64_t *offset;
    int64_t *timestamp;
    int32_t *timestamp_type;
    pb_binary_builder key, value;
    int32_t *header_offsets;        /* length + 1 entries */
    pb_binary_builder header_key, header_value;
} pb_record_columns;

/* 0, or -1 when out of memory. */
int pb_columns_init(pb_record_columns *c);
void pb_columns_free(pb_record_columns *c);

/* Appends the records of one batch whose (uncompressed) records section is
 * [records, records + len), keeping offsets in [min_offset, max_offset). Returns PB_OK,
 * a pb_err when the records are damaged (nothing of that batch is kept), or -1 when out
 * of memory. */
int pb_columns_add_records(pb_record_columns *c, const pb_batch_header *h,
                           const uint8_t *records, size_t len, int64_t min_offset,
                           int64_t max_offset);

#endif /* PB_COLUMNS_H */
