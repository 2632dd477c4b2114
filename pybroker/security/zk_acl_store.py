"""The cluster's ACLs in ZooKeeper, as Kafka's ZooKeeper mode kept them (``ZkAclStore``,
``ZkAclChangeStore``)::

    /kafka-acl/<ResourceType>/<name>                     LITERAL patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>   PREFIXED patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                 "Topic:<name>" (a LITERAL change)
    /kafka-acl-extended-changes/acl_changes_<seq>        {"version":1,"resourceType":"Topic",
                                                          "name":n,"patternType":"Prefixed"}

A change is written conditionally on the pattern znode's version, reapplied to what is
stored when another broker wrote first, then announced with a sequential change node.
Every broker watches the change nodes and reloads the patterns they name, so a change
reaches every broker's authorizer within a ZooKeeper round trip or two; a broker that
lost its session finds the changes it missed by sequence number when the watch is back.
Change nodes older than ``CHANGE_EXPIRY_S`` are removed by the broker writing a change
(Kafka's 15 minutes).

Thread-safety: ``load`` and ``update`` block (run on a worker thread); the watch runs on
kazoo's callback thread and hands its changes to the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import kazoo.exceptions as kex
from kazoo.recipe.watchers import ChildrenWatch

from pybroker.security.acl import PatternType, ResourcePattern, ResourceType
from pybroker.security.store import AclMap, Entries, EntriesChange, entries_from_json, entries_json
from pybroker.security.zk_writes import children, write_if_unchanged

log = logging.getLogger("pybroker.security")

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRY_S = 15 * 60


def _root(pattern_type: PatternType) -> str:
    return LITERAL_ROOT if pattern_type == PatternType.LITERAL else PREFIXED_ROOT


def _path(pattern: ResourcePattern) -> str:
    return f"{_root(pattern.pattern_type)}/{pattern.resource_type.camel}/{pattern.name}"


def _change_path(pattern: ResourcePattern) -> tuple[str, bytes]:
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.camel}:{pattern.name}".encode()
    return EXTENDED_CHANGES, json.dumps(
        {"version": 1, "resourceType": pattern.resource_type.camel, "name": pattern.name,
         "patternType": pattern.pattern_type.camel}, separators=(",", ":")).encode()


def _changed_pattern(changes_path: str, data: bytes) -> ResourcePattern:
    if changes_path == LITERAL_CHANGES:
        kind, _, name = data.decode().partition(":")
        return ResourcePattern(ResourceType(ResourceType.from_camel(kind)), name)
    item = json.loads(data)
    return ResourcePattern(ResourceType(ResourceType.from_camel(item["resourceType"])),
                           item["name"], PatternType(PatternType.from_camel(item["patternType"])))


def _seq(child: str) -> int:
    return int(child[len(CHANGE_PREFIX):])


class ZkAclStore:
    def __init__(self, zk: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._zk = zk  # a connected KazooClient
        self._loop = loop
        self._seen: dict[str, int] = {}  # change path -> the last sequence number read
        # Writes and reloads one at a time, each applied by the authorizer before the
        # next starts: a reload never lands under an older write's answer.
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def _read(self, pattern: ResourcePattern) -> tuple[Entries, int | None]:
        """The stored entries and the znode's version (None: no znode)."""
        try:
            data, stat = self._zk.retry(self._zk.get, _path(pattern))
        except kex.NoNodeError:
            return frozenset(), None
        return (entries_from_json(json.loads(data)["acls"]) if data else frozenset(),
                stat.version)

    def _load(self) -> AclMap:
        # the changes announced from here on are the watch's
        for changes_path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            announced = children(self._zk, changes_path)
            self._seen[changes_path] = _seq(announced[-1]) if announced else -1
        acls: AclMap = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            root = _root(pattern_type)
            for kind in children(self._zk, root):
                resource_type = ResourceType(ResourceType.from_camel(kind))
                for name in children(self._zk, f"{root}/{kind}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    entries, _ = self._read(pattern)
                    if entries:
                        acls[pattern] = entries
        return acls

    async def load(self) -> AclMap:
        return await asyncio.to_thread(self._load)

    def _update(self, changes: dict[ResourcePattern, EntriesChange]) -> AclMap:
        result: AclMap = {}
        for pattern, change in changes.items():
            result[pattern] = self._update_one(pattern, change)
            changes_path, data = _change_path(pattern)
            self._zk.retry(self._zk.create, f"{changes_path}/{CHANGE_PREFIX}", data,
                           sequence=True, makepath=True)
            self._expire_changes(changes_path)
        return result

    def _update_one(self, pattern: ResourcePattern, change: EntriesChange) -> Entries:
        path = _path(pattern)
        while True:  # until our write is on what is stored
            current, version = self._read(pattern)
            entries = change(current)
            data = json.dumps({"version": 1, "acls": entries_json(entries)},
                              separators=(",", ":")).encode()
            if write_if_unchanged(self._zk, path, data if entries else None, version):
                return entries

    def _expire_changes(self, changes_path: str) -> None:
        expired = (time.time() - CHANGE_EXPIRY_S) * 1000
        for child in children(self._zk, changes_path):
            stat = self._zk.exists(f"{changes_path}/{child}")
            if stat is None:
                continue
            if stat.ctime >= expired:
                break
            try:
                self._zk.delete(f"{changes_path}/{child}")
            except kex.NoNodeError:
                pass

    async def update(self, changes: dict[ResourcePattern, EntriesChange]) -> AclMap:
        async with self._lock:
            return await asyncio.to_thread(self._update, changes)

    def watch(self, changed: Callable[[AclMap], None]) -> None:
        for changes_path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._zk.ensure_path(changes_path)
            ChildrenWatch(self._zk, changes_path, lambda _children, path=changes_path:
                          self._loop.call_soon_threadsafe(self._announced, path, changed))

    def _announced(self, changes_path: str, changed: Callable[[AclMap], None]) -> None:
        task = self._loop.create_task(self._reload(changes_path, changed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reload(self, changes_path: str, changed: Callable[[AclMap], None]) -> None:
        try:
            async with self._lock:
                reloaded = await asyncio.to_thread(self._read_changes, changes_path)
                if reloaded:
                    changed(reloaded)
        except Exception:
            log.exception("reading ACL changes under %s failed; still watching", changes_path)

    def _read_changes(self, changes_path: str) -> AclMap:
        """The stored entries of the patterns announced since the last read."""
        patterns = set()
        for child in children(self._zk, changes_path):
            seq = _seq(child)
            if seq <= self._seen[changes_path]:
                continue
            try:
                data, _ = self._zk.get(f"{changes_path}/{child}")
            except kex.NoNodeError:
                continue
            patterns.add(_changed_pattern(changes_path, data))
            self._seen[changes_path] = seq
        return {p: self._read(p)[0] for p in patterns}

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
