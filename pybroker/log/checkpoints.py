"""Kafka's checkpoint files: small text files replaced atomically.

Format (Kafka's ``CheckpointFile``), one item per line after a two-line header::

    0                   <- version
    2                   <- number of entries
    orders 0 1500       <- entry: space-separated fields
    orders 1 1320

The data directory holds ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (entries
``topic partition offset``); each partition directory holds ``leader-epoch-checkpoint``
(entries ``epoch start_offset``). A write goes to ``<name>.tmp``, is fsynced and renamed
over the old file, then the directory is fsynced, so a crash leaves the old or the new
file, never a torn one. ``durable=False`` leaves the two fsyncs to a later
``sync_checkpoint`` (off the event loop): the leader-epoch checkpoint is written on the
produce path, where two fsyncs stalled every partition's first append (Kafka made the
same change, KAFKA-15046). The rename still replaces the file whole.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence

from pybroker.errors import KafkaStorageError

log = logging.getLogger("pybroker.log")

VERSION = 0
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"


def write_checkpoint(path: str, entries: Iterable[Sequence[object]],
                     durable: bool = True) -> None:
    rows = [" ".join(str(field) for field in entry) for entry in entries]
    replace_file(path, "\n".join([str(VERSION), str(len(rows)), *rows]) + "\n", durable)


def replace_file(path: str, text: str, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` atomically: write ``<path>.tmp``, rename it over.
    ``durable`` also fsyncs the file before the rename and the directory after it, so a
    crash leaves the old or the new file, never a torn one."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def sync_checkpoint(path: str) -> None:
    """Make a ``durable=False`` write durable: fsync the file, then its directory."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # replaced or removed meanwhile: whoever did that syncs again
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(path) or ".")


def read_checkpoint(path: str, fields: int) -> list[list[str]]:
    """The entries of ``path`` (each ``fields`` strings); [] if the file does not exist.
    A malformed file raises ``KafkaStorageError``, as Kafka refuses to guess."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    try:
        if int(lines[0]) != VERSION:
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        rows = [line.split() for line in lines[2:2 + count]]
        if len(rows) != count or any(len(row) != fields for row in rows):
            raise ValueError(f"expected {count} entries of {fields} fields")
    except (IndexError, ValueError) as exc:
        raise KafkaStorageError(f"malformed checkpoint file {path}: {exc}") from None
    return rows


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    """A data-dir checkpoint as ``{(topic, partition): offset}``."""
    return {(topic, int(partition)): int(offset)
            for topic, partition, offset in read_checkpoint(path, 3)}


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    write_checkpoint(path, ((topic, partition, offset)
                            for (topic, partition), offset in sorted(offsets.items())))


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
