/* Log compaction: offset map and record filtering (see pb_cleaner.h). */
#include "pb_cleaner.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pb_common.h"
#include "pb_varint.h"

/* ---- SipHash-2-4, 128-bit output (Aumasson and Bernstein) ---- */

#define PB_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define PB_SIPROUND                                                                      \
    do {                                                                                 \
        v0 += v1; v1 = PB_ROTL(v1, 13); v1 ^= v0; v0 = PB_ROTL(v0, 32);                   \
        v2 += v3; v3 = PB_ROTL(v3, 16); v3 ^= v2;                                         \
        v0 += v3; v3 = PB_ROTL(v3, 21); v3 ^= v0;                                         \
        v2 += v1; v1 = PB_ROTL(v1, 17); v1 ^= v2; v2 = PB_ROTL(v2, 32);                   \
    } while (0)

PB_INLINE uint64_t pb_load_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

void pb_siphash128(uint64_t k0, uint64_t k1, const uint8_t *data, size_t len,
                   uint64_t out[2]) {
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
    v1 ^= 0xee;
    const uint8_t *end = data + (len & ~(size_t)7);
    for (; data != end; data += 8) {
        uint64_t m = pb_load_le64(data);
        v3 ^= m;
        PB_SIPROUND; PB_SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7: b |= (uint64_t)data[6] << 48; /* fall through */
    case 6: b |= (uint64_t)data[5] << 40; /* fall through */
    case 5: b |= (uint64_t)data[4] << 32; /* fall through */
    case 4: b |= (uint64_t)data[3] << 24; /* fall through */
    case 3: b |= (uint64_t)data[2] << 16; /* fall through */
    case 2: b |= (uint64_t)data[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)data[0]; break;
    default: break;
    }
    v3 ^= b;
    PB_SIPROUND; PB_SIPROUND;
    v0 ^= b;
    v2 ^= 0xee;
    PB_SIPROUND; PB_SIPROUND; PB_SIPROUND; PB_SIPROUND;
    out[0] = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    PB_SIPROUND; PB_SIPROUND; PB_SIPROUND; PB_SIPROUND;
    out[1] = v0 ^ v1 ^ v2 ^ v3;
}

/* ---- offset map ---- */

int pb_map_init(pb_offset_map *m, size_t memory, double load_factor, uint64_t k0,
                uint64_t k1) {
    memset(m, 0, sizeof(*m));
    /* at least one slot stays empty, so every probe ends */
    m->capacity = memory / sizeof(pb_map_slot);
    if (m->capacity < 2) m->capacity = 2;
    m->max_count = (uint64_t)((double)m->capacity * load_factor);
    if (m->max_count > m->capacity - 1) m->max_count = m->capacity - 1;
    if (m->max_count < 1) m->max_count = 1;
    /* An anonymous mapping: its pages are zero and cost no memory until touched, and
     * pb_map_clear gives them back (MADV_DONTNEED) instead of writing zeros over the
     * whole table, so a map holds memory only while a log is being cleaned. */
    void *slots = mmap(NULL, m->capacity * sizeof(pb_map_slot), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slots == MAP_FAILED) return -1;
    /* huge pages where the kernel has them: a slot visit is a TLB miss otherwise */
    (void)madvise(slots, m->capacity * sizeof(pb_map_slot), MADV_HUGEPAGE);
    m->slots = slots;
    m->latest_offset = -1;
    m->k0 = k0;
    m->k1 = k1;
    return 0;
}

void pb_map_free(pb_offset_map *m) {
    if (m->slots != NULL) munmap(m->slots, m->capacity * sizeof(pb_map_slot));
    m->slots = NULL;
    m->capacity = m->count = 0;
}

void pb_map_clear(pb_offset_map *m) {
    if (m->count && madvise(m->slots, m->capacity * sizeof(pb_map_slot), MADV_DONTNEED))
        memset(m->slots, 0, m->capacity * sizeof(pb_map_slot));
    m->count = 0;
    m->latest_offset = -1;
}

PB_INLINE uint64_t pb_map_home(const pb_offset_map *m, uint64_t h0) {
    return (uint64_t)(((unsigned __int128)h0 * m->capacity) >> 64);
}

/* The slot holding hash h, or the empty slot where it goes. */
PB_INLINE pb_map_slot *pb_map_find(const pb_offset_map *m, const uint64_t h[2]) {
    uint64_t i = pb_map_home(m, h[0]);
    for (;;) {
        pb_map_slot *s = &m->slots[i];
        if (s->offset_plus_one == 0 || (s->h0 == h[0] && s->h1 == h[1])) return s;
        if (++i == m->capacity) i = 0;
    }
}

PB_INLINE void pb_map_prefetch(const pb_offset_map *m, const uint64_t h[2]) {
    __builtin_prefetch(&m->slots[pb_map_home(m, h[0])], 1, 1);
}

PB_INLINE int pb_map_put_hash(pb_offset_map *m, const uint64_t h[2], int64_t offset) {
    pb_map_slot *s = pb_map_find(m, h);
    if (s->offset_plus_one == 0) {
        if (m->count >= m->max_count) return 1;
        s->h0 = h[0];
        s->h1 = h[1];
        m->count++;
    }
    s->offset_plus_one = offset + 1;
    m->latest_offset = offset;
    return 0;
}

int pb_map_put(pb_offset_map *m, const uint8_t *key, size_t len, int64_t offset) {
    uint64_t h[2];
    pb_siphash128(m->k0, m->k1, key, len, h);
    return pb_map_put_hash(m, h, offset);
}

int64_t pb_map_get(const pb_offset_map *m, const uint8_t *key, size_t len) {
    uint64_t h[2];
    pb_siphash128(m->k0, m->k1, key, len, h);
    return pb_map_find(m, h)->offset_plus_one - 1;
}

/* Slots are visited in random order over up to gigabytes: nearly every visit misses the
 * caches and the TLB. Hashing a few records ahead and prefetching their slots overlaps
 * those misses (the map build went from ~1 us to a fraction of that per record). */
#define PB_MAP_AHEAD 8

typedef struct pb_hashed {
    uint64_t h[2];
    int64_t offset;
} pb_hashed;

int pb_map_add_records(pb_offset_map *m, const pb_batch_header *h, const uint8_t *records,
                       size_t len, int64_t start_offset) {
    const uint8_t *p = records, *end = records + len;
    pb_record r;
    pb_hashed ring[PB_MAP_AHEAD];
    unsigned queued = 0, done = 0;
    for (int32_t i = 0; i < h->records_count; i++) {
        int err = pb_record_parse(&p, end, &r);
        if (PB_UNLIKELY(err)) return -err;
        int64_t offset = h->base_offset + r.offset_delta;
        if (r.key == NULL || offset < start_offset) continue;
        if (queued - done == PB_MAP_AHEAD) {
            pb_hashed *e = &ring[done++ % PB_MAP_AHEAD];
            if (pb_map_put_hash(m, e->h, e->offset)) return 1;
        }
        pb_hashed *e = &ring[queued++ % PB_MAP_AHEAD];
        pb_siphash128(m->k0, m->k1, r.key, (size_t)r.key_len, e->h);
        e->offset = offset;
        pb_map_prefetch(m, e->h);
    }
    while (done != queued) {
        pb_hashed *e = &ring[done++ % PB_MAP_AHEAD];
        if (pb_map_put_hash(m, e->h, e->offset)) return 1;
    }
    return 0;
}

/* ---- transactions ---- */

void pb_txn_init(pb_txn_tracker *t, pb_aborted_txn *aborted, size_t count) {
    memset(t, 0, sizeof(*t));
    t->aborted = aborted;
    t->aborted_count = count;
}

void pb_txn_free(pb_txn_tracker *t) {
    free(t->aborted);
    free(t->open);
    free(t->kept_markers);
    memset(t, 0, sizeof(*t));
}

/* Room for one more of `count` elements in the array *p of *cap: 0, or -1 (unchanged). */
static int pb_grow(void **p, size_t *cap, size_t count, size_t size) {
    if (count < *cap) return 0;
    size_t more = *cap ? 2 * *cap : 16;
    void *grown = realloc(*p, more * size);
    if (grown == NULL) return -1;
    *p = grown;
    *cap = more;
    return 0;
}

/* The position in t->open of producer_id, or where it goes. */
static size_t pb_txn_find(const pb_txn_tracker *t, int64_t producer_id) {
    size_t lo = 0, hi = t->open_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->open[mid].producer_id < producer_id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

PB_INLINE int pb_txn_has(const pb_txn_tracker *t, size_t i, int64_t producer_id) {
    return i < t->open_count && t->open[i].producer_id == producer_id;
}

/* The open transaction of producer_id, created (committed, nothing retained) if none. */
static pb_open_txn *pb_txn_open(pb_txn_tracker *t, int64_t producer_id) {
    size_t i = pb_txn_find(t, producer_id);
    if (pb_txn_has(t, i, producer_id)) return &t->open[i];
    if (pb_grow((void **)&t->open, &t->open_cap, t->open_count, sizeof(*t->open)))
        return NULL;
    memmove(&t->open[i + 1], &t->open[i], (t->open_count - i) * sizeof(*t->open));
    t->open_count++;
    t->open[i] = (pb_open_txn){producer_id, -1, 0};
    return &t->open[i];
}

/* Begins the aborted transactions that start at or before `offset` (Kafka's
 * consumeAbortedTxnsUpTo) and are not over before `from`. */
static int pb_txn_advance(pb_txn_tracker *t, int64_t from, int64_t offset) {
    while (t->next < t->aborted_count && t->aborted[t->next].first_offset <= offset) {
        const pb_aborted_txn *a = &t->aborted[t->next];
        if (a->last_offset >= from) {
            pb_open_txn *o = pb_txn_open(t, a->producer_id);
            if (o == NULL) return PB_CLEAN_NOMEM;
            o->aborted = (int64_t)t->next;
        }
        t->next++;
    }
    return 0;
}

int pb_txn_aborted(pb_txn_tracker *t, const pb_batch_header *h) {
    if (!(h->attributes & PB_ATTR_TRANSACTIONAL) || h->producer_id < 0) return 0;
    int rc = pb_txn_advance(t, h->base_offset, h->base_offset + h->last_offset_delta);
    if (rc) return rc;
    size_t i = pb_txn_find(t, h->producer_id);
    return pb_txn_has(t, i, h->producer_id) && t->open[i].aborted >= 0;
}

int pb_txn_retained(pb_txn_tracker *t, const pb_batch_header *h) {
    if (!(h->attributes & PB_ATTR_TRANSACTIONAL) || h->producer_id < 0) return 0;
    pb_open_txn *o = pb_txn_open(t, h->producer_id);
    if (o == NULL) return PB_CLEAN_NOMEM;
    o->retained = 1;
    return 0;
}

int pb_txn_close(pb_txn_tracker *t, const pb_batch_header *h) {
    int rc = pb_txn_advance(t, h->base_offset, h->base_offset + h->last_offset_delta);
    if (rc) return rc;
    size_t i = pb_txn_find(t, h->producer_id);
    if (!pb_txn_has(t, i, h->producer_id)) return 0;
    int retained = (int)t->open[i].retained;
    memmove(&t->open[i], &t->open[i + 1], (t->open_count - i - 1) * sizeof(*t->open));
    t->open_count--;
    return retained;
}

static int pb_txn_keep_marker(pb_txn_tracker *t, int64_t offset) {
    if (pb_grow((void **)&t->kept_markers, &t->kept_cap, t->kept_count,
                sizeof(*t->kept_markers)))
        return PB_CLEAN_NOMEM;
    t->kept_markers[t->kept_count++] = offset;
    return 0;
}

/* A complete batch at buf + pos, CRC checked: its size, 0 when it is not all in buf, or
 * -err. */
static int64_t pb_next_batch(const uint8_t *buf, size_t len, size_t pos, pb_batch_header *h) {
    size_t left = len - pos;
    if (left < PB_BATCH_HEADER_SIZE) return 0;
    int err = pb_read_header(buf + pos, left, h);
    if (err) return -err;
    size_t size = (size_t)h->batch_length + PB_LOG_OVERHEAD;
    if (size > left) return 0;
    err = pb_check_batch(buf + pos, left, h);
    if (err) return -err;
    if (h->records_count < 0 || h->last_offset_delta < 0) return -PB_ERR_COUNT;
    if ((h->attributes & PB_ATTR_COMPRESSION_MASK) > PB_CODEC_MAX) return -PB_ERR_UNSUPPORTED;
    return (int64_t)size;
}

int pb_map_add_batches(pb_offset_map *m, const uint8_t *buf, size_t len, size_t *pos,
                       int64_t start_offset, pb_txn_tracker *t, int *full,
                       pb_batch_header *h) {
    *full = 0;
    while (*pos < len) {
        int64_t size = pb_next_batch(buf, len, *pos, h);
        if (size <= 0) return (int)size;
        int64_t last = h->base_offset + h->last_offset_delta;
        int control = (h->attributes & PB_ATTR_CONTROL) != 0;
        int aborted = control ? pb_txn_close(t, h) : pb_txn_aborted(t, h);
        if (aborted < 0) return aborted;
        if (!control && !aborted && last >= start_offset) {
            if (h->attributes & PB_ATTR_COMPRESSION_MASK) return PB_CLEAN_COMPRESSED;
            int rc = pb_map_add_records(m, h, buf + *pos + PB_BATCH_HEADER_SIZE,
                                        (size_t)size - PB_BATCH_HEADER_SIZE, start_offset);
            if (rc < 0) return rc;
            if (rc) {
                *full = 1;
                return 0;
            }
        }
        if (last >= start_offset && last > m->latest_offset) m->latest_offset = last;
        *pos += (size_t)size;
    }
    return 0;
}

/* ---- cleaning ---- */

int pb_outbuf_reserve(pb_outbuf *o, size_t more) {
    if (o->cap - o->len >= more) return 0;
    size_t cap = o->cap ? o->cap : 65536;
    while (cap - o->len < more) cap *= 2;
    uint8_t *data = realloc(o->data, cap);
    if (data == NULL) return -1;
    o->data = data;
    o->cap = cap;
    return 0;
}

void pb_outbuf_free(pb_outbuf *o) {
    free(o->data);
    o->data = NULL;
    o->len = o->cap = 0;
}

PB_INLINE int64_t pb_add_ts(int64_t base, int64_t delta) {
    return (int64_t)((uint64_t)base + (uint64_t)delta);
}

/* A record of the batch being cleaned, between the two passes of pb_clean_records. */
typedef struct pb_cleaning {
    const uint8_t *start;
    int64_t offset;
    int64_t timestamp_delta;
    uint64_t h[2];                     /* the key's hash, when the map must be asked */
    uint8_t ask;                       /* keyed and inside the map's range */
    uint8_t keyless;
    uint8_t tombstone;
} pb_cleaning;

int pb_clean_records(const pb_clean_args *a, const pb_batch_header *h, const uint8_t *records,
                     size_t len, int marker, pb_outbuf *out, pb_filtered *f) {
    const pb_offset_map *m = a->map;
    int32_t count = h->records_count;
    pb_cleaning *recs = malloc(sizeof(*recs) * (size_t)(count ? count : 1));
    const uint8_t **kept = malloc(sizeof(*kept) * (size_t)(count ? count : 1));
    if (recs == NULL || kept == NULL) {
        free(recs);
        free(kept);
        return PB_CLEAN_NOMEM;
    }
    int has_horizon = (h->attributes & PB_ATTR_DELETE_HORIZON) != 0;
    int tombstone = 0;
    int32_t n = 0;
    int64_t first_ts = h->first_timestamp, max_ts = -1;
    const uint8_t *p = records, *end = records + len;
    pb_record r;
    /* pass 1: parse, and hash the keys the map is asked about, prefetching their slots
     * (see PB_MAP_AHEAD) */
    for (int32_t i = 0; i < count; i++) {
        pb_cleaning *c = &recs[i];
        c->start = p;
        int err = pb_record_parse(&p, end, &r);
        if (PB_UNLIKELY(err)) {
            free(recs);
            free(kept);
            return -err;
        }
        c->offset = h->base_offset + r.offset_delta;
        c->timestamp_delta = r.timestamp_delta;
        c->keyless = r.key == NULL;
        c->tombstone = r.value == NULL;
        c->ask = !marker && !c->keyless && c->offset <= m->latest_offset;
        if (c->ask) {
            pb_siphash128(m->k0, m->k1, r.key, (size_t)r.key_len, c->h);
            pb_map_prefetch(m, c->h);
        }
    }
    /* pass 2: decide */
    for (int32_t i = 0; i < count; i++) {
        const pb_cleaning *c = &recs[i];
        int keep;
        if (marker || c->offset > m->latest_offset) {
            keep = 1;
        } else if (c->keyless) {
            keep = 0;
        } else {
            keep = c->offset >= pb_map_find(m, c->h)->offset_plus_one - 1 &&
                   (!c->tombstone || !has_horizon || a->now_ms < h->first_timestamp);
        }
        if (!keep) continue;
        int64_t ts = pb_add_ts(h->first_timestamp, c->timestamp_delta);
        if (n == 0) first_ts = ts;
        if (ts > max_ts) max_ts = ts;
        tombstone |= c->tombstone;
        kept[n++] = c->start;
    }
    free(recs);
    f->retained = n;
    f->set_horizon = (tombstone || marker) && !has_horizon;
    f->base_timestamp = f->set_horizon ? a->now_ms + a->delete_retention_ms
                        : has_horizon ? h->first_timestamp : first_ts;
    f->max_timestamp = (h->attributes & PB_ATTR_LOG_APPEND_TIME) ? h->max_timestamp : max_ts;
    if (n == 0 || (n == count && !f->set_horizon)) {
        free(kept);
        return 0;  /* nothing to write, or the caller copies the batch as it is */
    }
    if (pb_outbuf_reserve(out, len + (size_t)n * (PB_VARLONG_MAX + PB_VARINT_MAX))) {
        free(kept);
        return PB_CLEAN_NOMEM;
    }
    uint8_t *o = out->data + out->len;
    for (int32_t j = 0; j < n; j++) {
        /* length | attributes | timestampDelta | rest (offset delta, key, value, headers):
         * the framing was checked above, so these reads cannot fail */
        const uint8_t *q = kept[j];
        int32_t length = 0;
        int64_t delta = 0;
        pb_read_varint(&q, end, &length);
        const uint8_t *record_end = q + length;
        uint8_t attributes = *q++;
        pb_read_varlong(&q, record_end, &delta);
        int64_t new_delta = (int64_t)((uint64_t)pb_add_ts(h->first_timestamp, delta) -
                                      (uint64_t)f->base_timestamp);
        size_t rest = (size_t)(record_end - q);
        o += pb_write_varint(o, (int32_t)(1 + pb_varlong_size(new_delta) + rest));
        *o++ = attributes;
        o += pb_write_varlong(o, new_delta);
        memcpy(o, q, rest);
        o += rest;
    }
    out->len = (size_t)(o - out->data);
    free(kept);
    return 0;
}

int pb_clean_keeps_empty(const pb_clean_args *a, const pb_batch_header *h) {
    int64_t last = h->base_offset + h->last_offset_delta;
    if (last + 1 == a->round_end_offset) return 1;
    if (h->producer_id < 0) return 0;
    size_t lo = 0, hi = a->producer_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->producers[2 * mid] < h->producer_id) lo = mid + 1;
        else hi = mid;
    }
    return lo < a->producer_count && a->producers[2 * lo] == h->producer_id &&
           a->producers[2 * lo + 1] == last;
}

int pb_clean_write_empty(pb_outbuf *out, const pb_batch_header *h) {
    if (pb_outbuf_reserve(out, PB_BATCH_HEADER_SIZE)) return PB_CLEAN_NOMEM;
    pb_batch_header e = *h;
    e.attributes = (int16_t)(h->attributes & (PB_ATTR_LOG_APPEND_TIME | PB_ATTR_TRANSACTIONAL |
                                             PB_ATTR_CONTROL));
    e.first_timestamp = h->max_timestamp;
    e.records_count = 0;
    pb_finish_batch(out->data + out->len, PB_BATCH_HEADER_SIZE, &e);
    out->len += PB_BATCH_HEADER_SIZE;
    return 0;
}

void pb_clean_finish(pb_outbuf *out, size_t start, const pb_batch_header *h,
                     const pb_filtered *f) {
    pb_batch_header b = *h;
    if (f->set_horizon) b.attributes = (int16_t)(b.attributes | PB_ATTR_DELETE_HORIZON);
    b.first_timestamp = f->base_timestamp;
    b.max_timestamp = f->max_timestamp;
    b.records_count = f->retained;
    pb_finish_batch(out->data + start, out->len - start, &b);
}

int pb_outbuf_append(pb_outbuf *out, const uint8_t *p, size_t n) {
    if (pb_outbuf_reserve(out, n)) return PB_CLEAN_NOMEM;
    memcpy(out->data + out->len, p, n);
    out->len += n;
    return 0;
}

/* A marker: copied while a batch of its transaction is in the output (or it ends the
 * round), else given a delete horizon, and dropped once that has passed. */
static int pb_clean_marker(const pb_clean_args *a, const pb_batch_header *h,
                           const uint8_t *batch, size_t size, pb_outbuf *out) {
    int has_data = pb_txn_close(a->txn, h);
    if (has_data < 0) return has_data;
    int64_t last = h->base_offset + h->last_offset_delta;
    int copy = has_data || last + 1 == a->round_end_offset ||
               (h->attributes & PB_ATTR_COMPRESSION_MASK) != 0;
    if (!copy && (h->attributes & PB_ATTR_DELETE_HORIZON)) {
        if (a->now_ms >= h->first_timestamp) return 0;
        copy = 1;
    }
    if (copy) {
        if (pb_outbuf_append(out, batch, size)) return PB_CLEAN_NOMEM;
    } else {
        size_t start = out->len;
        if (pb_outbuf_reserve(out, PB_BATCH_HEADER_SIZE)) return PB_CLEAN_NOMEM;
        out->len += PB_BATCH_HEADER_SIZE;
        pb_filtered f;
        int rc = pb_clean_records(a, h, batch + PB_BATCH_HEADER_SIZE,
                                  size - PB_BATCH_HEADER_SIZE, 1, out, &f);
        if (rc) return rc;
        pb_clean_finish(out, start, h, &f);
    }
    return pb_txn_keep_marker(a->txn, last);
}

int pb_clean_batches(const pb_clean_args *a, const uint8_t *buf, size_t len, size_t *pos,
                     pb_outbuf *out, pb_clean_stats *st, pb_batch_header *h) {
    while (*pos < len) {
        int64_t size = pb_next_batch(buf, len, *pos, h);
        if (size <= 0) return (int)size;
        const uint8_t *batch = buf + *pos;
        size_t start = out->len;
        int rc;
        if (h->attributes & PB_ATTR_CONTROL) {
            rc = pb_clean_marker(a, h, batch, (size_t)size, out);
            if (rc) return rc;
            *pos += (size_t)size;
            continue;
        }
        int aborted = pb_txn_aborted(a->txn, h);
        if (aborted < 0) return aborted;
        if (aborted) {  /* its records all go */
            st->records_read += h->records_count;
            if (pb_clean_keeps_empty(a, h) && pb_clean_write_empty(out, h))
                return PB_CLEAN_NOMEM;
        } else if (h->attributes & PB_ATTR_COMPRESSION_MASK) {
            return PB_CLEAN_COMPRESSED;
        } else {
            if (pb_outbuf_reserve(out, PB_BATCH_HEADER_SIZE)) return PB_CLEAN_NOMEM;
            out->len += PB_BATCH_HEADER_SIZE;
            pb_filtered f;
            rc = pb_clean_records(a, h, batch + PB_BATCH_HEADER_SIZE,
                                  (size_t)size - PB_BATCH_HEADER_SIZE, 0, out, &f);
            if (rc) return rc;
            st->records_read += h->records_count;
            st->records_retained += f.retained;
            if (f.retained == 0) {  /* (an empty batch too: kept only while needed) */
                out->len = start;
                if (pb_clean_keeps_empty(a, h) && pb_clean_write_empty(out, h))
                    return PB_CLEAN_NOMEM;
            } else if (f.retained == h->records_count && !f.set_horizon) {
                out->len = start;
                if (pb_outbuf_append(out, batch, (size_t)size)) return PB_CLEAN_NOMEM;
            } else {
                pb_clean_finish(out, start, h, &f);
            }
        }
        if (out->len != start && (rc = pb_txn_retained(a->txn, h))) return rc;
        *pos += (size_t)size;
    }
    return 0;
}
