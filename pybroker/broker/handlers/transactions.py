"""The transaction coordinator's APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26), DescribeTransactions (65), ListTransactions (66). The semantics live in the
coordinator (``ctx.broker.txn_coordinator``, pybroker/txn/coordinator.py); here requests
are unpacked and answers shaped per version. InitProducerId is init_producer_id.py, the
group offsets of a transaction (TxnOffsetCommit) groups' business, the markers' partition
side (WriteTxnMarkers) the partitions'.

Clients of transaction version 1 use AddPartitionsToTxn v0-3 (one transaction); v4+
batches transactions and carries ``verify_only``, the question a partition leader asks
before it writes a transactional batch (KIP-890 part 1).
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.coordinator.offset_store import OFFSETS_TOPIC
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponseResult,
    AddPartitionsToTxnResponseTopicResult,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseTransactionState,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from pybroker.txn.state import TopicPartition, TxnState, partitions_by_topic

PRODUCER_FENCED_FIRST_VERSION = 2  # of AddPartitions/AddOffsets/EndTxn (KIP-588)
BATCHED_FIRST_VERSION = 4

_STATES_BY_NAME = {state.kafka_name: state for state in TxnState}


def _fenced_as(error: ErrorCode, version: int) -> ErrorCode:
    """PRODUCER_FENCED as a client of ``version`` knows it."""
    if error == ErrorCode.PRODUCER_FENCED and version < PRODUCER_FENCED_FIRST_VERSION:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _partitions(topics: list[AddPartitionsToTxnRequestTopic]) -> list[TopicPartition]:
    return [(t["name"], p) for t in topics for p in t["partitions"]]


def _by_topic(errors: dict[TopicPartition, ErrorCode]
              ) -> list[AddPartitionsToTxnResponseTopicResult]:
    return [{"name": topic, "results_by_partition": [
        {"partition_index": p, "partition_error_code": errors[(topic, p)]} for p in indexes]}
        for topic, indexes in partitions_by_topic(errors).items()]


def _refused(ctx: RequestContext, transactional_id: str, wanted: list[TopicPartition]
             ) -> dict[TopicPartition, ErrorCode] | None:
    """ACLs, as Kafka: WRITE on the transactional id and on every topic added, or each
    partition's error (the allowed ones' OPERATION_NOT_ATTEMPTED); None when allowed."""
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    topics = {topic for topic, _ in wanted}
    allowed = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, topics)
    if allowed == topics:
        return None
    return {tp: ErrorCode.OPERATION_NOT_ATTEMPTED if tp[0] in allowed
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in wanted}


@handler(api_key=24, versions=(0, 5))
async def add_partitions_to_txn(ctx: RequestContext, request: AddPartitionsToTxnRequest
                                ) -> AddPartitionsToTxnResponse:
    coordinator = ctx.broker.txn_coordinator
    version = ctx.api_version
    if version < BATCHED_FIRST_VERSION:
        transactional_id = request["v3_and_below_transactional_id"]
        wanted = _partitions(request["v3_and_below_topics"])
        errors = _refused(ctx, transactional_id, wanted) or await coordinator.add_partitions(
            transactional_id, request["v3_and_below_producer_id"],
            request["v3_and_below_producer_epoch"], wanted)
        errors = {tp: _fenced_as(e, version) for tp, e in errors.items()}
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _by_topic(errors)}
    ctx.require(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)  # brokers'
    results: list[AddPartitionsToTxnResponseResult] = []
    for txn in request["transactions"]:
        wanted = _partitions(txn["topics"])
        refused = _refused(ctx, txn["transactional_id"], wanted)
        if refused is not None:
            errors = refused
        elif txn["verify_only"]:
            errors = coordinator.verify_partitions(
                txn["transactional_id"], txn["producer_id"], txn["producer_epoch"], wanted)
        else:
            errors = await coordinator.add_partitions(
                txn["transactional_id"], txn["producer_id"], txn["producer_epoch"], wanted)
        results.append({"transactional_id": txn["transactional_id"],
                        "topic_results": _by_topic(errors)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "results_by_transaction": results}


@handler(api_key=25, versions=(0, 4))
async def add_offsets_to_txn(ctx: RequestContext, request: AddOffsetsToTxnRequest
                             ) -> AddOffsetsToTxnResponse:
    ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request["transactional_id"])
    ctx.require(AclOperation.READ, ResourceType.GROUP, request["group_id"])
    offsets_partition = (OFFSETS_TOPIC,
                         ctx.broker.group_coordinator.partition_for(request["group_id"]))
    error = await ctx.broker.txn_coordinator.add_offsets(
        request["transactional_id"], request["producer_id"], request["producer_epoch"],
        offsets_partition)
    return {"throttle_time_ms": 0, "error_code": _fenced_as(error, ctx.api_version)}


@handler(api_key=26, versions=(0, 4))
async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    ctx.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request["transactional_id"])
    error = await ctx.broker.txn_coordinator.end_transaction(
        request["transactional_id"], request["producer_id"], request["producer_epoch"],
        request["committed"])
    return {"throttle_time_ms": 0, "error_code": _fenced_as(error, ctx.api_version)}


@handler(api_key=65, versions=(0, 0))
async def describe_transactions(ctx: RequestContext, request: DescribeTransactionsRequest
                                ) -> DescribeTransactionsResponse:
    states: list[DescribeTransactionsResponseTransactionState] = []
    for transactional_id in request["transactional_ids"]:
        txn = ctx.broker.txn_coordinator.describe(transactional_id) if ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id) \
            else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if isinstance(txn, ErrorCode):
            states.append({"error_code": txn, "transactional_id": transactional_id,
                           "transaction_state": "", "transaction_timeout_ms": 0,
                           "transaction_start_time_ms": -1, "producer_id": -1,
                           "producer_epoch": -1, "topics": []})
            continue
        states.append({
            "error_code": ErrorCode.NONE, "transactional_id": transactional_id,
            "transaction_state": txn.state.kafka_name,
            "transaction_timeout_ms": txn.timeout_ms,
            "transaction_start_time_ms": txn.start_ms, "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "topics": [{"topic": t, "partitions": ps}
                       for t, ps in partitions_by_topic(txn.partitions).items()]})
    return {"throttle_time_ms": 0, "transaction_states": states}


@handler(api_key=66, versions=(0, 1))
async def list_transactions(ctx: RequestContext, request: ListTransactionsRequest
                            ) -> ListTransactionsResponse:
    coordinator = ctx.broker.txn_coordinator
    names = request["state_filters"]
    unknown = [name for name in names if name not in _STATES_BY_NAME]
    states = {_STATES_BY_NAME[name] for name in names if name in _STATES_BY_NAME}
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if coordinator.loading() else ErrorCode.NONE
    listed = [] if unknown and not states else coordinator.list(
        states, set(request["producer_id_filters"]), request.get("duration_filter", -1))
    visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                             [t.transactional_id for t in listed])
    listed = [t for t in listed if t.transactional_id in visible]
    return {"throttle_time_ms": 0, "error_code": error, "unknown_state_filters": unknown,
            "transaction_states": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                 "transaction_state": t.state.kafka_name} for t in listed]}
