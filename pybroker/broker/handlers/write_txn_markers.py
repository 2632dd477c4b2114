"""WriteTxnMarkers (key 27) v0-1: a transaction coordinator (this broker's or another's)
has this broker write commit or abort markers to partitions it leads.

Each marker of the request is written by ``pybroker.txn.markers.append_markers``, the one
local marker append the coordinator's ``MarkerWriter`` uses too, all markers at once; each
partition is answered once its marker is replicated, or with why not
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH,
TRANSACTION_COORDINATOR_FENCED, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestWritableTxnMarker,
    WriteTxnMarkersResponse,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from pybroker.txn.markers import TxnMarker, append_markers


@handler(api_key=27, versions=(0, 1))
async def write_txn_markers(ctx: RequestContext,
                            request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    markers = request["markers"]
    ctx.quota_exempt = True  # the coordinator's, as Kafka exempts it
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        written = [{(t["name"], p): ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    for t in m["topics"] for p in t["partition_indexes"]} for m in markers]
        return _answer(markers, written)
    written = await asyncio.gather(*(append_markers(ctx.broker, TxnMarker(
        m["producer_id"], m["producer_epoch"], m["transaction_result"],
        m["coordinator_epoch"],
        frozenset((t["name"], p) for t in m["topics"] for p in t["partition_indexes"])))
        for m in markers))
    return _answer(markers, written)


def _answer(markers: list[WriteTxnMarkersRequestWritableTxnMarker],
            written: Sequence[dict[tuple[str, int], ErrorCode]]) -> WriteTxnMarkersResponse:
    return {"markers": [{"producer_id": m["producer_id"], "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p, "error_code": codes[(t["name"], p)]}
            for p in t["partition_indexes"]]}
        for t in m["topics"]]}
        for m, codes in zip(markers, written, strict=True)]}
