/* TLS receive for network threads. Rules: pb_tls.h. */
#include "pb_tls.h"
#include "pb_wait.h"

#include <errno.h>
#include <openssl/err.h>

int pb_tls_recv_wait(SSL *ssl, int fd, char *buf, size_t count, int patience_ms,
                     int slice_ms, const char *yield, size_t *moved, char *why,
                     size_t why_len)
{
    int64_t deadline = pb_deadline(slice_ms);
    size_t got = 0;
    int err = 0;

    while (got < count && !__atomic_load_n(yield, __ATOMIC_RELAXED)) {
        size_t n = 0;
        int saved_errno;

        ERR_clear_error();
        errno = 0;
        if (SSL_read_ex(ssl, buf + got, count - got, &n) == 1) {
            got += n;
            continue;
        }
        saved_errno = errno;
        switch (SSL_get_error(ssl, 0)) {
        case SSL_ERROR_WANT_READ:
            err = pb_go_on(fd, POLLIN, patience_ms, deadline);
            if (err == 0)
                continue;
            err = err > 0 ? 0 : err;
            break;
        case SSL_ERROR_WANT_WRITE:  /* a TLS 1.3 KeyUpdate to answer: the loop waits */
        case SSL_ERROR_ZERO_RETURN: /* close_notify: the event loop sees the end too */
            break;
        case SSL_ERROR_SYSCALL:
            if (saved_errno == EINTR)
                continue;
            /* errno 0: end of stream without close_notify (Python's ragged EOF) */
            err = saved_errno ? -saved_errno : 0;
            break;
        default:
            if (ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
                break; /* OpenSSL 3's name for the same ragged end of stream */
            ERR_error_string_n(ERR_get_error(), why, why_len);
            err = -EPROTO;
            break;
        }
        break;
    }
    ERR_clear_error();
    *moved = got;
    return err;
}
