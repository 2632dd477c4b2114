/* Kafka record batch v2 (magic 2), the unit pybroker stores and sends.
 *
 * Batch header, 61 bytes, big-endian:
 *   0 baseOffset i64 | 8 batchLength i32 (bytes after this field) | 12 partitionLeaderEpoch i32
 *  16 magic i8 = 2   | 17 crc u32 = CRC32C(bytes 21 .. end)        | 21 attributes i16
 *  23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64
 *  51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records...
 * attributes: bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
 *   bit 3 timestamp type (1 = LogAppendTime), bit 4 transactional, bit 5 control.
 * Record (zigzag varints, see pb_varint.h):
 *   length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
 *   keyLength varint (-1 null) | key | valueLength varint (-1 null) | value |
 *   headerCount varint | { headerKeyLength varint | key | headerValueLength varint | value }*
 * The CRC does not cover baseOffset, batchLength or partitionLeaderEpoch, so the broker
 * rewrites those without recomputing it.
 *
 * Every function here reads only inside [buf, buf + len) whatever the bytes say; they
 * take no locks and touch no Python state, so callers run them without the GIL. */
#ifndef PB_RECORDS_H
#define PB_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#define PB_BATCH_HEADER_SIZE 61
#define PB_LOG_OVERHEAD 12                      /* baseOffset + batchLength */
#define PB_MIN_BATCH_LENGTH (PB_BATCH_HEADER_SIZE - PB_LOG_OVERHEAD)
#define PB_MAGIC_V2 2

#define PB_OFF_BASE_OFFSET 0
#define PB_OFF_BATCH_LENGTH 8
#define PB_OFF_LEADER_EPOCH 12
#define PB_OFF_MAGIC 16
#define PB_OFF_CRC 17
#define PB_OFF_ATTRIBUTES 21
#define PB_OFF_LAST_OFFSET_DELTA 23
#define PB_OFF_BASE_TIMESTAMP 27
#define PB_OFF_MAX_TIMESTAMP 35
#define PB_OFF_PRODUCER_ID 43
#define PB_OFF_PRODUCER_EPOCH 51
#define PB_OFF_BASE_SEQUENCE 53
#define PB_OFF_RECORDS_COUNT 57

#define PB_ATTR_COMPRESSION_MASK 0x07
#define PB_ATTR_LOG_APPEND_TIME 0x08
#define PB_ATTR_TRANSACTIONAL 0x10
#define PB_ATTR_CONTROL 0x20
#define PB_CODEC_MAX 4                          /* zstd */

/* Error codes. Below PB_ERR_INVALID the bytes are damaged (CORRUPT_MESSAGE); from
 * PB_ERR_INVALID they are intact but break a rule (INVALID_RECORD). */
typedef enum pb_err {
    PB_OK = 0,
    PB_ERR_TRUNCATED = 1,           /* fewer bytes than the header or batchLength claims */
    PB_ERR_BATCH_LENGTH = 2,        /* batchLength below the header size or not the buffer's */
    PB_ERR_MAGIC = 3,
    PB_ERR_CRC = 4,
    PB_ERR_OFFSET_ORDER = 5,        /* scan: offsets not increasing / outside the segment */
    PB_ERR_INVALID = 32,
    PB_ERR_COUNT = 32,              /* recordsCount != lastOffsetDelta + 1, or < 1 */
    PB_ERR_RECORD_FRAMING = 33,     /* a varint or length runs past its record */
    PB_ERR_RECORD_SIZE = 34,        /* record length disagrees with its fields */
    PB_ERR_OFFSET_DELTA = 35,       /* record i does not have offsetDelta i */
    PB_ERR_TRAILING = 36,           /* bytes left after recordsCount records */
    PB_ERR_CONTROL = 37,            /* control batch from a producer */
    PB_ERR_HEADER = 38,             /* negative header count or null header key */
    PB_ERR_LENGTH = 39,             /* key or value length below -1 */
    PB_ERR_UNSUPPORTED = 64,        /* compression codec 5..7 */
    PB_ERR_NO_MEMORY = 96,          /* not the input's fault: the indices below */
} pb_err;

const char *pb_err_message(int err);

typedef struct pb_batch_header {
    int64_t base_offset;
    int32_t batch_length;
    int32_t partition_leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t first_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t records_count;
} pb_batch_header;

typedef struct pb_record {
    int8_t attributes;
    int64_t timestamp_delta;
    int32_t offset_delta;
    const uint8_t *key;             /* NULL when key_len == -1 */
    int32_t key_len;
    const uint8_t *value;
    int32_t value_len;
    int32_t header_count;
    const uint8_t *headers;         /* header_count encoded headers, already validated */
    const uint8_t *headers_end;
} pb_record;

/* Header fields without any check but the length (>= 61). */
int pb_read_header_raw(const uint8_t *buf, size_t len, pb_batch_header *h);
/* Header plus magic 2 and batchLength >= 49. */
int pb_read_header(const uint8_t *buf, size_t len, pb_batch_header *h);
/* pb_read_header, the whole batch present in len, and its CRC. */
int pb_check_batch(const uint8_t *buf, size_t len, pb_batch_header *h);
/* The indices in their batch of the records without a key, which a compacted topic
 * refuses (Kafka's LogValidator.validateKey; each one is a KIP-467 record error). Not an
 * error of the walk: a batch whose framing is broken anywhere gets that error instead.
 * Zeroed before use, freed with pb_keyless_free. */
typedef struct pb_keyless {
    int32_t *index;
    int32_t len;
    int32_t cap;
} pb_keyless;

void pb_keyless_free(pb_keyless *k);

/* Everything a producer's batch must satisfy: pb_check_batch, len is exactly the batch,
 * recordsCount, no control batch, known codec, and for uncompressed batches the framing
 * of every record (and, with `keyless`, which records have no key). Compressed records are
 * left to the caller (pb_validate_records on the decompressed bytes, or a
 * pb_record_walker). *err_pos: byte position of the problem. */
int pb_validate_batch(const uint8_t *buf, size_t len, pb_batch_header *h, size_t *err_pos,
                      pb_keyless *keyless);
/* `count` records filling [p, p+len) exactly, offsetDelta i for record i; with `keyless`
 * (else NULL), the records without a key are noted there. */
int pb_validate_records(const uint8_t *p, size_t len, int32_t count, size_t *err_pos,
                        pb_keyless *keyless);

/* pb_validate_records over a records section that arrives in pieces (a compressed batch
 * decompressed a chunk at a time), holding none of it: key, value and header bytes are
 * passed over as they arrive and only a varint split between pieces is kept. Verdicts and
 * error positions are pb_validate_records' on the whole section: a record wholly inside a
 * piece goes through the same parser, one spanning pieces field by field, and a fault
 * inside a record is reported only once the record is known to be complete (else the
 * record is truncated, PB_ERR_RECORD_FRAMING), since the whole-buffer walk checks a
 * record's length against the section before its fields. Not thread-safe. */
typedef struct pb_record_walker {
    int32_t count;                  /* records the section must hold */
    int32_t index;                  /* records complete so far */
    int step;                       /* what the next bytes are (pb_walk_step) */
    int after_skip;                 /* the step after the data being passed over */
    int err;                        /* PB_OK, or the verdict, which then stays */
    int pending;                    /* a fault inside the current record (see above) */
    int32_t offset_delta;
    int32_t headers_left;
    uint64_t pos;                   /* section bytes walked */
    uint64_t record_start;
    uint64_t record_end;            /* once the current record's length is read */
    uint64_t skip;                  /* data bytes still to pass over */
    uint64_t err_pos;
    uint8_t varint[10];             /* a varint split between pieces (PB_VARLONG_MAX) */
    uint8_t varint_len;
    pb_keyless *keyless;            /* NULL, or where records without a key are noted */
} pb_record_walker;

void pb_walker_init(pb_record_walker *w, int32_t count, pb_keyless *keyless);
/* Walks the next `len` bytes of the section: PB_OK while nothing is wrong so far, else
 * the verdict (w->err_pos), after which further pieces are ignored. */
int pb_walker_feed(pb_record_walker *w, const uint8_t *p, size_t len);
/* The section has ended: the verdict on it (w->err_pos). */
int pb_walker_finish(pb_record_walker *w);

/* Parses one record at *pp (advancing it) and checks its framing, headers included. */
int pb_record_parse(const uint8_t **pp, const uint8_t *end, pb_record *r);
/* Next header of a parsed record, between r.headers and r.headers_end (already
 * validated by pb_record_parse, so this returns PB_OK on them). */
int pb_header_next(const uint8_t **pp, const uint8_t *end, const uint8_t **key,
                   int32_t *key_len, const uint8_t **value, int32_t *value_len);

/* First record with timestamp >= target among `count` records: 1 found, 0 none, -err. */
int pb_records_find_timestamp(const uint8_t *p, size_t len, int32_t count, int64_t base_ts,
                              int64_t target, int32_t *offset_delta, int64_t *ts);

/* Rewrites baseOffset and partitionLeaderEpoch of the batch at buf; with
 * log_append_time >= 0 also sets the LogAppendTime bit and maxTimestamp and recomputes
 * the CRC (which then requires the whole batch within len). */
int pb_stamp_batch(uint8_t *buf, size_t len, int64_t base_offset, int32_t leader_epoch,
                   int64_t log_append_time);

/* Header walks from `start` to `end` over complete batches; 1 found (pos, h), 0 none,
 * -err when a header is damaged. */
int pb_find_position(const uint8_t *buf, size_t start, size_t end, int64_t target_offset,
                     size_t *pos, pb_batch_header *h);
int pb_find_timestamp(const uint8_t *buf, size_t start, size_t end, int64_t target_ts,
                      size_t *pos, pb_batch_header *h);

/* Recovery scan (Kafka LogSegment.recover): validates batches from start with their CRC
 * and builds the offset index (8-byte entries: relative offset u32, position u32) and time
 * index (12-byte entries: timestamp i64, relative offset u32), an entry whenever more than
 * index_interval_bytes were written since the last one. Stops at the first bad batch. */
typedef struct pb_scan {
    size_t valid_end;
    int64_t next_offset;
    int64_t max_timestamp;
    int64_t offset_of_max_timestamp;
    int64_t batch_count;
    uint8_t *offset_index;
    size_t offset_index_len, offset_index_cap;
    uint8_t *time_index;
    size_t time_index_len, time_index_cap;
    int err;                        /* PB_OK or the reason the scan stopped early */
    size_t err_pos;
} pb_scan;
/* Returns 0, or -1 when out of memory (then pb_scan_free). */
int pb_scan_log(const uint8_t *buf, size_t start, size_t end, int64_t base_offset,
                int64_t index_interval_bytes, pb_scan *out);
void pb_scan_free(pb_scan *s);

/* Columnar encoder input, Arrow's binary layout: offsets[n + 1] (native int32), data,
 * optional validity bitmap (bit i set = not null, LSB first, starting at validity_offset).
 * offsets == NULL means every entry is null. `length`: entries the caller's buffers
 * can describe (offsets and validity), checked against what the batch needs. */
typedef struct pb_column {
    const int32_t *offsets;
    const uint8_t *data;
    size_t data_len;
    const uint8_t *validity;
    int64_t validity_offset;
    int64_t length;
} pb_column;

typedef struct pb_encode_input {
    int32_t count;
    pb_column keys;
    pb_column values;
    const int64_t *timestamps;      /* count entries, or NULL: default_timestamp for all */
    int64_t default_timestamp;
    const int32_t *header_offsets;  /* count + 1 ranges into header_keys/values, or NULL */
    pb_column header_keys;
    pb_column header_values;
    /* Row order (may be NULL): record i is row rows[i] of the columns, which then may
     * hold rows of other batches (the producer encodes each partition's rows straight
     * from one Arrow batch instead of gathering them first). The lengths bound the row
     * numbers: entries in timestamps and in header_offsets (count + 1 without rows). */
    const int32_t *rows;
    int64_t timestamps_length;
    int64_t header_offsets_length;
    int64_t base_timestamp;         /* set by pb_encode_records_size */
    int64_t max_timestamp;
} pb_encode_input;

/* Checks the columns (offsets in range and non-decreasing, header keys not null; with
 * rows, each row's entries only) and returns the encoded size of the records section,
 * or -1 with *why set. */
int64_t pb_encode_records_size(pb_encode_input *in, const char **why);
/* Writes the records section (size from pb_encode_records_size) at out. */
void pb_encode_records(uint8_t *out, const pb_encode_input *in);
/* An open batch in the caller's buffer: records are appended from columns, over any
 * number of calls, while they fit in `capacity`; pb_builder_finish then writes the header
 * and the CRC. The producer fills one per partition across Arrow batches, so a batch is
 * about the producer's batch size however the rows arrive. Not thread-safe. */
typedef struct pb_batch_builder {
    uint8_t *buf;
    size_t capacity;
    size_t len;                     /* header + records written */
    int32_t count;
    int64_t base_timestamp;         /* of the first record */
    int64_t max_timestamp;
    uint32_t records_crc;           /* CRC32C of the records written so far */
} pb_batch_builder;

void pb_builder_init(pb_batch_builder *b, uint8_t *buf, size_t capacity);
/* Appends records start .. in->count - 1 of `in` (its rows, lengths and timestamps; its
 * base_timestamp is not used) in one pass, each checked as pb_check_rows does, while they
 * fit. Returns the index of the first record not appended (in->count: all were); when
 * that record does not fit an empty batch, *need is the capacity it takes (else 0).
 * -1 with *why: a bad row, nothing appended. */
int64_t pb_builder_append(pb_batch_builder *b, const pb_encode_input *in, int32_t start,
                          size_t *need, const char **why);
/* Fills h's count and timestamp fields and finishes the batch (pb_finish_batch over
 * b->len bytes); b->count must be >= 1. The caller sets the other fields of h. */
void pb_builder_finish(pb_batch_builder *b, pb_batch_header *h);
/* Writes the 61-byte header (batchLength from total_size) and the CRC over
 * [21, total_size), the records being in place already. */
void pb_finish_batch(uint8_t *out, size_t total_size, const pb_batch_header *h);

#endif /* PB_RECORDS_H */
