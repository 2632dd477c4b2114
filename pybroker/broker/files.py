"""Small files of the broker (topics, producer ids, snapshots, stats): atomic JSON."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from typing import Any

from pybroker.log.checkpoints import replace_file

# The broker's counters and cleaner state (``Broker.write_stats``), in its data directory
# unless ``stats.file`` says otherwise; ``pybroker topic describe --data-dir`` reads it.
STATS_FILE = "broker-stats.json"


def write_json(path: str, data: Any, durable: bool = True) -> None:
    """Replace ``path`` atomically; ``durable`` also fsyncs the file and its directory
    (metadata yes; the once-a-second stats file no)."""
    replace_file(path, json.dumps(data, separators=(",", ":"), sort_keys=True), durable)


def read_json(path: str, default: Any = None) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


class DurableJsonFile:
    """A JSON file replaced durably, from the event loop or (``write_async``) by a thread:
    an fsynced replacement costs 7-30 ms on a busy disk, too long to hold the loop for
    every admin request. Contents are numbered when handed over and a write never
    replaces newer contents with older ones, so whatever thread finishes last, the file
    holds the last state given; a caller whose contents were skipped for newer ones
    returns once those are durable, and they include its change.

    Thread-safe: the writes are serialised by a lock."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._written = 0

    def write(self, data: Any) -> None:
        self._write(next(self._numbers), data)

    async def write_async(self, data: Any) -> None:
        await asyncio.to_thread(self._write, next(self._numbers), data)

    def _write(self, number: int, data: Any) -> None:
        with self._lock:
            if number > self._written:
                write_json(self.path, data)
                self._written = number
