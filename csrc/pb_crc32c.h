/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of Kafka record
 * batch v2. Four implementations chosen once at run time:
 *   "sse4.2-vpclmul" AVX-512 VPCLMULQDQ folding on large buffers, 3-way below 2 KiB
 *   "sse4.2-3way"  SSE4.2 crc32 instruction, three interleaved streams on large buffers
 *   "sse4.2"       SSE4.2 crc32 instruction, one stream
 *   "table"        portable slicing-by-8 tables
 * Thread-safe after pb_crc32c_init(); the functions keep no per-call state. */
#ifndef PB_CRC32C_H
#define PB_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Select the implementation: `force` NULL or "" picks the fastest the CPU supports,
 * otherwise one of the names above (falls back to "table" if the CPU lacks it).
 * Runs once by itself when the library is loaded, with $PYBROKER_CRC32C; calling it again
 * re-selects (tests), which is not safe while other threads compute CRCs. */
const char *pb_crc32c_init(const char *force);
const char *pb_crc32c_implementation(void);

/* Standard CRC32C of buf continuing from `crc` (0 to start): pb_crc32c(0, "123456789", 9)
 * == 0xE3069283. */
uint32_t pb_crc32c(uint32_t crc, const void *buf, size_t len);
/* The CRC32C of A || B from crc(A), crc(B) and len(B), in O(log len(B)) multiplications
 * (zlib's crc32_combine): lets a writer checksum pieces while they are in cache. */
uint32_t pb_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

#endif /* PB_CRC32C_H */
