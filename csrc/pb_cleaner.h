/* Log compaction's per-record work (Kafka's SkimpyOffsetMap and Cleaner.cleanInto).
 *
 * Offset map: key -> offset of its latest record in the dirty section of a log. Keys are
 * kept as 16-byte hashes (Kafka keeps 16-byte MD5 digests) in an open-addressing table of
 * fixed memory (`log.cleaner.dedupe.buffer.size`): slot = hash (two u64) + offset + 1
 * (0 = empty), linear probing from a multiply-shift of the first hash word. The hash is
 * SipHash-2-4 with 128-bit output under a key drawn per map: a producer cannot aim
 * collisions at another key (a collision would make the cleaner drop that key's record),
 * which an unkeyed hash would allow.
 *
 * Cleaning: the batches of a segment are walked; a record survives when its offset is past
 * the map's range, or it is the latest of its key and not an expired tombstone (KIP-534:
 * a tombstone's batch gets a delete horizon, now + delete.retention.ms, the first time it
 * is cleaned, kept in baseTimestamp with attribute bit 6; it goes once that has passed).
 * Keyless records inside the map's range go (Kafka counts them invalid). A batch keeps its
 * base offset, last offset delta (so producer sequences still add up), producer fields,
 * leader epoch and codec; its records are written again with their original offset delta,
 * timestamp (delta rebased), key, value and headers; its CRC is recomputed. A batch whose
 * records all go is kept as an empty header (Kafka's RETAIN_EMPTY) when it is the last of
 * its producer or the last of the cleaning round, and dropped otherwise.
 *
 * Transactions (Kafka's CleanedTransactionMetadata, KIP-98), per batch, never per record:
 * the cleaner hands over the aborted transactions of the cleaned range (from the segments'
 * .txnindex), and a pb_txn_tracker follows the walk: a transaction is open for a producer
 * from its first batch to its marker. A transactional batch of an aborted transaction
 * loses all its records (kept only as an empty header when the rule above says so) and
 * puts no key in the offset map, so an aborted value never shadows a committed older one.
 * A marker is copied as it is while a batch of its transaction is in the cleaned output
 * (an empty header counts: a replay of the log must see the transaction closed); once
 * none is, it gets a delete horizon (bit 6, as a tombstone's batch) and goes when that has
 * passed, unless it is the last batch of the round. The markers kept are listed, so the
 * cleaned segment's .txnindex keeps the entries of the aborts still in it. A compressed
 * marker (Kafka writes none) is always kept.
 * No function here touches Python state; callers run them without the GIL. */
#ifndef PB_CLEANER_H
#define PB_CLEANER_H

#include <stddef.h>
#include <stdint.h>

#include "pb_records.h"

#define PB_ATTR_DELETE_HORIZON 0x40
#define PB_CLEAN_COMPRESSED 1          /* pb_*_batches stopped at a compressed batch */
#define PB_CLEAN_NOMEM (-1000)         /* out of memory (other negative values: -pb_err) */

typedef struct pb_map_slot {
    uint64_t h0, h1;
    int64_t offset_plus_one;           /* 0: empty slot */
} pb_map_slot;

typedef struct pb_offset_map {
    pb_map_slot *slots;
    uint64_t capacity;
    uint64_t count;
    uint64_t max_count;                /* capacity * load factor: "full" from here */
    int64_t latest_offset;             /* -1 when nothing was added */
    uint64_t k0, k1;                   /* SipHash key */
} pb_offset_map;

/* 0, or -1 when the memory cannot be had. `memory` bytes of slots (at least one). */
int pb_map_init(pb_offset_map *m, size_t memory, double load_factor, uint64_t k0,
                uint64_t k1);
void pb_map_free(pb_offset_map *m);
void pb_map_clear(pb_offset_map *m);
/* 0 stored, 1 the map is full (nothing stored). */
int pb_map_put(pb_offset_map *m, const uint8_t *key, size_t len, int64_t offset);
/* The offset stored for key, -1 if none. */
int64_t pb_map_get(const pb_offset_map *m, const uint8_t *key, size_t len);
void pb_siphash128(uint64_t k0, uint64_t k1, const uint8_t *data, size_t len,
                   uint64_t out[2]);

/* An aborted transaction of the cleaned range: a .txnindex entry. */
typedef struct pb_aborted_txn {
    int64_t producer_id;
    int64_t first_offset;
    int64_t last_offset;               /* its abort marker */
} pb_aborted_txn;

/* A producer's transaction open at the walk's position. */
typedef struct pb_open_txn {
    int64_t producer_id;
    int64_t aborted;                   /* index of its aborted entry, -1: committed */
    int64_t retained;                  /* a batch of it is in the cleaned output */
} pb_open_txn;

typedef struct pb_txn_tracker {
    pb_aborted_txn *aborted;           /* sorted by first offset */
    size_t aborted_count, next;        /* next: the first not begun yet */
    pb_open_txn *open;                 /* sorted by producer id */
    size_t open_count, open_cap;
    int64_t *kept_markers;             /* offsets of the markers kept (cleaning only) */
    size_t kept_count, kept_cap;
} pb_txn_tracker;

/* Takes `aborted` (malloc'ed, sorted by first offset; freed by pb_txn_free). */
void pb_txn_init(pb_txn_tracker *t, pb_aborted_txn *aborted, size_t count);
void pb_txn_free(pb_txn_tracker *t);
/* Whether data batch h belongs to an aborted transaction: 1, 0 or PB_CLEAN_NOMEM. */
int pb_txn_aborted(pb_txn_tracker *t, const pb_batch_header *h);
/* Data batch h is in the cleaned output (noted if transactional). 0 or PB_CLEAN_NOMEM. */
int pb_txn_retained(pb_txn_tracker *t, const pb_batch_header *h);
/* Marker h closes its producer's transaction: whether a batch of it is in the output
 * (1, 0 or PB_CLEAN_NOMEM). */
int pb_txn_close(pb_txn_tracker *t, const pb_batch_header *h);

/* Adds the keyed records with offset >= start_offset of one (decompressed) records section
 * of batch h: 0, 1 the map filled up (the records before the one that did not fit are in,
 * latest_offset is the last one put), or -err for a damaged record. */
int pb_map_add_records(pb_offset_map *m, const pb_batch_header *h, const uint8_t *records,
                       size_t len, int64_t start_offset);
/* Walks the complete batches of buf from *pos (CRC checked), adding uncompressed ones
 * but those of aborted transactions (t follows the walk); stops at a compressed one (PB_CLEAN_COMPRESSED, *pos at it, header in h), at the end of
 * complete batches (0), when the map fills (*full = 1), or -err (*pos at the batch). */
int pb_map_add_batches(pb_offset_map *m, const uint8_t *buf, size_t len, size_t *pos,
                       int64_t start_offset, pb_txn_tracker *t, int *full,
                       pb_batch_header *h);

typedef struct pb_outbuf {
    uint8_t *data;
    size_t len, cap;
} pb_outbuf;

/* 0, or -1 out of memory. */
int pb_outbuf_reserve(pb_outbuf *o, size_t more);
/* 0, or PB_CLEAN_NOMEM. */
int pb_outbuf_append(pb_outbuf *o, const uint8_t *p, size_t n);
void pb_outbuf_free(pb_outbuf *o);

typedef struct pb_clean_args {
    const pb_offset_map *map;
    int64_t now_ms;
    int64_t delete_retention_ms;
    const int64_t *producers;          /* (producer id, last offset) pairs sorted by id */
    size_t producer_count;
    int64_t round_end_offset;          /* next offset of the cleaning round's last batch */
    pb_txn_tracker *txn;
} pb_clean_args;

typedef struct pb_clean_stats {
    int64_t records_read;
    int64_t records_retained;
} pb_clean_stats;

typedef struct pb_filtered {
    int32_t retained;                  /* records kept */
    int set_horizon;                   /* the batch gets a delete horizon now */
    int64_t base_timestamp;            /* of the rebuilt batch */
    int64_t max_timestamp;
} pb_filtered;

/* The surviving records of one (decompressed) records section of batch h, written again
 * (rebased timestamp deltas) at the end of out; `marker`: h is a marker whose records all
 * stay and whose batch gets a delete horizon. 0, -err or PB_CLEAN_NOMEM. */
int pb_clean_records(const pb_clean_args *a, const pb_batch_header *h, const uint8_t *records,
                     size_t len, int marker, pb_outbuf *out, pb_filtered *f);
/* Whether a batch left without records is kept as an empty header. */
int pb_clean_keeps_empty(const pb_clean_args *a, const pb_batch_header *h);
/* Appends an empty batch (header only, no records) standing for h. 0 or PB_CLEAN_NOMEM. */
int pb_clean_write_empty(pb_outbuf *out, const pb_batch_header *h);
/* Finishes a rebuilt batch at out->data + start whose records section (of `count` records,
 * compressed or not) fills the buffer from start + PB_BATCH_HEADER_SIZE to out->len. */
void pb_clean_finish(pb_outbuf *out, size_t start, const pb_batch_header *h,
                     const pb_filtered *f);
/* Cleans the complete batches of buf from *pos into out; stops at a compressed batch
 * (PB_CLEAN_COMPRESSED, *pos at it, its header in h), at the end of complete batches (0),
 * -err (*pos at the batch) or PB_CLEAN_NOMEM. */
int pb_clean_batches(const pb_clean_args *a, const uint8_t *buf, size_t len, size_t *pos,
                     pb_outbuf *out, pb_clean_stats *st, pb_batch_header *h);

#endif /* PB_CLEANER_H */
