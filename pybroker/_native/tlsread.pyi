import ssl

from typing_extensions import Buffer

__all__ = ["AVAILABLE", "recv_wait"]

AVAILABLE: bool

def recv_wait(sock: ssl.SSLSocket, buf: Buffer, patience_ms: int, slice_ms: int,
              yield_flag: bytearray) -> int: ...
