# distutils: sources = csrc/pb_tls.c
# distutils: libraries = ssl crypto
"""Decrypt a TLS connection's large frames in a network thread, without the GIL.

``recv_wait(sock, buf, patience_ms, slice_ms, yield_flag)`` is ``zerocopy.recv_wait``
through the TLS session of the non-blocking ``ssl.SSLSocket`` ``sock``: ``SSL_read``
straight into ``buf`` (a view of the frame's buffer), ``poll`` while OpenSSL wants more
of the socket, the same early stops, and the GIL released for the whole call rather
than once per TLS record (64 per MiB), so the thread does not queue behind a busy event
loop for each. Only the caller may use the session meanwhile (OpenSSL: one thread at a
time per SSL); whoever needs it sets ``yield_flag[0]`` and has it back after the record
in hand.

Reaching the session. Python's ``ssl`` gives no access to OpenSSL's ``SSL *``; it is the
second field of CPython's ``_ssl._SSLSocket`` (``PySSLSocket`` in Modules/_ssl.c, after
the weak reference to the socket, in every CPython from 3.7 to 3.13). It is read only
from an object of exactly that type on those versions, and used only if OpenSSL says it
is the session on the socket's fd; ``AVAILABLE`` is False elsewhere, and the event loop
then decrypts everything itself (``TlsConnection``).
"""

import errno
import os
import ssl
import sys

from _ssl import _SSLSocket

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer


cdef extern from "pb_tls.h" nogil:
    ctypedef struct SSL:
        pass
    int SSL_get_fd(const SSL *s)
    unsigned long OpenSSL_version_num()
    int pb_tls_recv_wait(SSL *session, int fd, char *buf, size_t count, int patience_ms,
                         int slice_ms, const char *yield_flag, size_t *moved, char *why,
                         size_t why_len)


cdef extern from *:
    """
    #include <openssl/ssl.h>
    /* The start of CPython's PySSLSocket (Modules/_ssl.c), 3.7 to 3.13. */
    typedef struct { PyObject_HEAD PyObject *socket_weakref; SSL *ssl; } pb_py_ssl_socket;
    """
    ctypedef struct pb_py_ssl_socket:
        SSL *ssl "ssl"


# The session is only ours to use when Python's ``_ssl`` runs on the very OpenSSL this
# module links (a Python built against another OpenSSL has another ``SSL`` layout).
AVAILABLE = ((3, 7) <= sys.version_info[:2] <= (3, 13)
             and ssl.OPENSSL_VERSION_NUMBER == OpenSSL_version_num())

__all__ = ["AVAILABLE", "recv_wait"]


cdef SSL *_session(object sslobj, int fd) except NULL:
    """The ``SSL *`` of ``sslobj`` (an ``ssl.SSLSocket``'s ``_sslobj``) on ``fd``."""
    cdef SSL *session
    if not AVAILABLE or type(sslobj) is not _SSLSocket:
        raise TypeError(f"not a CPython 3.7-3.13 TLS session: {type(sslobj)!r}")
    session = (<pb_py_ssl_socket *><void *>sslobj).ssl
    if session == NULL or SSL_get_fd(session) != fd:
        raise ValueError(f"not the TLS session of fd {fd}")
    return session


def recv_wait(object sock, object buf, int patience_ms, int slice_ms, bytearray yield_flag):
    """Receive plaintext into all of the writable buffer ``buf`` from the TLS socket
    ``sock``; returns the bytes received, fewer than ``len(buf)`` when the peer ended the
    stream, sent nothing for ``patience_ms``, the call used up ``slice_ms`` (if > 0) or
    another thread set ``yield_flag[0]`` to want the session (0 when ``sock`` was shut
    down first). A record that does not decrypt raises ``ssl.SSLError``, a socket
    failure ``OSError``."""
    cdef object sslobj = sock._sslobj  # this reference keeps the session alive
    cdef int fd = sock.fileno()
    cdef SSL *session
    cdef Py_buffer view
    cdef size_t moved = 0
    cdef int err
    cdef char why[256]
    cdef const char *wanted
    if sslobj is None:  # shut down by close() before this thread started
        return 0
    if len(yield_flag) < 1:
        raise ValueError("yield_flag must hold a byte")
    session = _session(sslobj, fd)
    wanted = yield_flag  # the caller keeps it (and its size) for the call
    why[0] = 0
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        with nogil:
            err = pb_tls_recv_wait(session, fd, <char *>view.buf, <size_t>view.len,
                                   patience_ms, slice_ms, wanted, &moved, why,
                                   sizeof(why))
    finally:
        PyBuffer_Release(&view)
    if err == -errno.EPROTO:
        raise ssl.SSLError(errno.EPROTO, why.decode("ascii", "replace"))
    if err < 0:
        raise OSError(-err, f"recv: {os.strerror(-err)}")
    return moved
