"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): the authorizer's ACLs, as Kafka
answers them (``AclApis``).

Without an authorizer every creation, filter or description is answered
SECURITY_DISABLED, with Kafka 4.1's messages. Creating and deleting need ALTER on
the cluster, describing DESCRIBE on it; refused, every entry of the answer carries
CLUSTER_AUTHORIZATION_FAILED. A binding Kafka refuses (an UNKNOWN, ANY or MATCH element,
an empty name, a cluster not named ``kafka-cluster``, a principal not ``Type:name``) is
answered INVALID_REQUEST in its place, the rest of the request going through; a filter
with an UNKNOWN element closes the connection, as Kafka refuses to parse the request. A store
that fails (ZooKeeper unreachable) is UNKNOWN_SERVER_ERROR for every entry, logged.
Versions 1-3, as Kafka 4 (v0, without pattern types, was removed by KIP-896).
"""

from __future__ import annotations

import logging
from typing import Any

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.connection import CloseConnection
from pybroker.net.protocol.typed import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsRequestFilter,
    DeleteAclsResponse,
    DeleteAclsResponseFilterResult,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeAclsResponseResource,
)
from pybroker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from pybroker.security.authorizer import Authorizer

log = logging.getLogger("pybroker.security")

# Kafka's words: DescribeAcls is answered by the broker, the others by the controller
NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_HERE = "No Authorizer is configured on the broker"
VERSIONS = (1, 3)


def _code(enum: type[Any], value: int) -> Any:
    """The member of a code enum, UNKNOWN for a code Kafka does not know."""
    try:
        return enum(value)
    except ValueError:
        return enum.UNKNOWN


def _filter(request: DescribeAclsRequest | DeleteAclsRequestFilter) -> AclBindingFilter:
    """The filter; one with an UNKNOWN element closes the connection, as Kafka refuses to
    parse it."""
    selected = AclBindingFilter(
        _code(ResourceType, request["resource_type_filter"]), request["resource_name_filter"],
        _code(PatternType, request.get("pattern_type_filter", PatternType.LITERAL)),
        request["principal_filter"], request["host_filter"],
        _code(AclOperation, request["operation"]),
        _code(AclPermissionType, request["permission_type"]))
    problem = selected.problem()
    if problem is not None:
        raise CloseConnection(f"ACL filter refused: {problem}")
    return selected


def _refusal(ctx: RequestContext, operation: AclOperation
             ) -> tuple[Authorizer | None, ErrorCode, str | None]:
    """The authorizer, or why the request is refused as a whole."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return None, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
    if not ctx.authorize(operation, ResourceType.CLUSTER, "kafka-cluster"):
        return None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
    return authorizer, ErrorCode.NONE, None


@handler(api_key=30, versions=VERSIONS)
async def create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    authorizer, error, message = _refusal(ctx, AclOperation.ALTER)
    if authorizer is None:
        return {"throttle_time_ms": 0, "results": [
            {"error_code": error, "error_message": message} for _ in request["creations"]]}
    bindings = [AclBinding(
        ResourcePattern(_code(ResourceType, c["resource_type"]), c["resource_name"],
                        _code(PatternType, c.get("resource_pattern_type", PatternType.LITERAL))),
        AccessControlEntry(c["principal"], c["host"], _code(AclOperation, c["operation"]),
                           _code(AclPermissionType, c["permission_type"])))
        for c in request["creations"]]
    try:
        problems = await authorizer.create(bindings)
    except Exception as exc:  # the store (ZooKeeper) failed: nothing is known to be stored
        log.warning("CreateAcls failed: %r", exc)
        return {"throttle_time_ms": 0, "results": [
            {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": str(exc)}
            for _ in bindings]}
    return {"throttle_time_ms": 0, "results": [
        {"error_code": ErrorCode.NONE if problem is None else ErrorCode.INVALID_REQUEST,
         "error_message": problem or ""} for problem in problems]}


@handler(api_key=29, versions=VERSIONS)
async def describe_acls(ctx: RequestContext,
                        request: DescribeAclsRequest) -> DescribeAclsResponse:
    selected = _filter(request)
    authorizer, error, message = _refusal(ctx, AclOperation.DESCRIBE)
    if authorizer is None:
        return {"throttle_time_ms": 0, "resources": [], "error_code": error,
                "error_message": NO_AUTHORIZER_HERE if error == ErrorCode.SECURITY_DISABLED
                else message}
    resources: dict[ResourcePattern, DescribeAclsResponseResource] = {}
    for pattern, entry in sorted(authorizer.bindings(selected)):
        resource = resources.get(pattern)
        if resource is None:
            resource = resources[pattern] = {
                "resource_type": pattern.resource_type, "resource_name": pattern.name,
                "pattern_type": pattern.pattern_type, "acls": []}
        resource["acls"].append({"principal": entry.principal, "host": entry.host,
                                 "operation": entry.operation,
                                 "permission_type": entry.permission})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": "",
            "resources": list(resources.values())}


@handler(api_key=31, versions=VERSIONS)
async def delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = [_filter(f) for f in request["filters"]]
    authorizer, error, message = _refusal(ctx, AclOperation.ALTER)
    if authorizer is None:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": error, "error_message": message, "matching_acls": []}
            for _ in request["filters"]]}
    try:
        deleted = await authorizer.delete(filters)
    except Exception as exc:  # the store (ZooKeeper) failed
        log.warning("DeleteAcls failed: %r", exc)
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": str(exc),
             "matching_acls": []} for _ in filters]}
    results: list[DeleteAclsResponseFilterResult] = []
    for matched in deleted:
        results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.NONE, "error_message": None,
             "resource_type": pattern.resource_type, "resource_name": pattern.name,
             "pattern_type": pattern.pattern_type, "principal": entry.principal,
             "host": entry.host, "operation": entry.operation,
             "permission_type": entry.permission}
            for pattern, entry in sorted(matched)]})
    return {"throttle_time_ms": 0, "filter_results": results}
