"""AlterReplicaLogDirs (key 34), v1-v2 (Kafka 4.1's): move replicas between this broker's
log directories while they serve (``LogDirMover``, Kafka's future logs).

Per partition, as Kafka answers: LOG_DIR_NOT_FOUND for a path that is not one of
``log.dirs`` (compared as absolute paths), KAFKA_STORAGE_ERROR for a directory that is
offline or a partition in one, REPLICA_NOT_AVAILABLE for a partition with no replica
here, CLUSTER_AUTHORIZATION_FAILED for all without ALTER on the cluster. NONE once the
move is under way (or there is nothing to move): the answer does not wait for the copy,
DescribeLogDirs shows its future log (``is_future_key``) until the swap.
"""

from __future__ import annotations

import logging
import os

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, KafkaError
from pybroker.net.protocol.typed import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirsResponseAlterReplicaLogDirTopicResult,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger("pybroker.alter_replica_log_dirs")


@handler(api_key=34, versions=(1, 2))
async def alter_replica_log_dirs(ctx: RequestContext, request: AlterReplicaLogDirsRequest
                                 ) -> AlterReplicaLogDirsResponse:
    allowed = ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    logs = ctx.broker.logs
    by_path = {os.path.abspath(d): d for d in logs.log_dirs}
    results: dict[str, AlterReplicaLogDirsResponseAlterReplicaLogDirTopicResult] = {}
    for wanted in request["dirs"]:
        log_dir = by_path.get(os.path.abspath(wanted["path"]))
        for t in wanted["topics"]:
            result = results.setdefault(t["name"], {"topic_name": t["name"], "partitions": []})
            for index in t["partitions"]:
                code: int
                if not allowed:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif log_dir is None:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                elif log_dir in logs.offline_dirs:
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                else:
                    code = _move(ctx, t["name"], index, log_dir)
                result["partitions"].append({"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0, "results": list(results.values())}


def _move(ctx: RequestContext, name: str, index: int, log_dir: str) -> int:
    topic = ctx.broker.topics.get(name)
    partition = topic.partitions[index] \
        if topic is not None and 0 <= index < len(topic.partitions) else None
    if partition is None or partition.log is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if partition.offline:
        return ErrorCode.KAFKA_STORAGE_ERROR
    mover = ctx.broker.log_dir_mover
    if mover is None:  # (the broker is starting: it serves requests only once built)
        return ErrorCode.REPLICA_NOT_AVAILABLE
    try:
        mover.move(partition, log_dir)
    except KafkaError as exc:
        return exc.code
    except OSError as exc:
        log.warning("%s-%d: cannot start a move to %s: %s", name, index, log_dir, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE
