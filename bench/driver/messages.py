"""Message contents: payload pools and key sequences, generated once per worker.

Per-message randomness in the send loop would cost more than the send itself, so each
producer draws a pool of payload bodies and a long key sequence up front and cycles them.
Every value is ``send_time_ns (8 bytes, big-endian, CLOCK_MONOTONIC) + body``; the consumer
reads the prefix for end-to-end latency (all workers run on one host, so one clock).
"""

from __future__ import annotations

import json
import struct

import numpy as np

from bench.driver.workload import TIMESTAMP_BYTES, Workload

PAYLOAD_POOL = 64  # distinct bodies: enough that batches do not compress to one repeated value
KEY_SEQUENCE = 1 << 16
KEY_BYTES = 16

_STAMP = struct.Struct(">q")
stamp = _STAMP.pack
read_stamp = _STAMP.unpack_from


def payload_pool(workload: Workload, seed: int) -> list[bytes]:
    """Bodies of ``message_size - 8`` bytes: random (incompressible) or JSON-like text."""
    rng = np.random.default_rng(seed)
    size = workload.message_size - TIMESTAMP_BYTES
    if workload.payload == "random":
        return [rng.bytes(size) for _ in range(PAYLOAD_POOL)]
    return [_text_body(rng, size) for _ in range(PAYLOAD_POOL)]


def _text_body(rng: np.random.Generator, size: int) -> bytes:
    # Event-log records: repeated field names, small vocabulary, random numbers. lz4 and
    # zstd compress this about 2-4x, like the JSON traffic brokers usually carry.
    words = ("click", "view", "purchase", "login", "logout", "search", "error", "ok")
    parts: list[bytes] = []
    length = 0
    while length < size:
        record = json.dumps({
            "user": int(rng.integers(0, 100000)),
            "event": words[int(rng.integers(0, len(words)))],
            "ms": int(rng.integers(0, 10**9)),
            "path": f"/api/v1/items/{rng.integers(0, 5000)}",
        }, separators=(",", ":")).encode()
        parts.append(record)
        length += len(record)
    return b"".join(parts)[:size]


def key_sequence(workload: Workload, seed: int) -> list[bytes] | None:
    """The keys a producer cycles through, drawn from the workload's distribution."""
    if workload.keys == "none":
        return None
    rng = np.random.default_rng(seed)
    space = workload.key_space
    if workload.keys == "uniform":
        ids = rng.integers(0, space, KEY_SEQUENCE)
    elif workload.keys == "zipf":
        ids = (rng.zipf(workload.zipf_s, KEY_SEQUENCE) - 1) % space
    else:  # round-robin
        ids = np.arange(KEY_SEQUENCE) % space
    return [b"%016d" % i for i in ids.tolist()]
