"""KIP-430 authorized operations: the bit field of ACL operations a client may perform on
a resource, in Metadata, DescribeCluster, DescribeGroups and DescribeTopicPartitions.

Bit ``n`` stands for the ACL operation whose code is ``n`` (Kafka's ``AclOperation``),
among the operations the resource type supports (Kafka's ``AclEntry.supportedOperations``).
Without an authorizer Kafka allows every one of them, so the answer depends on the
resource type alone; with one, the authorizer decides each for the client. A request that
did not ask gets ``NOT_REQUESTED``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.security.acl import SUPPORTED_OPERATIONS, ResourceType

if TYPE_CHECKING:
    from pybroker.broker.request import RequestContext

NOT_REQUESTED = -(1 << 31)

_ALLOWED = {kind: sum(1 << op for op in ops) for kind, ops in SUPPORTED_OPERATIONS.items()}


def authorized_operations(ctx: RequestContext, kind: ResourceType, name: str,
                          requested: bool = True) -> int:
    """The operations the client may perform on the resource, as the response field
    carries them; ``NOT_REQUESTED`` unless the request asked."""
    if not requested:
        return NOT_REQUESTED
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _ALLOWED[kind]
    return authorizer.authorized_operations(ctx.principal, ctx.host, kind, name,
                                            SUPPORTED_OPERATIONS[kind])
