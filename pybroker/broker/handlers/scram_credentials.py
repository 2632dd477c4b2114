"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the users' SCRAM
credentials (``Broker.credentials``, :mod:`pybroker.security.credentials`), v0 as Kafka
4.1 serves them.

Describing needs DESCRIBE on the cluster (refused: the response's top-level
CLUSTER_AUTHORIZATION_FAILED), altering ALTER on it (refused: every user named is
answered CLUSTER_AUTHORIZATION_FAILED, as Kafka's ``getErrorResponse``). The request
carries salted passwords, never passwords: the client salts (``SaltedPassword``), the
broker derives and keeps the stored and server keys. A store that fails (ZooKeeper
unreachable) is UNKNOWN_SERVER_ERROR for every user, logged.
"""

from __future__ import annotations

import logging

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.security.credentials import Deletion, Upsertion

log = logging.getLogger("pybroker.security")

CLUSTER = "kafka-cluster"


@handler(api_key=50, versions=(0, 0))
async def describe_user_scram_credentials(
        ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    ctx.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER)
    users = None if request["users"] is None else [u["name"] for u in request["users"]]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": "",
            "results": [
                {"user": user, "error_code": code, "error_message": message,
                 "credential_infos": [{"mechanism": mechanism, "iterations": iterations}
                                      for mechanism, iterations in infos]}
                for user, code, message, infos in ctx.broker.credentials.describe(users)]}


@handler(api_key=51, versions=(0, 0))
async def alter_user_scram_credentials(
        ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    deletions = [Deletion(d["name"], d["mechanism"]) for d in request["deletions"]]
    upsertions = [Upsertion(u["name"], u["mechanism"], u["iterations"], bytes(u["salt"]),
                            bytes(u["salted_password"])) for u in request["upsertions"]]
    users = list(dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions]))
    refused = ctx.refusal(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER)
    if refused is not None:
        return {"throttle_time_ms": 0, "results": [
            {"user": user, "error_code": refused.code, "error_message": str(refused)}
            for user in users]}
    try:
        outcomes = await ctx.broker.credentials.alter(deletions, upsertions)
    except Exception as exc:  # the store (ZooKeeper) failed: nothing is known to be stored
        log.warning("AlterUserScramCredentials failed: %r", exc)
        return {"throttle_time_ms": 0, "results": [
            {"user": user, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
             "error_message": str(exc)} for user in users]}
    return {"throttle_time_ms": 0, "results": [
        {"user": o.user, "error_code": o.error_code, "error_message": o.error_message}
        for o in outcomes]}
