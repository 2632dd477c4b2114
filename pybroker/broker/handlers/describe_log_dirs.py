"""DescribeLogDirs (key 35), v1-v4: this broker's log directories and the replicas in each.

One entry per directory of ``log.dirs`` (its absolute path; KAFKA_STORAGE_ERROR and
nothing else for one that failed, as Kafka), naming the partitions whose replica is there
with the bytes of their segments and Kafka's ``offset_lag`` (how far the log end is below
the high watermark: 0 for a leader, and for a follower that has caught up). Every directory is listed, with no partition if none is asked for or none is there.
A request naming topics gets only those of their partitions that have a replica here
(unknown ones are left out, as Kafka does); a null list asks for every partition. v4 adds
the volume's total and usable bytes (-1 before). A replica moving to another directory
(AlterReplicaLogDirs) is listed there too, with ``is_future_key`` and as its lag how far
its future log is behind the current one.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.log.log_manager import log_dir_of
from pybroker.net.protocol.typed import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResponsePartition,
    DescribeLogDirsResponseResult,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger("pybroker.describe_log_dirs")


def _volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``; -1 each if unreadable."""
    try:
        stats = os.statvfs(path)
    except OSError as exc:
        log.warning("statvfs of %s failed: %s", path, exc)
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


@handler(api_key=35, versions=(1, 4))
async def describe_log_dirs(ctx: RequestContext,
                            request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # as Kafka: no directory, and the error from v3 (before, the empty list says it)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results": []}
    wanted: dict[str, set[int]] | None = None
    if request["topics"] is not None:
        wanted = defaultdict(set)
        for t in request["topics"]:
            wanted[t["topic"]].update(t["partitions"])
    results: list[DescribeLogDirsResponseResult] = []
    manager = ctx.broker.logs
    online = manager.logs_by_dir()
    futures = manager.futures()
    for log_dir in manager.log_dirs:
        if log_dir not in online:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR,
                            "log_dir": os.path.abspath(log_dir), "topics": [],
                            "total_bytes": -1, "usable_bytes": -1})
            continue
        here = [(key, plog, False) for key, plog in online[log_dir]] + [
            (key, future, True) for key, future in futures if log_dir_of(future) == log_dir]
        by_topic: dict[str, list[DescribeLogDirsResponsePartition]] = defaultdict(list)
        for (topic, index), plog, is_future in sorted(here, key=lambda item: item[0]):
            if wanted is not None and index not in wanted.get(topic, ()):
                continue
            # the lag behind the high watermark, or a future log's behind the current log
            current = manager.get(topic, index) if is_future else None
            ahead = current.log_end_offset if current is not None else plog.high_watermark
            by_topic[topic].append({
                "partition_index": index, "partition_size": plog.size(),
                "offset_lag": max(ahead - plog.log_end_offset, 0),
                "is_future_key": is_future})
        total, usable = _volume_bytes(log_dir)
        results.append({
            "error_code": ErrorCode.NONE, "log_dir": os.path.abspath(log_dir),
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
            "total_bytes": total, "usable_bytes": usable})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
