"""Small metadata files of the broker (topics, producer ids, snapshots): atomic JSON."""

from __future__ import annotations

import json
import os
from typing import Any


def write_json(path: str, data: Any, durable: bool = True) -> None:
    """Replace ``path`` atomically: write a temp file, rename it over. ``durable`` also
    fsyncs the file and its directory (metadata yes; the once-a-second stats file no)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"), sort_keys=True)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if not durable:
        return
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: str, default: Any = None) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default
