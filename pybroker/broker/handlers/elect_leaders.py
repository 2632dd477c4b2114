"""ElectLeaders (key 43), v0-v2: move partitions' leadership to their preferred replica
(election type 0; v0 knows no other) or, for partitions without a live leader, to a
replica outside the ISR (type 1, unclean). The metadata plane elects
(``Metadata.elect_leaders``: in a cluster, the controller, whichever broker is asked).

Answers, as Kafka 4.1's:
- each partition named gets its result, in the request's order (a partition named twice,
  twice): NONE, ELECTION_NOT_NEEDED (the preferred replica leads already; unclean: a live
  replica leads), PREFERRED_LEADER_NOT_AVAILABLE (it is not live or not in the ISR),
  ELIGIBLE_LEADERS_NOT_AVAILABLE (no live replica), UNKNOWN_TOPIC_OR_PARTITION, or
  REQUEST_TIMED_OUT (elected, but this broker's metadata did not show it in time);
- a null list means every partition: every topic is answered, with only the partitions
  whose result is not ELECTION_NOT_NEEDED;
- without ALTER on the cluster: CLUSTER_AUTHORIZATION_FAILED for every partition named
  and, from v1, as the top-level error code; an unknown election type is INVALID_REQUEST
  the same way, and so is REQUEST_TIMED_OUT when no controller answered in time.
"""

from __future__ import annotations

from collections import defaultdict

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, KafkaError
from pybroker.metadata.interface import (
    PREFERRED_ELECTION,
    UNCLEAN_ELECTION,
    ElectionResult,
)
from pybroker.net.protocol.typed import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResponsePartitionResult,
    ElectLeadersResponseReplicaElectionResult,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

UNAUTHORIZED = ElectionResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              "Cluster authorization failed.")


@handler(api_key=43, versions=(0, 2))
async def elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    election_type = request.get("election_type", PREFERRED_ELECTION)
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _refused(request, UNAUTHORIZED)
    if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
        return _refused(request, ElectionResult(
            ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}"))
    named = request["topic_partitions"]
    wanted = None if named is None else [(t["topic"], p) for t in named for p in t["partitions"]]
    try:
        results = await ctx.broker.metadata.elect_leaders(
            election_type, wanted, request.get("timeout_ms", 60000) / 1000)
    except KafkaError as exc:  # no controller answered
        return _refused(request, ElectionResult(exc.code, str(exc)))
    if named is None:  # every topic, without the partitions that needed no election
        by_topic: dict[str, list[ElectLeadersResponsePartitionResult]] = defaultdict(list)
        for (name, index), result in results.items():
            found = by_topic[name]
            if result.code != ErrorCode.ELECTION_NOT_NEEDED:
                found.append(_partition(index, result))
        return _response(ErrorCode.NONE, [{"topic": name, "partition_result": found}
                                          for name, found in by_topic.items()])
    return _response(ErrorCode.NONE, [
        {"topic": t["topic"],
         "partition_result": [_partition(p, results[(t["topic"], p)]) for p in t["partitions"]]}
        for t in named])


def _refused(request: ElectLeadersRequest, why: ElectionResult) -> ElectLeadersResponse:
    """The whole request refused: ``why`` for every partition named, and (v1+) on top."""
    return _response(why.code, [
        {"topic": t["topic"], "partition_result": [_partition(p, why) for p in t["partitions"]]}
        for t in request["topic_partitions"] or []])


def _partition(index: int, result: ElectionResult) -> ElectLeadersResponsePartitionResult:
    return {"partition_id": index, "error_code": result.code, "error_message": result.message}


def _response(code: int, results: list[ElectLeadersResponseReplicaElectionResult]
              ) -> ElectLeadersResponse:
    return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": results}
