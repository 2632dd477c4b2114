"""Decompression bombs in one Produce request against a canary client's round trips.

    python3 -m bench.produce_bombs [--seconds 5] [--pattern cap|over|both] [--set K=V ...]

One broker, two connections. The canary produces one record (acks=1) and fetches it back
every 50 ms, for ``--seconds`` idle and then ``--seconds`` while the attacker sends, one
after the other, Produce requests of 100 zstd batches (one per partition of a 100-partition
topic), each batch a bomb:

- ``cap``: ~2 KB inflating to exactly the broker's decompression cap (64 MiB) of valid
  records (one record whose value is zeros), so it is accepted and costs the broker the
  whole decompression and record walk;
- ``over``: ~131 KB inflating to 4 GiB, a record declaring a 1 GiB value followed by
  zeros: the broker decompresses up to its cap and refuses the batch (INVALID_RECORD).

The frames are built by hand (raw and RLE blocks, RFC 8878), so building them costs
nothing. Reported: the canary's round trip p50/p99/max idle and under attack, how long
each bomb request took and the error codes it got, and the broker's peak resident memory
(VmHWM). Speed figures are noisy on a shared machine: compare runs made back to back.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import socket
import statistics
import struct
import threading
import time
from typing import Any

from bench.single_node import Broker, fetch_frame, produce_frame, recv_frame
from pybroker._native.crc32c import crc32c
from pybroker._native.records import MAX_DECOMPRESSED_SIZE, _encode_varint, encode_batch
from pybroker.net.protocol import codec

PARTITIONS = 100
CANARY_INTERVAL_S = 0.05
ZSTD_CODEC = 4
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 * 1024


def zstd_frame(prefix: bytes, zeros: int) -> bytes:
    """A zstd frame (no content size, 1 MiB window) of ``prefix`` then ``zeros`` zero
    bytes: one raw block, then RLE blocks of 128 KiB, each 4 bytes on the wire."""
    parts = [_ZSTD_MAGIC, b"\x00", bytes([10 << 3])]  # no size, window 2^(10+10)
    blocks = [(0, prefix)]
    while zeros:
        n = min(zeros, _ZSTD_BLOCK_MAX)
        blocks.append((1, n))
        zeros -= n
    for i, (kind, body) in enumerate(blocks):
        last = i == len(blocks) - 1
        size = len(body) if kind == 0 else body
        parts.append((size << 3 | kind << 1 | last).to_bytes(3, "little"))
        parts.append(body if kind == 0 else b"\x00")
    return b"".join(parts)


def _record_prefix(value_len: int) -> bytes:
    """A record up to its value: attributes, timestamp and offset deltas 0, null key,
    ``value_len`` bytes of value (the zeros that follow; its header count, 0, is one more
    zero)."""
    body = b"\x00\x00\x00" + _encode_varint(-1) + _encode_varint(value_len)
    return _encode_varint(len(body) + value_len + 1) + body


def bomb_section(pattern: str, cap: int = MAX_DECOMPRESSED_SIZE) -> bytes:
    """The zstd records section of one bomb batch (one record): ``cap`` or ``over``."""
    if pattern == "cap":
        value_len = cap - 16
        while len(_record_prefix(value_len)) + value_len + 1 < cap:
            value_len += 1
        prefix = _record_prefix(value_len)
        return zstd_frame(prefix, cap - len(prefix))
    if pattern == "over":
        return zstd_frame(_record_prefix(1 << 30), 32768 * _ZSTD_BLOCK_MAX)
    raise ValueError(f"unknown pattern {pattern!r}")


def compressed_batch(section: bytes, codec: int, count: int = 1) -> bytes:
    """A batch of ``count`` records whose records section is ``section`` (compressed
    with ``codec``), timestamps now, CRC right."""
    now = int(time.time() * 1000)
    batch = bytearray(encode_batch([b""] * count, timestamps=[now] * count)[:61])
    batch += section
    struct.pack_into(">h", batch, 21, codec)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def bomb_request(topic: str, pattern: str, partitions: int = PARTITIONS) -> bytes:
    batch = compressed_batch(bomb_section(pattern), ZSTD_CODEC)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": i, "records": batch} for i in range(partitions)]}]}
    return codec.encode_request(0, 8, 1, body, "bomber")


def _read_response(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _error_codes(frame: bytes) -> dict[int, int]:
    correlation, offset = codec.read_response_header(0, 8, frame)
    response = codec.decode_response(0, 8, frame, offset)
    codes: dict[int, int] = {}
    for topic in response["responses"]:
        for p in topic["partition_responses"]:
            codes[p["error_code"]] = codes.get(p["error_code"], 0) + 1
    return codes


def canary(port: int, stop: threading.Event, out: list[float]) -> None:
    """One-record produce + fetch of it, every CANARY_INTERVAL_S; round trips in s."""
    scratch = memoryview(bytearray(1 << 16))
    batch = encode_batch([b"canary"])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        offset = 0
        while not stop.is_set():
            started = time.perf_counter()
            sock.sendall(produce_frame("canary", 0, batch))
            recv_frame(sock, scratch)
            sock.sendall(fetch_frame("canary", 0, offset, 1 << 16))
            recv_frame(sock, scratch)
            out.append(time.perf_counter() - started)
            offset += 1
            stop.wait(max(0.0, CANARY_INTERVAL_S - (time.perf_counter() - started)))


def attack(port: int, request: bytes, stop: Any, out: Any) -> None:
    """Bomb requests one after the other until ``stop`` is set; (seconds, codes) each.
    Runs in a process of its own, so that decoding its answers does not hold the GIL
    the canary's thread needs."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while not stop.is_set():
            started = time.perf_counter()
            sock.sendall(request)
            codes = _error_codes(_read_response(sock))
            out.put((time.perf_counter() - started, codes))


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"count": len(ms), "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
            "max_ms": round(ms[-1], 2)}


def vm_hwm_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def canary_for(port: int, seconds: float) -> list[float]:
    """The canary's round trips over ``seconds``."""
    samples: list[float] = []
    stop = threading.Event()
    thread = threading.Thread(target=canary, args=(port, stop, samples))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return samples


def run(pattern: str, seconds: float, settings: dict[str, str]) -> dict:
    broker = Broker(settings)
    try:
        broker.create_topic("canary", 1)
        broker.create_topic("bombs", PARTITIONS)
        request = bomb_request("bombs", pattern)
        idle = canary_for(broker.port, seconds)
        hwm_idle = vm_hwm_bytes(broker.proc.pid)
        context = mp.get_context("fork")
        stop_attack, results = context.Event(), context.Queue()
        attacker = context.Process(target=attack,
                                   args=(broker.port, request, stop_attack, results))
        attacker.start()
        loaded = canary_for(broker.port, seconds)
        stop_attack.set()
        bombs: list[tuple[float, dict[int, int]]] = []
        while attacker.is_alive() or not results.empty():
            try:
                bombs.append(results.get(timeout=0.1))
            except queue.Empty:
                pass
        attacker.join()
        codes: dict[int, int] = {}
        for _, got in bombs:
            for code, n in got.items():
                codes[code] = codes.get(code, 0) + n
        return {"pattern": pattern, "request_bytes": len(request),
                "canary_idle": _summary(idle), "canary_under_attack": _summary(loaded),
                "bomb_requests": _summary([t for t, _ in bombs]),
                "bomb_error_codes": codes,
                "vm_hwm_mib_idle": round(hwm_idle / 2**20, 1),
                "vm_hwm_mib": round(vm_hwm_bytes(broker.proc.pid) / 2**20, 1)}
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.produce_bombs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--pattern", choices=("cap", "over", "both"), default="both")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (repeatable)")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    for pattern in ("cap", "over") if args.pattern == "both" else (args.pattern,):
        print(json.dumps(run(pattern, args.seconds, settings)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
