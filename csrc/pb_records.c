/* Record batch v2: validation, stamping, recovery scan, lookups and the columnar encoder.
 * Format at the top of pb_records.h. Performance notes:
 * - validation is CRC-bound: one pass of the 3-way CRC plus one walk of the record
 *   varints, no allocation, no copy;
 * - the scan keeps its index entries in two growing C arrays, so recovery of a whole
 *   segment runs without touching Python once. */
#include "pb_records.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "pb_common.h"
#include "pb_crc32c.h"
#include "pb_varint.h"

static const char *const pb_err_messages[] = {
    [PB_OK] = "ok",
    [PB_ERR_TRUNCATED] = "batch truncated",
    [PB_ERR_BATCH_LENGTH] = "invalid batchLength",
    [PB_ERR_MAGIC] = "unsupported magic (only record batch v2 is accepted)",
    [PB_ERR_CRC] = "CRC32C mismatch",
    [PB_ERR_OFFSET_ORDER] = "batch offsets out of order or outside the segment",
    [PB_ERR_COUNT] = "recordsCount does not match lastOffsetDelta + 1",
    [PB_ERR_RECORD_FRAMING] = "record field runs past the end of its record",
    [PB_ERR_RECORD_SIZE] = "record length does not match its fields",
    [PB_ERR_OFFSET_DELTA] = "record offsetDelta is not its index in the batch",
    [PB_ERR_TRAILING] = "bytes left after the last record",
    [PB_ERR_CONTROL] = "control batch not accepted from a producer",
    [PB_ERR_HEADER] = "invalid record header (negative count or null key)",
    [PB_ERR_LENGTH] = "key or value length below -1",
    [PB_ERR_UNSUPPORTED] = "unknown compression codec",
    [PB_ERR_NO_MEMORY] = "out of memory",
};

const char *pb_err_message(int err) {
    if (err < 0) err = -err;
    if (err >= 0 && (size_t)err < sizeof(pb_err_messages) / sizeof(pb_err_messages[0]) &&
        pb_err_messages[err])
        return pb_err_messages[err];
    return "unknown error";
}

/* ---- header ---- */

int pb_read_header_raw(const uint8_t *buf, size_t len, pb_batch_header *h) {
    if (PB_UNLIKELY(len < PB_BATCH_HEADER_SIZE)) return PB_ERR_TRUNCATED;
    h->base_offset = (int64_t)pb_load_be64(buf + PB_OFF_BASE_OFFSET);
    h->batch_length = (int32_t)pb_load_be32(buf + PB_OFF_BATCH_LENGTH);
    h->partition_leader_epoch = (int32_t)pb_load_be32(buf + PB_OFF_LEADER_EPOCH);
    h->magic = (int8_t)buf[PB_OFF_MAGIC];
    h->crc = pb_load_be32(buf + PB_OFF_CRC);
    h->attributes = (int16_t)pb_load_be16(buf + PB_OFF_ATTRIBUTES);
    h->last_offset_delta = (int32_t)pb_load_be32(buf + PB_OFF_LAST_OFFSET_DELTA);
    h->first_timestamp = (int64_t)pb_load_be64(buf + PB_OFF_BASE_TIMESTAMP);
    h->max_timestamp = (int64_t)pb_load_be64(buf + PB_OFF_MAX_TIMESTAMP);
    h->producer_id = (int64_t)pb_load_be64(buf + PB_OFF_PRODUCER_ID);
    h->producer_epoch = (int16_t)pb_load_be16(buf + PB_OFF_PRODUCER_EPOCH);
    h->base_sequence = (int32_t)pb_load_be32(buf + PB_OFF_BASE_SEQUENCE);
    h->records_count = (int32_t)pb_load_be32(buf + PB_OFF_RECORDS_COUNT);
    return PB_OK;
}

int pb_read_header(const uint8_t *buf, size_t len, pb_batch_header *h) {
    int err = pb_read_header_raw(buf, len, h);
    if (err) return err;
    if (PB_UNLIKELY(h->magic != PB_MAGIC_V2)) return PB_ERR_MAGIC;
    if (PB_UNLIKELY(h->batch_length < PB_MIN_BATCH_LENGTH)) return PB_ERR_BATCH_LENGTH;
    return PB_OK;
}

int pb_check_batch(const uint8_t *buf, size_t len, pb_batch_header *h) {
    int err = pb_read_header(buf, len, h);
    if (err) return err;
    size_t size = (size_t)h->batch_length + PB_LOG_OVERHEAD;
    if (PB_UNLIKELY(size > len)) return PB_ERR_TRUNCATED;
    uint32_t crc = pb_crc32c(0, buf + PB_OFF_ATTRIBUTES, size - PB_OFF_ATTRIBUTES);
    if (PB_UNLIKELY(crc != h->crc)) return PB_ERR_CRC;
    return PB_OK;
}

/* ---- records ---- */

/* A key/value length: -1 (null) or a length that fits before `end`. */
PB_INLINE int pb_read_bytes(const uint8_t **pp, const uint8_t *end, const uint8_t **data,
                            int32_t *len) {
    if (PB_UNLIKELY(pb_read_varint(pp, end, len))) return PB_ERR_RECORD_FRAMING;
    if (*len < 0) {
        if (PB_UNLIKELY(*len != -1)) return PB_ERR_LENGTH;
        *data = NULL;
        return PB_OK;
    }
    if (PB_UNLIKELY((size_t)(end - *pp) < (size_t)*len)) return PB_ERR_RECORD_FRAMING;
    *data = *pp;
    *pp += *len;
    return PB_OK;
}

static inline int pb_parse_record(const uint8_t **pp, const uint8_t *end, pb_record *r) {
    const uint8_t *p = *pp;
    int32_t length;
    int err;
    if (PB_UNLIKELY(pb_read_varint(&p, end, &length))) return PB_ERR_RECORD_FRAMING;
    /* Smallest record body: attributes + five one-byte varints. */
    if (PB_UNLIKELY(length < 6)) return PB_ERR_RECORD_SIZE;
    if (PB_UNLIKELY((size_t)(end - p) < (size_t)length)) return PB_ERR_RECORD_FRAMING;
    const uint8_t *rend = p + length;
    r->attributes = (int8_t)*p++;
    if (PB_UNLIKELY(pb_read_varlong(&p, rend, &r->timestamp_delta))) return PB_ERR_RECORD_FRAMING;
    if (PB_UNLIKELY(pb_read_varint(&p, rend, &r->offset_delta))) return PB_ERR_RECORD_FRAMING;
    if ((err = pb_read_bytes(&p, rend, &r->key, &r->key_len))) return err;
    if ((err = pb_read_bytes(&p, rend, &r->value, &r->value_len))) return err;
    if (PB_UNLIKELY(pb_read_varint(&p, rend, &r->header_count))) return PB_ERR_RECORD_FRAMING;
    if (PB_UNLIKELY(r->header_count < 0)) return PB_ERR_HEADER;
    r->headers = p;
    for (int32_t i = 0; i < r->header_count; i++) {
        const uint8_t *data;
        int32_t n;
        if ((err = pb_read_bytes(&p, rend, &data, &n))) return err;
        if (PB_UNLIKELY(n < 0)) return PB_ERR_HEADER;
        if ((err = pb_read_bytes(&p, rend, &data, &n))) return err;
    }
    r->headers_end = p;
    if (PB_UNLIKELY(p != rend)) return PB_ERR_RECORD_SIZE;
    *pp = p;
    return PB_OK;
}

int pb_record_parse(const uint8_t **pp, const uint8_t *end, pb_record *r) {
    return pb_parse_record(pp, end, r);
}

int pb_header_next(const uint8_t **pp, const uint8_t *end, const uint8_t **key,
                   int32_t *key_len, const uint8_t **value, int32_t *value_len) {
    int err = pb_read_bytes(pp, end, key, key_len);
    if (!err) err = pb_read_bytes(pp, end, value, value_len);
    return err;
}

void pb_keyless_free(pb_keyless *k) {
    free(k->index);
    memset(k, 0, sizeof(*k));
}

/* Notes record `index` as keyless: PB_OK, or PB_ERR_NO_MEMORY. The array grows by
 * doubling, so a batch of n keyless records costs O(n) (4 bytes each). */
static int pb_keyless_add(pb_keyless *k, int32_t index) {
    if (k->len == k->cap) {
        int32_t cap = k->cap ? k->cap * 2 : 16;
        int32_t *grown = realloc(k->index, (size_t)cap * sizeof(*grown));
        if (!grown) return PB_ERR_NO_MEMORY;
        k->index = grown;
        k->cap = cap;
    }
    k->index[k->len++] = index;
    return PB_OK;
}

int pb_validate_records(const uint8_t *p, size_t len, int32_t count, size_t *err_pos,
                        pb_keyless *keyless) {
    const uint8_t *start = p, *end = p + len;
    pb_record r;
    for (int32_t i = 0; i < count; i++) {
        int err = pb_parse_record(&p, end, &r);
        if (PB_UNLIKELY(err)) {
            *err_pos = (size_t)(p - start);
            return err;
        }
        if (PB_UNLIKELY(r.offset_delta != i)) {
            *err_pos = (size_t)(p - start);
            return PB_ERR_OFFSET_DELTA;
        }
        if (keyless && r.key_len < 0 && PB_UNLIKELY(pb_keyless_add(keyless, i))) {
            *err_pos = (size_t)(p - start);
            return PB_ERR_NO_MEMORY;
        }
    }
    if (PB_UNLIKELY(p != end)) {
        *err_pos = (size_t)(p - start);
        return PB_ERR_TRAILING;
    }
    return PB_OK;
}

/* ---- resumable record walk ---- */

enum {
    PB_WALK_LENGTH,                 /* a record's length varint; after `count`: nothing */
    PB_WALK_ATTRIBUTES,
    PB_WALK_TIMESTAMP,
    PB_WALK_OFFSET,
    PB_WALK_KEY,                    /* a length varint, then that many bytes ... */
    PB_WALK_VALUE,
    PB_WALK_HEADER_COUNT,
    PB_WALK_HEADER_KEY,
    PB_WALK_HEADER_VALUE,
    PB_WALK_HEADER_DONE,
    PB_WALK_RECORD_END,             /* every field read: the record must end here */
    PB_WALK_SKIP,                   /* ... passed over here, then after_skip */
    PB_WALK_REST,                   /* to the record's end, then the pending fault */
};

void pb_walker_init(pb_record_walker *w, int32_t count, pb_keyless *keyless) {
    memset(w, 0, sizeof(*w));
    w->count = count;
    w->step = PB_WALK_LENGTH;
    w->keyless = keyless;
}

PB_INLINE void pb_walk_fail(pb_record_walker *w, int err, uint64_t pos) {
    w->err = err;
    w->err_pos = pos;
}

PB_INLINE void pb_walk_fault(pb_record_walker *w, int err) {
    w->pending = err;
    w->step = PB_WALK_REST;
}

/* Gathers the varint at w->pos into w->varint: 1 once it is whole (a byte without the
 * continuation bit, `max` bytes, or `bound` reached), 0 when the piece ended first. Its
 * bytes are then decoded by pb_read_varint(long), which so fails exactly where the
 * whole-buffer read (bounded by the same `bound`) fails. */
PB_INLINE int pb_walk_gather(pb_record_walker *w, const uint8_t **pp, const uint8_t *end,
                             int max, uint64_t bound) {
    while (w->varint_len < max && w->pos < bound) {
        if (*pp == end) return 0;
        uint8_t b = *(*pp)++;
        w->pos++;
        w->varint[w->varint_len++] = b;
        if (!(b & 0x80)) break;
    }
    return 1;
}

PB_INLINE int pb_walk_varint(pb_record_walker *w, int32_t *v) {
    const uint8_t *q = w->varint;
    int rc = pb_read_varint(&q, w->varint + w->varint_len, v);
    w->varint_len = 0;
    return rc;
}

/* The record's fields are read: it must end here (RECORD_SIZE) and be the next offset. */
PB_INLINE void pb_walk_record_end(pb_record_walker *w) {
    if (w->pos != w->record_end) {
        pb_walk_fault(w, PB_ERR_RECORD_SIZE);
    } else if (w->offset_delta != w->index) {
        pb_walk_fail(w, PB_ERR_OFFSET_DELTA, w->pos);
    } else {
        w->index++;
        w->record_start = w->pos;
        w->step = PB_WALK_LENGTH;
    }
}

/* One step of the field-by-field walk of a record spanning pieces: 1 when it moved on
 * (bytes read, or a decision that needs none), 0 when it needs bytes the piece lacks.
 * The checks are pb_parse_record's and pb_read_bytes', in their order. */
static int pb_walk_step(pb_record_walker *w, const uint8_t **pp, const uint8_t *end) {
    int32_t v;
    int64_t unused;
    int err = PB_OK;
    switch (w->step) {
    case PB_WALK_LENGTH:
        if (w->index >= w->count) {
            if (*pp == end) return 0;
            pb_walk_fail(w, PB_ERR_TRAILING, w->pos);
            return 1;
        }
        /* bounded by the section's end, which the piece does not know: finish() says */
        if (!pb_walk_gather(w, pp, end, PB_VARINT_MAX, UINT64_MAX)) return 0;
        if (pb_walk_varint(w, &v)) {
            pb_walk_fail(w, PB_ERR_RECORD_FRAMING, w->record_start);
        } else if (v < 6) {
            pb_walk_fail(w, PB_ERR_RECORD_SIZE, w->record_start);
        } else {
            w->record_end = w->pos + (uint64_t)v;
            w->step = PB_WALK_ATTRIBUTES;
        }
        return 1;
    case PB_WALK_ATTRIBUTES:        /* length >= 6: inside the record */
        if (*pp == end) return 0;
        (*pp)++;
        w->pos++;
        w->step = PB_WALK_TIMESTAMP;
        return 1;
    case PB_WALK_TIMESTAMP: {
        if (!pb_walk_gather(w, pp, end, PB_VARLONG_MAX, w->record_end)) return 0;
        const uint8_t *q = w->varint;
        err = pb_read_varlong(&q, w->varint + w->varint_len, &unused);
        w->varint_len = 0;
        if (err) pb_walk_fault(w, PB_ERR_RECORD_FRAMING);
        else w->step = PB_WALK_OFFSET;
        return 1;
    }
    case PB_WALK_OFFSET:
        if (!pb_walk_gather(w, pp, end, PB_VARINT_MAX, w->record_end)) return 0;
        if (pb_walk_varint(w, &w->offset_delta)) pb_walk_fault(w, PB_ERR_RECORD_FRAMING);
        else w->step = PB_WALK_KEY;
        return 1;
    case PB_WALK_KEY:
    case PB_WALK_VALUE:
    case PB_WALK_HEADER_KEY:
    case PB_WALK_HEADER_VALUE:
        if (!pb_walk_gather(w, pp, end, PB_VARINT_MAX, w->record_end)) return 0;
        if (pb_walk_varint(w, &v)) err = PB_ERR_RECORD_FRAMING;
        else if (v < -1) err = PB_ERR_LENGTH;
        else if (v < 0 && w->step == PB_WALK_HEADER_KEY) err = PB_ERR_HEADER;
        else if (v > 0 && w->record_end - w->pos < (uint64_t)v) err = PB_ERR_RECORD_FRAMING;
        if (err) {
            pb_walk_fault(w, err);
            return 1;
        }
        if (v < 0 && w->step == PB_WALK_KEY && w->keyless &&
            PB_UNLIKELY(pb_keyless_add(w->keyless, w->index))) {
            pb_walk_fail(w, PB_ERR_NO_MEMORY, w->pos);
            return 1;
        }
        w->skip = v > 0 ? (uint64_t)v : 0;
        w->after_skip = w->step == PB_WALK_KEY ? PB_WALK_VALUE
                      : w->step == PB_WALK_VALUE ? PB_WALK_HEADER_COUNT
                      : w->step == PB_WALK_HEADER_KEY ? PB_WALK_HEADER_VALUE
                      : PB_WALK_HEADER_DONE;
        w->step = PB_WALK_SKIP;
        return 1;
    case PB_WALK_HEADER_COUNT:
        if (!pb_walk_gather(w, pp, end, PB_VARINT_MAX, w->record_end)) return 0;
        if (pb_walk_varint(w, &w->headers_left)) {
            pb_walk_fault(w, PB_ERR_RECORD_FRAMING);
        } else if (w->headers_left < 0) {
            pb_walk_fault(w, PB_ERR_HEADER);
        } else {
            w->step = w->headers_left ? PB_WALK_HEADER_KEY : PB_WALK_RECORD_END;
        }
        return 1;
    case PB_WALK_HEADER_DONE:
        w->step = --w->headers_left ? PB_WALK_HEADER_KEY : PB_WALK_RECORD_END;
        return 1;
    case PB_WALK_RECORD_END:
        pb_walk_record_end(w);
        return 1;
    case PB_WALK_SKIP: {
        size_t n = (size_t)(end - *pp) < w->skip ? (size_t)(end - *pp) : (size_t)w->skip;
        *pp += n;
        w->pos += n;
        w->skip -= n;
        if (w->skip) return 0;
        w->step = w->after_skip;
        return 1;
    }
    case PB_WALK_REST: {
        uint64_t left = w->record_end - w->pos;
        size_t n = (size_t)(end - *pp) < left ? (size_t)(end - *pp) : (size_t)left;
        *pp += n;
        w->pos += n;
        if (w->pos != w->record_end) return 0;
        pb_walk_fail(w, w->pending, w->record_start);
        return 1;
    }
    }
    return 0;
}

int pb_walker_feed(pb_record_walker *w, const uint8_t *p, size_t len) {
    const uint8_t *end = p + len;
    while (!w->err) {
        if (w->step == PB_WALK_LENGTH && w->varint_len == 0 && w->index < w->count) {
            /* A record wholly inside the piece: the whole-buffer parser, at its speed (its
             * length check against `end` passes here as it would against the section's). */
            const uint8_t *q = p;
            int32_t length;
            if (pb_read_varint(&q, end, &length) == 0 && length >= 6 &&
                (size_t)(end - q) >= (size_t)length) {
                const uint8_t *start = p;
                pb_record r;
                int err = pb_parse_record(&p, end, &r);
                if (PB_UNLIKELY(err)) {
                    pb_walk_fail(w, err, w->pos);
                    break;
                }
                w->pos += (uint64_t)(p - start);
                if (w->keyless && r.key_len < 0 &&
                    PB_UNLIKELY(pb_keyless_add(w->keyless, w->index))) {
                    pb_walk_fail(w, PB_ERR_NO_MEMORY, w->pos);
                    break;
                }
                w->offset_delta = r.offset_delta;
                w->record_end = w->pos;
                pb_walk_record_end(w);
                continue;
            }
        }
        if (!pb_walk_step(w, &p, end)) break;
    }
    return w->err;
}

int pb_walker_finish(pb_record_walker *w) {
    /* Any record still open is incomplete: every step that needs no more bytes was taken. */
    if (!w->err && w->index < w->count)
        pb_walk_fail(w, PB_ERR_RECORD_FRAMING, w->record_start);
    return w->err;
}

int pb_validate_batch(const uint8_t *buf, size_t len, pb_batch_header *h, size_t *err_pos,
                      pb_keyless *keyless) {
    *err_pos = 0;
    int err = pb_check_batch(buf, len, h);
    if (err) return err;
    if (PB_UNLIKELY((size_t)h->batch_length + PB_LOG_OVERHEAD != len)) return PB_ERR_BATCH_LENGTH;
    if (PB_UNLIKELY(h->attributes & PB_ATTR_CONTROL)) return PB_ERR_CONTROL;
    if (PB_UNLIKELY(h->records_count < 1 || h->last_offset_delta < 0 ||
                    (int64_t)h->records_count != (int64_t)h->last_offset_delta + 1))
        return PB_ERR_COUNT;
    int codec = h->attributes & PB_ATTR_COMPRESSION_MASK;
    if (PB_UNLIKELY(codec > PB_CODEC_MAX)) return PB_ERR_UNSUPPORTED;
    if (codec != 0) return PB_OK;
    err = pb_validate_records(buf + PB_BATCH_HEADER_SIZE, len - PB_BATCH_HEADER_SIZE,
                              h->records_count, err_pos, keyless);
    *err_pos += PB_BATCH_HEADER_SIZE;
    return err;
}

int pb_records_find_timestamp(const uint8_t *p, size_t len, int32_t count, int64_t base_ts,
                              int64_t target, int32_t *offset_delta, int64_t *ts) {
    const uint8_t *end = p + len;
    pb_record r;
    for (int32_t i = 0; i < count; i++) {
        int err = pb_parse_record(&p, end, &r);
        if (err) return -err;
        int64_t t = (int64_t)((uint64_t)base_ts + (uint64_t)r.timestamp_delta);
        if (t >= target) {
            *offset_delta = r.offset_delta;
            *ts = t;
            return 1;
        }
    }
    return 0;
}

/* ---- broker-side rewrites ---- */

int pb_stamp_batch(uint8_t *buf, size_t len, int64_t base_offset, int32_t leader_epoch,
                   int64_t log_append_time) {
    pb_batch_header h;
    int err = pb_read_header(buf, len, &h);
    if (err) return err;
    size_t size = (size_t)h.batch_length + PB_LOG_OVERHEAD;
    if (log_append_time >= 0 && size > len) return PB_ERR_TRUNCATED;
    pb_store_be64(buf + PB_OFF_BASE_OFFSET, (uint64_t)base_offset);
    pb_store_be32(buf + PB_OFF_LEADER_EPOCH, (uint32_t)leader_epoch);
    if (log_append_time >= 0) {
        pb_store_be16(buf + PB_OFF_ATTRIBUTES,
                      (uint16_t)((uint16_t)h.attributes | PB_ATTR_LOG_APPEND_TIME));
        pb_store_be64(buf + PB_OFF_MAX_TIMESTAMP, (uint64_t)log_append_time);
        pb_store_be32(buf + PB_OFF_CRC,
                      pb_crc32c(0, buf + PB_OFF_ATTRIBUTES, size - PB_OFF_ATTRIBUTES));
    }
    return PB_OK;
}

/* ---- walks over a segment ---- */

/* Header of the complete batch at pos: PB_OK, PB_ERR_TRUNCATED when the batch is not
 * complete before end, or another error for a damaged header. */
PB_INLINE int pb_header_at(const uint8_t *buf, size_t pos, size_t end, pb_batch_header *h) {
    int err = pb_read_header(buf + pos, end - pos, h);
    if (err) return err;
    if ((size_t)h->batch_length + PB_LOG_OVERHEAD > end - pos) return PB_ERR_TRUNCATED;
    return PB_OK;
}

/* First complete batch from start whose last offset (by_timestamp == 0) or maxTimestamp
 * (by_timestamp == 1) reaches target. */
static int pb_walk(const uint8_t *buf, size_t start, size_t end, int by_timestamp,
                   int64_t target, size_t *pos, pb_batch_header *h) {
    size_t p = start;
    while (p < end) {
        int err = pb_header_at(buf, p, end, h);
        if (err == PB_ERR_TRUNCATED) return 0;
        if (err) {
            *pos = p;
            return -err;
        }
        int64_t key = by_timestamp ? h->max_timestamp
                                   : h->base_offset + (int64_t)h->last_offset_delta;
        if (key >= target) {
            *pos = p;
            return 1;
        }
        p += (size_t)h->batch_length + PB_LOG_OVERHEAD;
    }
    return 0;
}

int pb_find_position(const uint8_t *buf, size_t start, size_t end, int64_t target_offset,
                     size_t *pos, pb_batch_header *h) {
    return pb_walk(buf, start, end, 0, target_offset, pos, h);
}

int pb_find_timestamp(const uint8_t *buf, size_t start, size_t end, int64_t target_ts,
                      size_t *pos, pb_batch_header *h) {
    return pb_walk(buf, start, end, 1, target_ts, pos, h);
}

static int pb_grow(uint8_t **data, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap * 2 : 4096;
    while (ncap < need) ncap *= 2;
    uint8_t *n = realloc(*data, ncap);
    if (!n) return -1;
    *data = n;
    *cap = ncap;
    return 0;
}

int pb_scan_log(const uint8_t *buf, size_t start, size_t end, int64_t base_offset,
                int64_t index_interval_bytes, pb_scan *s) {
    memset(s, 0, sizeof(*s));
    s->valid_end = start;
    s->next_offset = base_offset;
    s->max_timestamp = -1;
    s->offset_of_max_timestamp = -1;
    int64_t last_time_entry_ts = -1;            /* Kafka's empty TimeIndex lastEntry */
    size_t last_index_entry = start;
    size_t p = start;
    pb_batch_header h;
    while (p < end) {
        int err = pb_check_batch(buf + p, end - p, &h);
        if (!err) {
            int64_t last = h.base_offset + (int64_t)h.last_offset_delta;
            if (h.last_offset_delta < 0 || h.base_offset < s->next_offset ||
                last - base_offset > INT32_MAX)
                err = PB_ERR_OFFSET_ORDER;
        }
        if (err) {
            s->err = err;
            s->err_pos = p;
            break;
        }
        int64_t last = h.base_offset + (int64_t)h.last_offset_delta;
        if (h.max_timestamp > s->max_timestamp) {
            s->max_timestamp = h.max_timestamp;
            s->offset_of_max_timestamp = last;
        }
        /* Same rule as Kafka's LogSegment.recover: an entry for this batch when more than
         * index_interval_bytes lie between the last entry and this batch's start. */
        if ((int64_t)(p - last_index_entry) > index_interval_bytes) {
            if (pb_grow(&s->offset_index, &s->offset_index_cap, s->offset_index_len + 8) ||
                pb_grow(&s->time_index, &s->time_index_cap, s->time_index_len + 12))
                return -1;
            uint8_t *o = s->offset_index + s->offset_index_len;
            pb_store_be32(o, (uint32_t)(last - base_offset));
            pb_store_be32(o + 4, (uint32_t)p);
            s->offset_index_len += 8;
            if (s->max_timestamp > last_time_entry_ts) {
                uint8_t *t = s->time_index + s->time_index_len;
                pb_store_be64(t, (uint64_t)s->max_timestamp);
                pb_store_be32(t + 8, (uint32_t)(s->offset_of_max_timestamp - base_offset));
                s->time_index_len += 12;
                last_time_entry_ts = s->max_timestamp;
            }
            last_index_entry = p;
        }
        p += (size_t)h.batch_length + PB_LOG_OVERHEAD;
        s->valid_end = p;
        s->next_offset = last + 1;
        s->batch_count++;
    }
    return 0;
}

void pb_scan_free(pb_scan *s) {
    free(s->offset_index);
    free(s->time_index);
    s->offset_index = s->time_index = NULL;
    s->offset_index_len = s->offset_index_cap = s->time_index_len = s->time_index_cap = 0;
}

/* ---- columnar encoder ---- */

PB_INLINE int pb_col_valid(const pb_column *c, int64_t i) {
    if (c->offsets == NULL) return 0;
    if (c->validity == NULL) return 1;
    int64_t b = c->validity_offset + i;
    return (c->validity[b >> 3] >> (b & 7)) & 1;
}

/* Length of entry i (-1 for null); offsets were checked by pb_check_column. */
PB_INLINE int32_t pb_col_len(const pb_column *c, int64_t i) {
    if (!pb_col_valid(c, i)) return -1;
    return c->offsets[i + 1] - c->offsets[i];
}

PB_INLINE size_t pb_bytes_size(int32_t n) {
    return n < 0 ? 1 : pb_varint_size(n) + (size_t)n;
}

PB_INLINE uint8_t *pb_write_col(uint8_t *o, const pb_column *c, int64_t i) {
    int32_t n = pb_col_len(c, i);
    o += pb_write_varint(o, n);
    if (n > 0) {
        memcpy(o, c->data + c->offsets[i], (size_t)n);
        o += n;
    }
    return o;
}

static int pb_check_column(const pb_column *c, int64_t n) {
    if (c->offsets == NULL) return 0;
    if (n > c->length || c->offsets[0] < 0) return -1;
    for (int64_t i = 0; i < n; i++)
        if (c->offsets[i + 1] < c->offsets[i]) return -1;
    return (size_t)c->offsets[n] <= c->data_len ? 0 : -1;
}

/* Row r's entry lies inside its column. With a row order the columns hold rows of other
 * batches too: checking them whole would cost a pass over the Arrow batch per encoded
 * batch, so each row the batch reads is checked instead. */
PB_INLINE int pb_check_entry(const pb_column *c, int64_t r) {
    if (c->offsets == NULL) return 0;
    if (r < 0 || r >= c->length) return -1;
    int32_t a = c->offsets[r], b = c->offsets[r + 1];
    return (a < 0 || b < a || (size_t)b > c->data_len) ? -1 : 0;
}

PB_INLINE int64_t pb_row(const pb_encode_input *in, int32_t i) {
    return in->rows ? (int64_t)in->rows[i] : (int64_t)i;
}

/* Row r of the input: its row number, key/value and header entries lie inside their
 * columns and header keys are not null. */
PB_INLINE int pb_check_row(const pb_encode_input *in, int64_t r, const char **why) {
    if (PB_UNLIKELY(r < 0 || (in->timestamps && r >= in->timestamps_length))) {
        *why = "row number outside the columns";
        return -1;
    }
    if (PB_UNLIKELY(pb_check_entry(&in->keys, r) || pb_check_entry(&in->values, r))) {
        *why = "key/value offsets out of order or past the data buffer";
        return -1;
    }
    if (!in->header_offsets) return 0;
    if (PB_UNLIKELY(r + 1 >= in->header_offsets_length)) goto bad_headers;
    int32_t h0 = in->header_offsets[r], h1 = in->header_offsets[r + 1];
    if (PB_UNLIKELY(h0 < 0 || h1 < h0)) goto bad_headers;
    for (int32_t j = h0; j < h1; j++) {
        if (pb_check_entry(&in->header_keys, j) || pb_check_entry(&in->header_values, j))
            goto bad_headers;
        if (!pb_col_valid(&in->header_keys, j)) {
            *why = "header keys must not be null";
            return -1;
        }
    }
    return 0;
bad_headers:
    *why = "header offsets out of order or past their columns";
    return -1;
}

static int pb_check_rows(const pb_encode_input *in, const char **why) {
    for (int32_t i = 0; i < in->count; i++)
        if (pb_check_row(in, in->rows[i], why)) return -1;
    return 0;
}

/* Body size of record i (row r): from the lengths only, no data touched. */
PB_INLINE size_t pb_record_body_size(const pb_encode_input *in, int64_t r, int64_t ts_delta,
                                     int32_t offset_delta, int32_t h0, int32_t h1) {
    size_t body = 1 + pb_varlong_size(ts_delta) + pb_varint_size(offset_delta) +
                  pb_bytes_size(pb_col_len(&in->keys, r)) +
                  pb_bytes_size(pb_col_len(&in->values, r)) + pb_varint_size(h1 - h0);
    for (int32_t j = h0; j < h1; j++)
        body += pb_bytes_size(pb_col_len(&in->header_keys, j)) +
                pb_bytes_size(pb_col_len(&in->header_values, j));
    return body;
}

int64_t pb_encode_records_size(pb_encode_input *in, const char **why) {
    int32_t n = in->count;
    int64_t nheaders = 0;
    if (n < 1) {
        *why = "a batch needs at least one record";
        return -1;
    }
    if (in->rows) {
        if (pb_check_rows(in, why)) return -1;
    } else if (pb_check_column(&in->keys, n) || pb_check_column(&in->values, n)) {
        *why = "key/value offsets out of order or past the data buffer";
        return -1;
    } else if (in->header_offsets) {
        if (in->header_offsets[0] < 0) goto bad_headers;
        for (int32_t i = 0; i < n; i++)
            if (in->header_offsets[i + 1] < in->header_offsets[i]) goto bad_headers;
        nheaders = in->header_offsets[n];
        if (pb_check_column(&in->header_keys, nheaders) ||
            pb_check_column(&in->header_values, nheaders))
            goto bad_headers;
        for (int64_t j = 0; j < nheaders; j++)
            if (!pb_col_valid(&in->header_keys, j)) {
                *why = "header keys must not be null";
                return -1;
            }
    }
    int64_t base_ts = in->timestamps ? in->timestamps[pb_row(in, 0)] : in->default_timestamp;
    int64_t max_ts = base_ts, total = 0;
    for (int32_t i = 0; i < n; i++) {
        int64_t r = pb_row(in, i);
        int64_t ts = in->timestamps ? in->timestamps[r] : in->default_timestamp;
        if (ts > max_ts) max_ts = ts;
        int32_t h0 = 0, h1 = 0;
        if (in->header_offsets) {
            h0 = in->header_offsets[r];
            h1 = in->header_offsets[r + 1];
        }
        int64_t body = (int64_t)pb_record_body_size(
            in, r, (int64_t)((uint64_t)ts - (uint64_t)base_ts), i, h0, h1);
        if (body > INT32_MAX) {
            *why = "record larger than 2 GiB";
            return -1;
        }
        total += (int64_t)pb_varint_size((int32_t)body) + body;
        if (total > INT32_MAX - PB_BATCH_HEADER_SIZE) {
            *why = "batch larger than 2 GiB";
            return -1;
        }
    }
    in->base_timestamp = base_ts;
    in->max_timestamp = max_ts;
    return total;
bad_headers:
    *why = "header offsets out of order or past their columns";
    return -1;
}

/* Writes row r as one record (length prefix, then the body of `body` bytes) at o. */
PB_INLINE uint8_t *pb_write_record(uint8_t *o, const pb_encode_input *in, int64_t r,
                                   int64_t ts_delta, int32_t offset_delta, int32_t h0,
                                   int32_t h1, size_t body) {
    o += pb_write_varint(o, (int32_t)body);
    *o++ = 0;                                    /* record attributes: unused */
    o += pb_write_varlong(o, ts_delta);
    o += pb_write_varint(o, offset_delta);
    o = pb_write_col(o, &in->keys, r);
    o = pb_write_col(o, &in->values, r);
    o += pb_write_varint(o, h1 - h0);
    for (int32_t j = h0; j < h1; j++) {
        o = pb_write_col(o, &in->header_keys, j);
        o = pb_write_col(o, &in->header_values, j);
    }
    return o;
}

void pb_encode_records(uint8_t *out, const pb_encode_input *in) {
    uint8_t *o = out;
    for (int32_t i = 0; i < in->count; i++) {
        int64_t r = pb_row(in, i);
        int64_t ts = in->timestamps ? in->timestamps[r] : in->default_timestamp;
        int64_t ts_delta = (int64_t)((uint64_t)ts - (uint64_t)in->base_timestamp);
        int32_t h0 = 0, h1 = 0;
        if (in->header_offsets) {
            h0 = in->header_offsets[r];
            h1 = in->header_offsets[r + 1];
        }
        /* Body size first (the length prefix comes before it); recomputed rather than
         * stored to keep the encoder allocation-free. */
        size_t body = pb_record_body_size(in, r, ts_delta, i, h0, h1);
        o = pb_write_record(o, in, r, ts_delta, i, h0, h1, body);
    }
}

/* ---- open batches ---- */

static void pb_write_header(uint8_t *out, size_t total_size, const pb_batch_header *h);

void pb_builder_init(pb_batch_builder *b, uint8_t *buf, size_t capacity) {
    b->buf = buf;
    b->capacity = capacity;
    b->len = PB_BATCH_HEADER_SIZE;
    b->count = 0;
    b->base_timestamp = b->max_timestamp = 0;
    b->records_crc = 0;
}

/* One pass per record: check its entries, size it from the lengths, and write it if it
 * fits (the two-pass pb_encode_records_size + pb_encode_records read every row's
 * offsets twice, through the row order, which was most of the encoder's time besides the
 * copy). The header and CRC wait for pb_builder_finish, so records from any number of
 * Arrow batches fill one batch of about the capacity. */
int64_t pb_builder_append(pb_batch_builder *b, const pb_encode_input *in, int32_t start,
                          size_t *need, const char **why) {
    size_t len0 = b->len;
    int32_t count0 = b->count;
    *need = 0;
    int32_t i;
    for (i = start; i < in->count && b->count < INT32_MAX; i++) {
        int64_t r = pb_row(in, i);
        if (PB_UNLIKELY(pb_check_row(in, r, why))) {
            b->len = len0;                       /* all or nothing */
            b->count = count0;
            return -1;
        }
        int32_t h0 = 0, h1 = 0;
        if (in->header_offsets) {
            h0 = in->header_offsets[r];
            h1 = in->header_offsets[r + 1];
        }
        int64_t ts = in->timestamps ? in->timestamps[r] : in->default_timestamp;
        int64_t base = b->count ? b->base_timestamp : ts;
        int64_t ts_delta = (int64_t)((uint64_t)ts - (uint64_t)base);
        /* The entries were checked: each length fits an int32, their sum a size_t. */
        size_t body = pb_record_body_size(in, r, ts_delta, b->count, h0, h1);
        if (PB_UNLIKELY(body > INT32_MAX - PB_BATCH_HEADER_SIZE - PB_VARINT_MAX)) {
            *why = "record larger than 2 GiB";
            b->len = len0;
            b->count = count0;
            return -1;
        }
        size_t size = pb_varint_size((int32_t)body) + body;
        if (b->capacity - b->len < size) {
            if (b->count == 0) *need = PB_BATCH_HEADER_SIZE + size;  /* alone in a batch */
            break;
        }
        pb_write_record(b->buf + b->len, in, r, ts_delta, b->count, h0, h1, body);
        b->len += size;
        if (b->count == 0 || ts > b->max_timestamp) b->max_timestamp = ts;
        b->base_timestamp = base;
        b->count++;
    }
    /* The CRC of what this call wrote, while it is still in cache: at finish only the
     * header's 40 bytes are left to checksum (pb_crc32c_combine). */
    b->records_crc = pb_crc32c(b->records_crc, b->buf + len0, b->len - len0);
    return i;
}

void pb_builder_finish(pb_batch_builder *b, pb_batch_header *h) {
    h->last_offset_delta = b->count - 1;
    h->first_timestamp = b->base_timestamp;
    h->max_timestamp = b->max_timestamp;
    h->records_count = b->count;
    pb_write_header(b->buf, b->len, h);
    uint32_t crc = pb_crc32c(0, b->buf + PB_OFF_ATTRIBUTES,
                             PB_BATCH_HEADER_SIZE - PB_OFF_ATTRIBUTES);
    crc = pb_crc32c_combine(crc, b->records_crc, b->len - PB_BATCH_HEADER_SIZE);
    pb_store_be32(b->buf + PB_OFF_CRC, crc);
}

/* Every header field but the CRC. */
static void pb_write_header(uint8_t *out, size_t total_size, const pb_batch_header *h) {
    pb_store_be64(out + PB_OFF_BASE_OFFSET, (uint64_t)h->base_offset);
    pb_store_be32(out + PB_OFF_BATCH_LENGTH, (uint32_t)(total_size - PB_LOG_OVERHEAD));
    pb_store_be32(out + PB_OFF_LEADER_EPOCH, (uint32_t)h->partition_leader_epoch);
    out[PB_OFF_MAGIC] = PB_MAGIC_V2;
    pb_store_be16(out + PB_OFF_ATTRIBUTES, (uint16_t)h->attributes);
    pb_store_be32(out + PB_OFF_LAST_OFFSET_DELTA, (uint32_t)h->last_offset_delta);
    pb_store_be64(out + PB_OFF_BASE_TIMESTAMP, (uint64_t)h->first_timestamp);
    pb_store_be64(out + PB_OFF_MAX_TIMESTAMP, (uint64_t)h->max_timestamp);
    pb_store_be64(out + PB_OFF_PRODUCER_ID, (uint64_t)h->producer_id);
    pb_store_be16(out + PB_OFF_PRODUCER_EPOCH, (uint16_t)h->producer_epoch);
    pb_store_be32(out + PB_OFF_BASE_SEQUENCE, (uint32_t)h->base_sequence);
    pb_store_be32(out + PB_OFF_RECORDS_COUNT, (uint32_t)h->records_count);
}

void pb_finish_batch(uint8_t *out, size_t total_size, const pb_batch_header *h) {
    pb_write_header(out, total_size, h);
    pb_store_be32(out + PB_OFF_CRC,
                  pb_crc32c(0, out + PB_OFF_ATTRIBUTES, total_size - PB_OFF_ATTRIBUTES));
}
