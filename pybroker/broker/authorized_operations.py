"""KIP-430 authorized operations: the bit field of ACL operations a client may perform on
a resource, in Metadata, DescribeCluster, DescribeGroups and DescribeTopicPartitions.

Without an authorizer Kafka allows every operation the resource type supports, so the
answer depends on the resource type alone. Bit ``n`` stands for the ACL operation whose
code is ``n`` (Kafka's ``AclOperation``); a request that did not ask gets
``NOT_REQUESTED``. An authorizer, when there is one, answers here.
"""

from __future__ import annotations

import enum

NOT_REQUESTED = -(1 << 31)


class AclOperation(enum.IntEnum):
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


class ResourceType(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"


_Op = AclOperation
# Kafka's AclEntry.supportedOperations, per resource type
_SUPPORTED: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE,
                         _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS,
                         _Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS,
                           _Op.ALTER_CONFIGS, _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE),
}
_ALLOWED = {kind: sum(1 << op for op in ops) for kind, ops in _SUPPORTED.items()}


def authorized_operations(kind: ResourceType, requested: bool = True) -> int:
    """The operations allowed on a resource of this type, as the response field carries
    them; ``NOT_REQUESTED`` unless the request asked."""
    return _ALLOWED[kind] if requested else NOT_REQUESTED
