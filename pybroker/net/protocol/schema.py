"""The shapes of the generated message table (``messages.py``).

``F`` describes one field of a request, response or nested struct exactly as the Kafka
message specs do, in version ranges; ``Api`` one API key; ``Data`` one record format. The codec compiles these into
per-version plans once, at import (``codec.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from pybroker.file_region import FileRegion

# Marker for "no explicit default in the spec": the codec uses the type's default.
TYPE_DEFAULT: Any = ...

Versions = tuple[int, int]

# The value of a ``records`` field (see ``typed.py``): decoded, a memoryview of the frame;
# to encode, any bytes-like object, a FileRegion (sent with sendfile) or a list of both.
Records: TypeAlias = "Buffer | FileRegion | list[Buffer | FileRegion]"


class F(NamedTuple):
    name: str
    type: str  # a primitive, "[]<primitive>", "struct" or "[]struct"
    versions: Versions | None
    nullable: Versions | None = None
    tag: int | None = None
    tagged: Versions | None = None
    default: Any = TYPE_DEFAULT
    flexible: Versions | None | Any = TYPE_DEFAULT  # per-field override of the message's
    fields: tuple[F, ...] = ()


class Api(NamedTuple):
    name: str
    versions: Versions
    request_flexible: int | None  # first flexible version of the request, None if never
    response_flexible: int | None
    request: tuple[F, ...]
    response: tuple[F, ...]


class Data(NamedTuple):
    """A record format (``"type": "data"`` in the specs), encoded without a header."""

    versions: Versions
    flexible: int | None  # first flexible version, None if never
    fields: tuple[F, ...]


def in_range(rng: Versions | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]
