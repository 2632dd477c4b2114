"""DeleteRecords (key 21): move a partition's log start offset forward.

Per partition, as Kafka's ``Partition.deleteRecordsOnLeader``: offset -1 means the high
watermark; an offset below 0 or above the high watermark is OFFSET_OUT_OF_RANGE; one at or
below the current log start changes nothing. The answer's ``low_watermark`` is the log
start offset afterwards (-1 with an error). A topic whose ``cleanup.policy`` lacks
``delete`` gets POLICY_VIOLATION; an unknown topic or partition
UNKNOWN_TOPIC_OR_PARTITION. Segments wholly below the new start are deleted by the log;
reads below it get OFFSET_OUT_OF_RANGE from then on.
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from pybroker.net.protocol.typed import (
    DeleteRecordsRequest,
    DeleteRecordsRequestPartition,
    DeleteRecordsResponse,
    DeleteRecordsResponsePartitionResult,
    DeleteRecordsResponseTopicResult,
)
from pybroker.security.acl import AclOperation, ResourceType

HIGH_WATERMARK = -1


def _delete_before(ctx: RequestContext, topic: str, index: int, offset: int) -> int:
    ctx.require(AclOperation.DELETE, ResourceType.TOPIC, topic)
    partition = ctx.broker.topics.led_partition(topic, index)
    if not partition.config.deletes:
        raise KafkaError(f"Records of partition {topic}-{index} can not be deleted due to "
                         "the configured policy", ErrorCode.POLICY_VIOLATION)
    plog = partition.log
    high = plog.high_watermark
    target = high if offset == HIGH_WATERMARK else offset
    if target < 0 or target > high:
        raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {offset} of "
                                    f"partition {topic}-{index} since it is larger than the "
                                    f"high watermark {high}")
    if target > plog.log_start_offset:
        plog.delete_records_before(target)
    return plog.log_start_offset


def _partition_result(ctx: RequestContext, topic: str,
                      item: DeleteRecordsRequestPartition) -> DeleteRecordsResponsePartitionResult:
    index = item.get("partition_index", -1)
    try:
        low = _delete_before(ctx, topic, index, item.get("offset", HIGH_WATERMARK))
    except KafkaError as exc:
        return {"partition_index": index, "low_watermark": -1, "error_code": int(exc.code)}
    return {"partition_index": index, "low_watermark": low, "error_code": ErrorCode.NONE}


@handler(api_key=21, versions=(0, 2))
async def delete_records(ctx: RequestContext,
                         request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics: list[DeleteRecordsResponseTopicResult] = [
        {"name": t["name"], "partitions": [_partition_result(ctx, t["name"], p)
                                           for p in t.get("partitions") or []]}
        for t in request.get("topics") or []]
    return {"throttle_time_ms": 0, "topics": topics}
