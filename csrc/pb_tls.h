/* Receiving through an established TLS session from a network thread.
 *
 * pb_tls_recv_wait is pb_recv_wait (pb_zerocopy.h) through OpenSSL: SSL_read_ex into
 * `buf` until `count` bytes of plaintext have arrived, poll(2) whenever OpenSSL wants
 * more of the socket, and the same early stops (not ready for `patience_ms`, `slice_ms`
 * used up, end of stream), all without the caller's lock (the GIL). SSL_read gives one
 * record (16 KiB at most) per call: looping here instead of in Python saves a GIL round
 * trip per record, which a busy event loop thread would make the network thread wait
 * for.
 *
 * The SSL object is the caller's: nobody else may use it during the call (OpenSSL's
 * rule: one thread at a time per SSL). Whoever needs it meanwhile (the event loop, to
 * send a response) sets `*yield` non-zero: the call returns after the record (or the
 * poll) in hand, so a response waits for a record, not for the rest of a frame.
 *
 * Returns 0 (*moved set; fewer than `count` on an early stop or a yield, on a TLS
 * close_notify or on an end of stream without one), or on failure -errno (socket) or
 * -EPROTO with OpenSSL's reason in `why` (a record that does not decrypt, a protocol
 * error); *moved always holds the bytes received before.
 */
#ifndef PB_TLS_H
#define PB_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

int pb_tls_recv_wait(SSL *ssl, int fd, char *buf, size_t count, int patience_ms,
                     int slice_ms, const char *yield, size_t *moved, char *why,
                     size_t why_len);

#endif
