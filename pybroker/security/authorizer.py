"""The authorizer: Kafka's ``AclAuthorizer`` / ``StandardAuthorizer`` rules over ACLs held
in memory, kept in a store (:mod:`pybroker.security.store`).

``authorize(principal, host, operation, resource_type, name)`` decides as Kafka does:

1. A super user (``super.users``, ``User:alice;User:bob``) may do anything.
2. The ACLs that apply to the resource are those of its literal name, of the wildcard
   name ``*`` and of every PREFIXED pattern that its name starts with. If there are none
   at all (for anybody), ``allow.everyone.if.no.acl.found`` decides (default false).
3. An entry applies to the request when its principal is the request's or ``User:*`` and
   its host is the request's or ``*``.
4. A DENY entry for the operation or ALL refuses, whatever allows it.
5. An ALLOW entry for the operation or ALL allows; so does, for DESCRIBE, one for READ,
   WRITE, DELETE or ALTER, and for DESCRIBE_CONFIGS one for ALTER_CONFIGS (Kafka's
   implied operations). Otherwise refused.

Decisions are remembered per (principal, host, operation, resource) until the ACLs
change, so the produce and fetch paths pay a dict lookup per topic; the memory is
bounded (cleared when it holds ``MEMO_LIMIT`` decisions).

Requests come from handlers through ``RequestContext.authorize``; a broker without
``authorizer.class.name`` has no authorizer at all, and the handlers' checks cost one
attribute test. Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from pybroker.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_problem,
)
from pybroker.security.store import AclMap, AclStore, Entries, EntriesChange

log = logging.getLogger("pybroker.security")

# ``authorizer.class.name`` values that select this authorizer: Kafka's ZooKeeper-mode and
# KRaft authorizers (so a Kafka properties file works unchanged) and pybroker's own name
AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "pybroker.security.authorizer.AclAuthorizer",
})
MEMO_LIMIT = 100_000

_Op = AclOperation
# the operations whose ALLOW also allows the key (Kafka's AclAuthorizer.matchingOperations)
_ALLOWED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, _Op.ALL}) for op in AclOperation}
_ALLOWED_BY[_Op.DESCRIBE] = frozenset({_Op.DESCRIBE, _Op.READ, _Op.WRITE, _Op.DELETE,
                                       _Op.ALTER, _Op.ALL})
_ALLOWED_BY[_Op.DESCRIBE_CONFIGS] = frozenset({_Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
                                               _Op.ALL})


class UnknownAuthorizerError(ValueError):
    pass


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons."""
    return frozenset(p.strip() for p in text.split(";") if p.strip())


class Authorizer(Protocol):
    """What the broker and its handlers ask of an authorizer (Kafka's ``Authorizer``):
    decisions, and the ACLs it keeps. ``AclAuthorizer`` is the one there is."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool: ...

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool: ...

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str, supported: Iterable[AclOperation]) -> int: ...

    def bindings(self, selected: AclBindingFilter | None = None) -> Iterable[AclBinding]: ...

    async def create(self, bindings: list[AclBinding]) -> list[str | None]: ...

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]: ...


class AclAuthorizer:
    def __init__(self, store: AclStore, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        # resource type -> pattern type -> name -> entries
        self._acls: dict[ResourceType, dict[PatternType, dict[str, Entries]]] = {}
        self._memo: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}

    @classmethod
    def from_config(cls, class_name: str, store: AclStore, super_users: str,
                    allow_if_no_acl: bool) -> AclAuthorizer:
        if class_name not in AUTHORIZER_CLASS_NAMES:
            raise UnknownAuthorizerError(
                f"authorizer.class.name={class_name!r} is not served; use one of "
                f"{', '.join(sorted(AUTHORIZER_CLASS_NAMES))}")
        return cls(store, parse_super_users(super_users), allow_if_no_acl)

    async def start(self) -> None:
        self._apply(await self.store.load())
        self.store.watch(self._apply)
        log.info("authorizer: %d ACLs; super users: %s", sum(1 for _ in self.bindings()),
                 ", ".join(sorted(self.super_users)) or "none")

    async def stop(self) -> None:
        await self.store.close()

    def _apply(self, changed: AclMap) -> None:
        for pattern, entries in changed.items():
            names = self._acls.setdefault(pattern.resource_type, {}).setdefault(
                pattern.pattern_type, {})
            if entries:
                names[pattern.name] = entries
            else:
                names.pop(pattern.name, None)
        self._memo.clear()

    # decisions ---------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        decision = self._memo.get(key)
        if decision is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            decision = self._memo[key] = self._decide(*key)
        return decision

    def _entries_for(self, resource_type: ResourceType, name: str) -> list[Entries]:
        patterns = self._acls.get(resource_type)
        if not patterns:
            return []
        found = []
        literal = patterns.get(PatternType.LITERAL)
        if literal:
            for key in (name, WILDCARD):
                if key in literal:
                    found.append(literal[key])
        prefixed = patterns.get(PatternType.PREFIXED)
        if prefixed:
            found.extend(prefixed[name[:end]] for end in range(1, len(name) + 1)
                         if name[:end] in prefixed)
        return found

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entry_sets = self._entries_for(resource_type, name)
        if not entry_sets:
            return self.allow_if_no_acl
        allowing = _ALLOWED_BY[operation]
        allowed = False
        for entries in entry_sets:
            for entry in entries:
                if (entry.principal not in (principal, WILDCARD_PRINCIPAL)
                        or entry.host not in (host, WILDCARD)):
                    continue
                if entry.permission == AclPermissionType.DENY:
                    if entry.operation in (operation, AclOperation.ALL):
                        return False
                elif entry.operation in allowing:
                    allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether the client may do ``operation`` on some resource of the type (Kafka's
        ``authorizeByResourceType``: an idempotent producer may write if it may write to
        any topic): an ALLOW pattern that no DENY covers (the wildcard, the same literal
        name, or a prefix of it)."""
        if principal in self.super_users:
            return True
        patterns = self._acls.get(resource_type, {})
        if not any(patterns.values()):
            return self.allow_if_no_acl
        allowing = _ALLOWED_BY[operation]

        def applies(entry: AccessControlEntry) -> bool:
            return (entry.principal in (principal, WILDCARD_PRINCIPAL)
                    and entry.host in (host, WILDCARD))

        def denied(name: str) -> bool:
            return any(applies(e) and e.permission == AclPermissionType.DENY
                       and e.operation in (operation, AclOperation.ALL)
                       for entries in self._entries_for(resource_type, name) for e in entries)

        return any(
            applies(e) and e.permission == AclPermissionType.ALLOW and e.operation in allowing
            and not denied(name)
            for names in patterns.values() for name, entries in names.items() for e in entries)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str, supported: Iterable[AclOperation]) -> int:
        """KIP-430's bit field: bit ``op`` set for each supported operation allowed."""
        return sum(1 << op for op in supported
                   if self.authorize(principal, host, op, resource_type, name))

    # administration ----------------------------------------------------------------------

    def bindings(self, selected: AclBindingFilter | None = None) -> Iterable[AclBinding]:
        for resource_type, patterns in self._acls.items():
            for pattern_type, names in patterns.items():
                for name, entries in names.items():
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    if selected is not None and not selected.matches_pattern(pattern):
                        continue
                    for entry in entries:
                        if selected is None or selected.matches_entry(entry):
                            yield AclBinding(pattern, entry)

    async def create(self, bindings: list[AclBinding]) -> list[str | None]:
        """Add the valid bindings; returns, in order, None or why each was refused
        (INVALID_REQUEST)."""
        problems = [binding_problem(b) for b in bindings]
        added: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding, problem in zip(bindings, problems, strict=True):
            if problem is None:
                added.setdefault(binding.pattern, set()).add(binding.entry)
        if added:
            await self._update({p: _adding(e) for p, e in added.items()})
        return problems

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove the bindings each filter matches; returns them, per filter."""
        matched = [list(self.bindings(f)) for f in filters]
        removed: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for bindings in matched:
            for pattern, entry in bindings:
                removed.setdefault(pattern, set()).add(entry)
        if removed:
            await self._update({p: _removing(e) for p, e in removed.items()})
        return matched

    async def _update(self, changes: dict[ResourcePattern, EntriesChange]) -> None:
        self._apply(await self.store.update(changes))


def _adding(entries: set[AccessControlEntry]) -> EntriesChange:
    return lambda current: current | entries


def _removing(entries: set[AccessControlEntry]) -> EntriesChange:
    return lambda current: current - entries
