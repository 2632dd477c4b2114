"""Small metadata files of the broker (topics, producer ids, snapshots): atomic JSON."""

from __future__ import annotations

import json
from typing import Any

from pybroker.log.checkpoints import replace_file


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
