"""The native core: CRC32C, record batches, index search, zero-copy sends, appends.

Each domain is one Cython module over plain C in ``csrc/`` (STYLE 1-3). This package
re-exports the public entry points and says which implementation of each is in use.
"""

from __future__ import annotations

try:
    from pybroker._native.crc32c import crc32c
except ModuleNotFoundError as exc:
    # Only "crc32c is not built" is tolerated, so that a partial build
    # (PYBROKER_BUILD_ONLY=index,zerocopy) can import its siblings. `crc32c` then stays
    # undefined: `from pybroker._native import crc32c` still fails loudly, naming the module.
    if exc.name != __name__ + ".crc32c":
        raise

__all__ = ["crc32c", "features"]


def features() -> dict[str, str]:
    """Which implementation of each hot path this process uses.

    ``crc32c``: ``"sse4.2-vpclmul"`` (AVX-512 carry-less multiply folding for large
    buffers, SSE4.2 below), ``"sse4.2-3way"`` (three interleaved streams), ``"sse4.2"`` or
    ``"table"``; ``PYBROKER_CRC32C`` forces one. ``append``: ``"io_uring"`` or ``"pwritev"``. ``zerocopy``: ``"splice"`` or
    ``"sendfile"``. ``residency`` (telling cold file regions from cached ones):
    ``"cachestat"``, ``"nowait"`` or ``"none"``. ``PYBROKER_APPEND=pwritev``,
    ``PYBROKER_ZEROCOPY=splice|sendfile`` and ``PYBROKER_RESIDENCY=nowait|none`` force a
    choice. A test checks this machine reports the hardware CRC and io_uring,
    because a fast path that silently never runs is the failure this guards against.
    """
    from pybroker._native.appender import append_implementation
    from pybroker._native.crc32c import crc32c_implementation
    from pybroker._native.zerocopy import residency_implementation, zerocopy_implementation

    return {
        "crc32c": crc32c_implementation(),
        "append": append_implementation(),
        "zerocopy": zerocopy_implementation(),
        "residency": residency_implementation(),
    }
