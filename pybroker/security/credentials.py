"""SCRAM credentials: what SaslAuthenticate checks and AlterUserScramCredentials /
DescribeUserScramCredentials change, held in memory and kept in a store.

``ScramCredentials`` holds every user's credentials (user -> mechanism ->
:class:`~pybroker.security.scram.ScramCredential`) and decides the admin requests as
Kafka 4.1's controller does (``ScramControlManager``): an unknown mechanism is
UNSUPPORTED_SASL_MECHANISM, an empty user name or an iteration count outside
4096-16384 UNACCEPTABLE_CREDENTIAL, a user named twice DUPLICATE_RESOURCE, a deletion or
description of a credential that does not exist RESOURCE_NOT_FOUND, each with Kafka's
message. (An empty salted password, which Kafka answers UNKNOWN_SERVER_ERROR, is
UNACCEPTABLE_CREDENTIAL here.)

The store is picked by the metadata plane (``Metadata.credential_store``): on one node
``scram-credentials.json`` in the data directory, replaced atomically and durably::

    {"version": 1, "users": {"alice": {"SCRAM-SHA-256": "salt=...,stored_key=...,
                                        server_key=...,iterations=4096"}}}

(each credential in Kafka's text form); in a cluster ZooKeeper's ``/config/users/<user>``
(:mod:`pybroker.security.zk_credential_store`). A change is a function of the user's
stored credentials, so a store shared by several brokers can apply it to what is stored
now; other brokers' changes arrive through ``watch``.

Not thread-safe: the event loop thread only (the file is written by a thread).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol

from pybroker.broker.files import DurableJsonFile, read_json
from pybroker.errors import ErrorCode
from pybroker.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)

log = logging.getLogger("pybroker.security")

CREDENTIALS_FILE = "scram-credentials.json"

UserCredentials = dict[str, ScramCredential]  # mechanism name -> credential
CredentialMap = dict[str, UserCredentials]  # user -> their credentials (none empty)
UserChange = Callable[[UserCredentials], UserCredentials]
# DescribeUserScramCredentials' answer of a user: (user, error code, message,
# [(mechanism code, iterations)])
Described = tuple[str, int, str, list[tuple[int, int]]]


class CredentialStore(Protocol):
    async def load(self) -> CredentialMap:
        """Every user's stored credentials."""
        ...

    async def update(self, changes: dict[str, UserChange]) -> CredentialMap:
        """Apply each change to the user's stored credentials and store the result (an
        empty result removes them); returns each changed user's stored credentials.
        Durable when it returns."""
        ...

    def watch(self, changed: Callable[[CredentialMap], None]) -> None:
        """Call ``changed`` on the event loop with the new credentials of the users other
        brokers change from now on (never, where nobody else writes)."""
        ...

    async def close(self) -> None: ...


def credentials_to_text(credentials: UserCredentials) -> dict[str, str]:
    return {mechanism: c.to_text() for mechanism, c in sorted(credentials.items())}


def credentials_from_text(configs: dict[str, str]) -> UserCredentials:
    """The SCRAM entries of a user's config map (other keys, client quotas, are not
    ours)."""
    return {mechanism: ScramCredential.from_text(text) for mechanism, text in configs.items()
            if mechanism in MECHANISM_CODES}


class FileCredentialStore:
    """One broker's credentials in ``scram-credentials.json``."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, CREDENTIALS_FILE)
        self._file = DurableJsonFile(self.path)
        self._users: CredentialMap = {}

    async def load(self) -> CredentialMap:
        data = read_json(self.path, {"version": 1, "users": {}})
        self._users = {user: credentials_from_text(configs)
                       for user, configs in data["users"].items()}
        return dict(self._users)

    async def update(self, changes: dict[str, UserChange]) -> CredentialMap:
        result: CredentialMap = {}
        for user, change in changes.items():
            credentials = result[user] = change(dict(self._users.get(user, {})))
            if credentials:
                self._users[user] = credentials
            else:
                self._users.pop(user, None)
        await self._file.write_async({"version": 1, "users": {
            user: credentials_to_text(c) for user, c in sorted(self._users.items())}})
        return result

    def watch(self, changed: Callable[[CredentialMap], None]) -> None:
        pass  # nobody else writes this broker's file

    async def close(self) -> None:
        pass


class Deletion(NamedTuple):
    user: str
    mechanism: int  # Kafka's code (1 SCRAM-SHA-256, 2 SCRAM-SHA-512)


class Upsertion(NamedTuple):
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


class Outcome(NamedTuple):
    user: str
    error_code: int
    error_message: str | None


def _problem(user: str, mechanism: int, upsertion: Upsertion | None) -> Outcome | None:
    """Kafka's refusal of one deletion or upsertion, before the store is asked."""
    if not user:
        return Outcome(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in MECHANISM_NAMES:
        return Outcome(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if upsertion is not None:
        if upsertion.iterations < MIN_ITERATIONS:
            return Outcome(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        if upsertion.iterations > MAX_ITERATIONS:
            return Outcome(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if not upsertion.salted_password:
            return Outcome(user, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                           "Salted password must not be empty")
    return None


class ScramCredentials:
    """Every user's SCRAM credentials in memory, the store behind them."""

    def __init__(self) -> None:
        self._store: CredentialStore | None = None  # set by start
        self._users: CredentialMap = {}

    async def start(self, store: CredentialStore) -> None:
        self._store = store
        self._users = await store.load()
        store.watch(self._changed)

    async def stop(self) -> None:
        if self._store is not None:
            await self._store.close()

    def _changed(self, users: CredentialMap) -> None:
        for user, credentials in users.items():
            if credentials:
                self._users[user] = credentials
            else:
                self._users.pop(user, None)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential SaslAuthenticate checks (None: the user has none for it)."""
        credentials = self._users.get(user)
        return None if credentials is None else credentials.get(mechanism)

    def describe(self, users: list[str] | None) -> list[Described]:
        """The answer of each user asked (every user with credentials for None or an
        empty list), as Kafka answers."""
        if not users:
            users = sorted(self._users)
        counts: dict[str, int] = {}
        for user in users:
            counts[user] = counts.get(user, 0) + 1
        out: list[Described] = []
        for user in dict.fromkeys(users):
            if counts[user] > 1:
                out.append((user, ErrorCode.DUPLICATE_RESOURCE,
                            "Cannot describe SCRAM credentials for the same user twice in a "
                            f"single request: {user}", []))
            elif user not in self._users:
                out.append((user, ErrorCode.RESOURCE_NOT_FOUND,
                            f"Attempt to describe a user credential that does not exist: "
                            f"{user}", []))
            else:
                out.append((user, ErrorCode.NONE, "", [
                    (MECHANISM_CODES[m], c.iterations)
                    for m, c in sorted(self._users[user].items())]))
        return out

    async def alter(self, deletions: Iterable[Deletion],
                    upsertions: Iterable[Upsertion]) -> list[Outcome]:
        """Apply the deletions and upsertions Kafka accepts; one outcome per user named,
        in the order first named."""
        items: list[Deletion | Upsertion] = [*deletions, *upsertions]
        outcomes: dict[str, Outcome] = {}
        seen: dict[tuple[str, int], int] = {}
        for item in items:
            seen[(item.user, item.mechanism)] = seen.get((item.user, item.mechanism), 0) + 1
        for item in items:
            problem = _problem(item.user, item.mechanism,
                               item if isinstance(item, Upsertion) else None)
            if problem is None and seen[(item.user, item.mechanism)] > 1:
                problem = Outcome(item.user, ErrorCode.DUPLICATE_RESOURCE,
                                  "A user credential cannot be altered twice in the same "
                                  "request")
            if problem is None and isinstance(item, Deletion) and \
                    self.lookup(item.user, MECHANISM_NAMES[item.mechanism]) is None:
                problem = Outcome(item.user, ErrorCode.RESOURCE_NOT_FOUND,
                                  "Attempt to delete a user credential that does not exist")
            if problem is not None and outcomes.get(item.user, problem).error_code == 0:
                outcomes[item.user] = problem
            outcomes.setdefault(item.user, problem or Outcome(item.user, ErrorCode.NONE, None))
        accepted = {user for user, outcome in outcomes.items() if outcome.error_code == 0}
        changes: dict[str, list[Deletion | Upsertion]] = {}
        for item in items:
            if item.user in accepted:
                changes.setdefault(item.user, []).append(item)
        if changes:
            assert self._store is not None, "not started"
            stored = await self._store.update(
                {user: _change(items) for user, items in changes.items()})
            self._changed(stored)
            for user in changes:
                log.info("SCRAM credentials of %s now: %s", user,
                         ", ".join(sorted(stored.get(user, {}))) or "none")
        return list(outcomes.values())


def _change(items: list[Deletion | Upsertion]) -> UserChange:
    def change(current: UserCredentials) -> UserCredentials:
        out = dict(current)
        for item in items:
            mechanism = MECHANISM_NAMES[item.mechanism]
            if isinstance(item, Upsertion):
                out[mechanism] = credential_from_salted(mechanism, item.salt,
                                                        item.salted_password, item.iterations)
            else:
                out.pop(mechanism, None)
        return out
    return change
