/* Kafka's zigzag varints (record batch v2 record framing).
 *
 * varint  = zigzag(int32) as unsigned LEB128, at most 5 bytes
 * varlong = zigzag(int64) as unsigned LEB128, at most 10 bytes
 * zigzag(n) = (n << 1) ^ (n >> 31|63), so -1 -> 1, 1 -> 2, -64 -> 127.
 *
 * Readers take a cursor and the end of the readable region and never read at or past
 * `end`. Like Java's ByteUtils.readVarint, a 5th (10th) byte's surplus high bits are
 * shifted out rather than rejected; a longer encoding is an error. */
#ifndef PB_VARINT_H
#define PB_VARINT_H

#include "pb_common.h"

#define PB_VARINT_MAX 5
#define PB_VARLONG_MAX 10

/* Returns 0 and advances *pp, or -1 (truncated or too long) leaving *pp unspecified. */
PB_INLINE int pb_read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out) {
    const uint8_t *p = *pp;
    if (PB_LIKELY(p < end && p[0] < 0x80)) {     /* the common 1-byte case */
        uint32_t u = p[0];
        *out = (int32_t)((u >> 1) ^ (0u - (u & 1)));
        *pp = p + 1;
        return 0;
    }
    uint32_t u = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (PB_UNLIKELY(p >= end)) return -1;
        uint32_t b = *p++;
        u |= (b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int32_t)((u >> 1) ^ (0u - (u & 1)));
            *pp = p;
            return 0;
        }
    }
    return -1;
}

PB_INLINE int pb_read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t u = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (PB_UNLIKELY(p >= end)) return -1;
        uint64_t b = *p++;
        u |= (b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((u >> 1) ^ (0ull - (u & 1)));
            *pp = p;
            return 0;
        }
    }
    return -1;
}

PB_INLINE uint32_t pb_zigzag32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
PB_INLINE uint64_t pb_zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

PB_INLINE size_t pb_uvarint_size(uint64_t u) {
    size_t n = 1;
    while (u >= 0x80) { u >>= 7; n++; }
    return n;
}
PB_INLINE size_t pb_varint_size(int32_t v) { return pb_uvarint_size(pb_zigzag32(v)); }
PB_INLINE size_t pb_varlong_size(int64_t v) { return pb_uvarint_size(pb_zigzag64(v)); }

/* Writes the encoding at p (caller sized the buffer); returns the bytes written. */
PB_INLINE size_t pb_write_uvarint(uint8_t *p, uint64_t u) {
    size_t n = 0;
    while (u >= 0x80) { p[n++] = (uint8_t)(u | 0x80); u >>= 7; }
    p[n++] = (uint8_t)u;
    return n;
}
PB_INLINE size_t pb_write_varint(uint8_t *p, int32_t v) { return pb_write_uvarint(p, pb_zigzag32(v)); }
PB_INLINE size_t pb_write_varlong(uint8_t *p, int64_t v) { return pb_write_uvarint(p, pb_zigzag64(v)); }

#endif /* PB_VARINT_H */
