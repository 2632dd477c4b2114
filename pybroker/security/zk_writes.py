"""What both ZooKeeper stores of the security layer (ACLs, SCRAM credentials) do to
znodes alike: list a path's children, and the conditional write (a znode replaced only if
nobody wrote it since it was read).

Blocking (kazoo): called on a worker thread.
"""

from __future__ import annotations

from typing import Any

import kazoo.exceptions as kex


def children(zk: Any, path: str) -> list[str]:
    """The names of ``path``'s children, sorted (none when ``path`` does not exist)."""
    try:
        return sorted(zk.retry(zk.get_children, path))
    except kex.NoNodeError:
        return []


def write_if_unchanged(zk: Any, path: str, data: bytes | None, version: int | None) -> bool:
    """Store ``data`` at ``path`` (None: delete the znode) if the znode is still at
    ``version`` (None: it did not exist); False when another writer came first (read
    again, reapply the change, retry)."""
    try:
        if version is None:
            if data is not None:
                zk.create(path, data, makepath=True)
        elif data is not None:
            zk.set(path, data, version=version)
        else:
            zk.delete(path, version=version)
        return True
    except (kex.BadVersionError, kex.NodeExistsError, kex.NoNodeError):
        return False
