/* Shared macros and byte-order helpers for the native core (STYLE 3: PB_ prefix).
 *
 * Every load/store of a wire field goes through memcpy so unaligned access is defined
 * behaviour (UBSan runs clean); gcc turns each into a single mov + bswap. */
#ifndef PB_COMMON_H
#define PB_COMMON_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define PB_LIKELY(x) __builtin_expect(!!(x), 1)
#define PB_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PB_INLINE static inline __attribute__((always_inline))

#if defined(PB_DEBUG) && PB_DEBUG
#include <assert.h>
#define PB_DCHECK(x) assert(x)
#else
#define PB_DCHECK(x) ((void)0)
#endif

PB_INLINE uint16_t pb_load_be16(const uint8_t *p) {
    uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v);
}
PB_INLINE uint32_t pb_load_be32(const uint8_t *p) {
    uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
}
PB_INLINE uint64_t pb_load_be64(const uint8_t *p) {
    uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v);
}
PB_INLINE void pb_store_be16(uint8_t *p, uint16_t v) {
    v = __builtin_bswap16(v); memcpy(p, &v, 2);
}
PB_INLINE void pb_store_be32(uint8_t *p, uint32_t v) {
    v = __builtin_bswap32(v); memcpy(p, &v, 4);
}
PB_INLINE void pb_store_be64(uint8_t *p, uint64_t v) {
    v = __builtin_bswap64(v); memcpy(p, &v, 8);
}

#endif /* PB_COMMON_H */
