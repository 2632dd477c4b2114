"""The cluster's SCRAM credentials in ZooKeeper, as Kafka's ZooKeeper mode kept them::

    /config/users/<user>                 {"version":1,"config":{"SCRAM-SHA-256":
                                          "salt=...,stored_key=...,server_key=...,
                                          iterations=4096", ...}}
    /config/changes/config_change_<seq>  {"version":2,"entity_path":"users/<user>"}

The user's name is sanitized as Kafka's ``Sanitizer`` does (:mod:`pybroker.sanitizer`,
as the quotas' are). The same znode's ``config`` map holds the user's client quotas
(``producer_byte_rate``, ...): a change reads the znode, replaces only the SCRAM keys and
writes conditionally on the znode's version, retrying when another writer came first, so
neither kind of key clobbers the other (the quota side, ``ClusterStore.set_client_quota``,
keeps the SCRAM keys the same way); a znode left with no key stays, with an empty map, as
Kafka leaves it (it may have ``clients/<id>`` quota children).

Every broker watches ``/config/changes`` through the cluster store's one reader of it
(:meth:`pybroker.cluster.zk_store.ClusterStore.watch_config_changes`, kind "users") and
reloads the users named there, so a credential created through one broker authenticates
on every other within a ZooKeeper round trip or two. Expiring old notifications is left
to the topic configs' watch.

Thread-safety: ``load`` and ``update`` block (run on a worker thread); the watch runs on
kazoo's callback thread and hands its changes to the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import kazoo.exceptions as kex

from pybroker.sanitizer import desanitize, sanitize
from pybroker.security.credentials import (
    CredentialMap,
    UserChange,
    UserCredentials,
    credentials_from_text,
    credentials_to_text,
)
from pybroker.security.scram import MECHANISM_CODES
from pybroker.security.zk_writes import children, write_if_unchanged

if TYPE_CHECKING:
    from pybroker.cluster.zk_store import ClusterStore

log = logging.getLogger("pybroker.security")

USERS = "/config/users"
ENTITY_PREFIX = "users/"


class ZkCredentialStore:
    def __init__(self, store: ClusterStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._zk = store.client  # a connected KazooClient
        self._loop = loop
        # writes and reloads one at a time, each applied before the next starts
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def _read(self, user: str) -> tuple[dict[str, Any], int | None]:
        """The user's whole config map and the znode's version (None: no znode)."""
        try:
            data, stat = self._zk.retry(self._zk.get, f"{USERS}/{sanitize(user)}")
        except kex.NoNodeError:
            return {}, None
        config = (json.loads(data) or {}).get("config", {}) if data else {}
        return {k: str(v) for k, v in config.items()}, stat.version

    def _load(self) -> CredentialMap:
        users: CredentialMap = {}
        for name in children(self._zk, USERS):
            user = desanitize(name)
            credentials = credentials_from_text(self._read(user)[0])
            if credentials:
                users[user] = credentials
        return users

    async def load(self) -> CredentialMap:
        return await asyncio.to_thread(self._load)

    def _update(self, changes: dict[str, UserChange]) -> CredentialMap:
        result: CredentialMap = {}
        for user, change in changes.items():
            result[user] = self._update_one(user, change)
            self._store.announce_config_change(ENTITY_PREFIX + sanitize(user))
        return result

    def _update_one(self, user: str, change: UserChange) -> UserCredentials:
        path = f"{USERS}/{sanitize(user)}"
        while True:  # until our write is on what is stored
            config, version = self._read(user)
            credentials = change(credentials_from_text(config))
            config = {k: v for k, v in config.items() if k not in MECHANISM_CODES}
            config.update(credentials_to_text(credentials))
            # an emptied znode stays (Kafka's way; it may have quota children)
            if version is None and not config:
                return credentials
            data = json.dumps({"version": 1, "config": config},
                              separators=(",", ":")).encode()
            if write_if_unchanged(self._zk, path, data, version):
                return credentials

    async def update(self, changes: dict[str, UserChange]) -> CredentialMap:
        async with self._lock:
            return await asyncio.to_thread(self._update, changes)

    def watch(self, changed: Callable[[CredentialMap], None]) -> None:
        def announced(paths: list[str]) -> None:  # kazoo's thread
            users = {desanitize(path[len(ENTITY_PREFIX):]) for path in paths
                     if "/" not in path[len(ENTITY_PREFIX):]}  # not users/<u>/clients/..
            if users:
                self._loop.call_soon_threadsafe(self._announced, users, changed)
        self._store.watch_config_changes(announced, kinds=("users",))

    def _announced(self, users: set[str], changed: Callable[[CredentialMap], None]) -> None:
        task = self._loop.create_task(self._reload(users, changed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reload(self, users: set[str], changed: Callable[[CredentialMap], None]
                      ) -> None:
        try:
            async with self._lock:
                reloaded = await asyncio.to_thread(
                    lambda: {user: credentials_from_text(self._read(user)[0])
                             for user in users})
                changed(reloaded)
        except Exception:
            log.exception("reading SCRAM credential changes failed; still watching")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
