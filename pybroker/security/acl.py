"""Kafka's ACL model: resource patterns, access control entries, bindings and filters.

The numeric codes are Kafka's wire codes (``org.apache.kafka.common.resource.ResourceType``,
``PatternType``, ``org.apache.kafka.common.acl.AclOperation``, ``AclPermissionType``); the
names are those Kafka's ZooKeeper mode writes in znode paths and JSON (``SecurityUtils``:
``Topic``, ``TransactionalId``, ``IdempotentWrite``, ``Allow``...).

A binding is a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal,
host, operation, ALLOW or DENY). A filter has the same fields, each of which may be ANY
(or None for the strings); its pattern type may also be MATCH: every pattern that would
apply to a resource of that name (the literal name, the wildcard ``*``, and every prefix
of it). Only ``matches`` knows these rules.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

WILDCARD = "*"  # a resource name or host meaning all
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal of an unauthenticated connection


class _Coded(enum.IntEnum):
    """An enum of Kafka codes whose ZooKeeper name is CamelCase of the Python name."""

    @property
    def camel(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_camel(cls, text: str) -> _Coded:
        for member in cls:
            if member.camel.lower() == text.lower():
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r}")


class ResourceType(_Coded):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Coded):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_Op = AclOperation
# Kafka's AclEntry.supportedOperations: what an ACL on each resource type may name (ALL
# aside), and the bits of KIP-430's authorized operations
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE,
                         _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS,
                         _Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS,
                           _Op.ALTER_CONFIGS, _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (_Op.DESCRIBE,),
    ResourceType.USER: (_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS),
}


class ResourcePattern(NamedTuple):
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{self.resource_type.camel}:{self.pattern_type.name}:{self.name}"


class AccessControlEntry(NamedTuple):
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermissionType


class AclBinding(NamedTuple):
    pattern: ResourcePattern
    entry: AccessControlEntry


class AclBindingFilter(NamedTuple):
    """What DescribeAcls and DeleteAcls select: ANY (None for strings) matches every value."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def problem(self) -> str | None:
        """Why Kafka refuses this filter (an UNKNOWN element), or None."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value.name == "UNKNOWN":
                return f"the filter must not contain UNKNOWN elements ({type(value).__name__})"
        return None

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if pattern.pattern_type == PatternType.LITERAL:
                return pattern.name in (self.name, WILDCARD)
            return (pattern.pattern_type == PatternType.PREFIXED
                    and self.name.startswith(pattern.name))
        if self.pattern_type not in (PatternType.ANY, pattern.pattern_type):
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission in (AclPermissionType.ANY, entry.permission))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def parse_principal(text: str) -> str:
    """``Type:name`` as Kafka's ``SecurityUtils.parseKafkaPrincipal`` accepts it; raises
    ValueError otherwise."""
    kind, sep, name = text.partition(":")
    if not sep:
        raise ValueError(f"Could not parse principal from `{text}` (no colon is present "
                         "separating the principal type from the principal name)")
    if not kind or not name:
        raise ValueError(f"Could not parse principal from `{text}`: it must be Type:name")
    return text


def binding_problem(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (INVALID_REQUEST), or None. (Kafka 4.1
    answers an UNKNOWN, ANY or MATCH element with UNKNOWN_SERVER_ERROR for the whole
    request, an exception it did not mean to throw; it is refused here on its own.)"""
    pattern, entry = binding
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"invalid resource type {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"invalid pattern type {pattern.pattern_type.name}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"invalid operation {entry.operation.name}"
    if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"invalid permission type {entry.permission.name}"
    if not pattern.name:
        return "Invalid empty resource name"
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    try:
        parse_principal(entry.principal)
    except ValueError as exc:
        return str(exc)
    return None
