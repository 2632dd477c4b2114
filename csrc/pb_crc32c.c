/* CRC32C with run-time dispatch (see pb_crc32c.h).
 *
 * Why three streams: the SSE4.2 crc32 instruction has a latency of 3 cycles but a
 * throughput of 1 per cycle, so one dependent chain runs at a third of the unit's speed.
 * Splitting a block into three adjacent parts and running three independent chains keeps
 * the unit busy (8 bytes/cycle). The three partial CRCs are joined with the identity
 *     reg(A||B) = shift_len(B)(reg(A)) ^ reg0(B)
 * where shift_n multiplies the register by x^(8n) mod P. shift_n is linear over GF(2), so
 * for a fixed n it is four 256-entry table lookups (tables built once at init from the
 * x^(2^k) mod P powers, as zlib's crc32_combine does).
 *
 * Why VPCLMULQDQ on top: three crc32 streams already run the instruction at its limit
 * (~8 bytes/cycle), the speed of the `crc32c` package too. Past that, big buffers are
 * folded with carry-less multiplies instead (Intel's "Fast CRC Computation Using
 * PCLMULQDQ", here 4 x 512-bit accumulators): a 16-byte lane A is moved D bytes forward as
 * clmul(A.lo, x^(8D+31) mod P) ^ clmul(A.hi, x^(8D-33) mod P), which is congruent mod P
 * (reflected operands: the product lands 33 bits low, hence the offsets). The last 64
 * folded bytes and the tail go through the crc32 instruction. 16 bytes/cycle and more.
 *
 * Nothing here is compiled with -msse4.2: only the functions marked
 * __attribute__((target("sse4.2"))) use the instruction, and they run only after
 * __builtin_cpu_supports("sse4.2") said yes, so the module still loads on any x86-64. */
#include "pb_crc32c.h"

#include <stdlib.h>
#include <string.h>

#include "pb_common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define PB_HAVE_X86 1
#include <immintrin.h>
#endif

#define PB_CRC32C_POLY 0x82F63B78u
/* Stream lengths of the 3-way loop: LONG amortises the combine on big buffers, SHORT
 * still pays on a few KiB. Both multiples of 8. */
#define PB_CRC_LONG 8192
#define PB_CRC_SHORT 256

typedef uint32_t (*pb_crc_fn)(uint32_t reg, const uint8_t *p, size_t len);

static uint32_t pb_crc_table[8][256];            /* slicing-by-8 */
static uint32_t pb_shift_long[4][256];           /* register * x^(8*LONG) mod P */
static uint32_t pb_shift_short[4][256];          /* register * x^(8*SHORT) mod P */
static uint64_t pb_fold_256[2], pb_fold_64[2];  /* {x^(8D+31), x^(8D-33)} mod P */
static pb_crc_fn pb_crc_impl = NULL;
static const char *pb_crc_name = "uninitialised";

/* ---- GF(2) arithmetic modulo P, reflected (bit 31 is x^0) ---- */

static uint32_t pb_multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ PB_CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^n mod P */
static uint32_t pb_xnmodp(uint64_t n) {
    uint32_t sq = 1u << 30;                      /* x^1 */
    uint32_t p = 1u << 31;                       /* x^0 */
    while (n) {
        if (n & 1) p = pb_multmodp(sq, p);
        sq = pb_multmodp(sq, sq);
        n >>= 1;
    }
    return p;
}

uint32_t pb_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
    return pb_multmodp(pb_xnmodp((uint64_t)len_b * 8), crc_a) ^ crc_b;
}

static void pb_build_shift(uint32_t table[4][256], size_t nbytes) {
    uint32_t xn = pb_xnmodp((uint64_t)nbytes * 8);
    for (int i = 0; i < 4; i++)
        for (uint32_t v = 0; v < 256; v++)
            table[i][v] = pb_multmodp(xn, v << (8 * i));
}

PB_INLINE uint32_t pb_shift(const uint32_t table[4][256], uint32_t reg) {
    return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^
           table[2][(reg >> 16) & 0xff] ^ table[3][reg >> 24];
}

/* ---- portable slicing-by-8 ---- */

static void pb_build_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ PB_CRC32C_POLY : c >> 1;
        pb_crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = pb_crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = pb_crc_table[0][c & 0xff] ^ (c >> 8);
            pb_crc_table[k][n] = c;
        }
    }
    pb_build_shift(pb_shift_long, PB_CRC_LONG);
    pb_build_shift(pb_shift_short, PB_CRC_SHORT);
    pb_fold_256[0] = pb_xnmodp(8 * 256 + 31);
    pb_fold_256[1] = pb_xnmodp(8 * 256 - 33);
    pb_fold_64[0] = pb_xnmodp(8 * 64 + 31);
    pb_fold_64[1] = pb_xnmodp(8 * 64 - 33);
}

static uint32_t pb_crc_sw(uint32_t reg, const uint8_t *p, size_t len) {
    while (len && ((uintptr_t)p & 7)) {
        reg = pb_crc_table[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= reg;                                /* little-endian: low bytes first */
        reg = pb_crc_table[7][w & 0xff] ^ pb_crc_table[6][(w >> 8) & 0xff] ^
              pb_crc_table[5][(w >> 16) & 0xff] ^ pb_crc_table[4][(w >> 24) & 0xff] ^
              pb_crc_table[3][(w >> 32) & 0xff] ^ pb_crc_table[2][(w >> 40) & 0xff] ^
              pb_crc_table[1][(w >> 48) & 0xff] ^ pb_crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) reg = pb_crc_table[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
    return reg;
}

#ifdef PB_HAVE_X86
/* ---- SSE4.2, one stream ---- */

__attribute__((target("sse4.2")))
static uint32_t pb_crc_hw(uint32_t reg, const uint8_t *p, size_t len) {
    uint64_t r = reg;
    while (len && ((uintptr_t)p & 7)) {
        r = _mm_crc32_u8((uint32_t)r, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        r = _mm_crc32_u64(r, w);
        p += 8;
        len -= 8;
    }
    while (len--) r = _mm_crc32_u8((uint32_t)r, *p++);
    return (uint32_t)r;
}

/* ---- SSE4.2, three interleaved streams over [p, p+3*n) ---- */

__attribute__((target("sse4.2")))
PB_INLINE uint32_t pb_crc_hw3_block(uint32_t reg, const uint8_t *p, size_t n,
                                    const uint32_t shift[4][256]) {
    uint64_t c0 = reg, c1 = 0, c2 = 0, w0, w1, w2;
    const uint8_t *end = p + n;
    do {
        memcpy(&w0, p, 8);
        memcpy(&w1, p + n, 8);
        memcpy(&w2, p + 2 * n, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
        p += 8;
    } while (p < end);
    uint32_t r = pb_shift(shift, (uint32_t)c0) ^ (uint32_t)c1;
    return pb_shift(shift, r) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2")))
static uint32_t pb_crc_hw3(uint32_t reg, const uint8_t *p, size_t len) {
    while (len && ((uintptr_t)p & 7)) {
        reg = _mm_crc32_u8(reg, *p++);
        len--;
    }
    while (len >= 3 * PB_CRC_LONG) {
        reg = pb_crc_hw3_block(reg, p, PB_CRC_LONG, pb_shift_long);
        p += 3 * PB_CRC_LONG;
        len -= 3 * PB_CRC_LONG;
    }
    while (len >= 3 * PB_CRC_SHORT) {
        reg = pb_crc_hw3_block(reg, p, PB_CRC_SHORT, pb_shift_short);
        p += 3 * PB_CRC_SHORT;
        len -= 3 * PB_CRC_SHORT;
    }
    return pb_crc_hw(reg, p, len);
}

/* ---- VPCLMULQDQ folding (AVX-512) for large buffers ---- */

#define PB_AVX512_TARGET "avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"
/* Below this the 3-way loop wins: folding has a fixed set-up and 64-byte finish. */
#define PB_CRC_FOLD_MIN 2048

__attribute__((target(PB_AVX512_TARGET)))
PB_INLINE __m512i pb_fold(__m512i x, __m512i k, __m512i next) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96);
}

__attribute__((target(PB_AVX512_TARGET)))
static uint32_t pb_crc_vpclmul(uint32_t reg, const uint8_t *p, size_t len) {
    if (len < PB_CRC_FOLD_MIN) return pb_crc_hw3(reg, p, len);
    const __m512i k256 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)pb_fold_256[1], (long long)pb_fold_256[0]));
    const __m512i k64 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)pb_fold_64[1], (long long)pb_fold_64[0]));
    /* The register enters as data: reg(r, M) == reg(0, M ^ r-in-the-first-4-bytes). */
    __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p),
                                  _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)reg)));
    __m512i x1 = _mm512_loadu_si512(p + 64);
    __m512i x2 = _mm512_loadu_si512(p + 128);
    __m512i x3 = _mm512_loadu_si512(p + 192);
    p += 256;
    len -= 256;
    while (len >= 256) {
        x0 = pb_fold(x0, k256, _mm512_loadu_si512(p));
        x1 = pb_fold(x1, k256, _mm512_loadu_si512(p + 64));
        x2 = pb_fold(x2, k256, _mm512_loadu_si512(p + 128));
        x3 = pb_fold(x3, k256, _mm512_loadu_si512(p + 192));
        p += 256;
        len -= 256;
    }
    x1 = pb_fold(x0, k64, x1);
    x2 = pb_fold(x1, k64, x2);
    x3 = pb_fold(x2, k64, x3);
    while (len >= 64) {
        x3 = pb_fold(x3, k64, _mm512_loadu_si512(p));
        p += 64;
        len -= 64;
    }
    uint8_t folded[64];
    _mm512_storeu_si512(folded, x3);
    return pb_crc_hw(pb_crc_hw(0, folded, 64), p, len);
}
#endif /* PB_HAVE_X86 */

const char *pb_crc32c_init(const char *force) {
    static int tables_built = 0;
    if (!tables_built) {
        pb_build_tables();
        tables_built = 1;
    }
    int hw = 0, fold = 0;
#ifdef PB_HAVE_X86
    __builtin_cpu_init();
    hw = __builtin_cpu_supports("sse4.2");
    fold = hw && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
#endif
    if (force == NULL || force[0] == '\0') force = fold ? "sse4.2-vpclmul" : "sse4.2-3way";
    pb_crc_impl = pb_crc_sw;
    pb_crc_name = "table";
#ifdef PB_HAVE_X86
    if (fold && strcmp(force, "sse4.2-vpclmul") == 0) {
        pb_crc_impl = pb_crc_vpclmul;
        pb_crc_name = "sse4.2-vpclmul";
    } else if (hw && strcmp(force, "sse4.2-3way") == 0) {
        pb_crc_impl = pb_crc_hw3;
        pb_crc_name = "sse4.2-3way";
    } else if (hw && strcmp(force, "sse4.2") == 0) {
        pb_crc_impl = pb_crc_hw;
        pb_crc_name = "sse4.2";
    }
#else
    (void)hw;
    (void)fold;
#endif
    return pb_crc_name;
}

const char *pb_crc32c_implementation(void) {
    return pb_crc_name;
}

/* Every extension that links this file gets its tables and path when the shared object
 * is loaded (under the import lock, one thread), so no caller can race a lazy
 * initialisation with the GIL released. Modules may re-select later (tests). */
__attribute__((constructor))
static void pb_crc32c_load(void) {
    pb_crc32c_init(getenv("PYBROKER_CRC32C"));
}

uint32_t pb_crc32c(uint32_t crc, const void *buf, size_t len) {
    return ~pb_crc_impl(~crc, (const uint8_t *)buf, len);
}
