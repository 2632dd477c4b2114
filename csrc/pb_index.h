/* Floor/ceiling search over Kafka's memory-mapped index files.
 *
 * File formats (big-endian, as Kafka writes them; entries packed, no header):
 *   offset index (.index)      8 bytes: relative offset u32 | file position u32
 *   time index   (.timeindex) 12 bytes: timestamp i64      | relative offset u32
 * Keys (relative offset, timestamp) are non-decreasing along the file.
 *
 * Every search looks at the warm tail first: the last PB_INDEX_WARM_BYTES of entries.
 * Consumers and followers read near the log end, so lookups cluster there and those
 * pages stay resident; a cold lookup touches the rest. Same rule as Kafka's
 * AbstractIndex.warmEntries().
 *
 * Thread-safety: pure functions over caller-owned memory.
 */
#ifndef PB_INDEX_H
#define PB_INDEX_H

#include "pb_common.h"

#define PB_INDEX_WARM_BYTES 8192
#define PB_OFFSET_ENTRY_SIZE 8
#define PB_TIME_ENTRY_SIZE 12

/* Slot of the floor entry: the largest key <= target; among equal keys the first one
 * (earliest position, so a forward scan from it cannot miss the target). -1 when the
 * index is empty or target precedes the first entry. */
ptrdiff_t pb_offset_index_floor(const uint8_t *buf, size_t entries, int64_t target);
ptrdiff_t pb_time_index_floor(const uint8_t *buf, size_t entries, int64_t target);
/* The same over the offset index's position column (positions grow with the offsets):
 * the last indexed batch boundary at or before a file position. */
ptrdiff_t pb_offset_index_position_floor(const uint8_t *buf, size_t entries, int64_t target);

/* Slot of the first entry whose key >= target; `entries` when there is none. */
size_t pb_offset_index_ceiling(const uint8_t *buf, size_t entries, int64_t target);
size_t pb_time_index_ceiling(const uint8_t *buf, size_t entries, int64_t target);

/* Slot of the first time index entry whose relative offset >= target (the offsets of a
 * time index are non-decreasing too): the entries to keep when truncating to target.
 * Kafka's IndexSearchType.VALUE. */
size_t pb_time_index_offset_ceiling(const uint8_t *buf, size_t entries, int64_t target);

/* Entry fields are read with pb_common.h's pb_load_be32/pb_load_be64 (memcpy: time
 * index entries are 12 bytes, so every other i64 is misaligned). */

#endif
