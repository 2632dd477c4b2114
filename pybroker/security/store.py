"""Where ACLs are kept: the ``AclStore`` interface and the single node's file.

The authorizer holds every ACL in memory and asks its store for three things: everything
at start (``load``), a change of some resource patterns' entries (``update``, each change
a function of the pattern's current entries, so a store shared by several brokers can
apply it to what is stored now and retry when another broker wrote first), and the
changes other brokers make (``watch``). The metadata plane picks the store
(``Metadata.acl_store``): this file on one node, ZooKeeper in a cluster
(:mod:`pybroker.security.zk_acl_store`, Kafka's ZooKeeper-mode layout).

``acls.json`` in the data directory, replaced atomically and durably (temp file, fsync,
rename, directory fsync) off the event loop::

    {"version": 1, "acls": [{"resourceType": "Topic", "patternType": "Literal",
      "name": "orders", "acls": [{"principal": "User:alice", "permissionType": "Allow",
      "operation": "Read", "host": "*"}]}]}

The entries are written as Kafka's ZooKeeper mode writes a znode's (``entries_json``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from pybroker.broker.files import DurableJsonFile, read_json
from pybroker.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ACL_FILE = "acls.json"

Entries = frozenset[AccessControlEntry]
AclMap = dict[ResourcePattern, Entries]
# a pattern's entries after a change, from its entries before
EntriesChange = Callable[[Entries], Entries]


class AclStore(Protocol):
    async def load(self) -> AclMap:
        """Every stored pattern with its entries (none empty)."""
        ...

    async def update(self, changes: dict[ResourcePattern, EntriesChange]) -> AclMap:
        """Apply each change to its pattern's stored entries and store the result (an
        empty result removes the pattern); returns the stored entries of each changed
        pattern. Durable when it returns."""
        ...

    def watch(self, changed: Callable[[AclMap], None]) -> None:
        """Call ``changed`` on the event loop with the new entries of the patterns that
        other brokers change from now on (never, where nobody else writes)."""
        ...

    async def close(self) -> None: ...


def entries_json(entries: Iterable[AccessControlEntry]) -> list[dict[str, str]]:
    """Kafka's ZooKeeper JSON of a pattern's entries, in a stable order."""
    return [{"principal": e.principal, "permissionType": e.permission.camel,
             "operation": e.operation.camel, "host": e.host} for e in sorted(entries)]


def entries_from_json(acls: Iterable[dict[str, Any]]) -> Entries:
    return frozenset(
        AccessControlEntry(a["principal"], a["host"],
                           AclOperation(AclOperation.from_camel(a["operation"])),
                           AclPermissionType(AclPermissionType.from_camel(a["permissionType"])))
        for a in acls)


class FileAclStore:
    """One broker's ACLs in ``acls.json``. The map is changed on the event loop; the
    file is written by a thread (``DurableJsonFile``), in the order of the changes."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, ACL_FILE)
        self._file = DurableJsonFile(self.path)
        self._acls: AclMap = {}

    async def load(self) -> AclMap:
        data = read_json(self.path, {"version": 1, "acls": []})
        self._acls = {}
        for item in data["acls"]:
            pattern = ResourcePattern(
                ResourceType(ResourceType.from_camel(item["resourceType"])), item["name"],
                PatternType(PatternType.from_camel(item["patternType"])))
            entries = entries_from_json(item["acls"])
            if entries:
                self._acls[pattern] = entries
        return dict(self._acls)

    async def update(self, changes: dict[ResourcePattern, EntriesChange]) -> AclMap:
        result: AclMap = {}
        for pattern, change in changes.items():
            entries = result[pattern] = change(self._acls.get(pattern, frozenset()))
            if entries:
                self._acls[pattern] = entries
            else:
                self._acls.pop(pattern, None)
        await self._file.write_async({"version": 1, "acls": [
            {"resourceType": p.resource_type.camel, "patternType": p.pattern_type.camel,
             "name": p.name, "acls": entries_json(e)} for p, e in sorted(self._acls.items())]})
        return result

    def watch(self, changed: Callable[[AclMap], None]) -> None:
        pass  # nobody else writes this broker's file

    async def close(self) -> None:
        pass
