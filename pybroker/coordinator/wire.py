"""Kafka's classic (non-flexible) primitive encoding, for the coordinator's own formats.

Used for the records in ``__consumer_offsets`` and the consumer protocol's embedded
subscription/assignment bytes, which are not part of any request codec. Big-endian;
``string`` is an int16 length (-1 = null) then UTF-8, ``bytes`` an int32 length (-1 = null),
an array an int32 count then its elements. Nothing here is on a per-record hot path: it runs
once per committed partition, once per group change and at startup.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from pybroker.errors import CorruptRecordError

T = TypeVar("T")

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, v: int) -> Writer:
        self.parts.append(_I16.pack(v))
        return self

    def int32(self, v: int) -> Writer:
        self.parts.append(_I32.pack(v))
        return self

    def int64(self, v: int) -> Writer:
        self.parts.append(_I64.pack(v))
        return self

    def string(self, v: str | None) -> Writer:
        if v is None:
            return self.int16(-1)
        data = v.encode()
        self.parts.append(_I16.pack(len(data)) + data)
        return self

    def blob(self, v: bytes | None) -> Writer:
        if v is None:
            return self.int32(-1)
        self.parts.append(_I32.pack(len(v)) + bytes(v))
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = bytes(buf)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise CorruptRecordError(f"truncated: need {n} bytes at {self.pos}")
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._take(n).decode()

    def blob(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self._take(n)

    def array(self, item: Callable[[], T]) -> list[T]:
        n = self.int32()
        if n > len(self.buf) - self.pos:
            raise CorruptRecordError(f"array of {n} in {len(self.buf) - self.pos} bytes")
        return [item() for _ in range(max(n, 0))]
