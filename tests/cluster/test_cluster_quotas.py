"""Client quotas in a cluster, as Kafka's ZooKeeper mode keeps them: set through one
broker into ``/config/clients/<id>`` (Kafka's JSON, announced in ``/config/changes``),
described and enforced by every broker, removed through another, loaded by a broker that
restarts."""

from __future__ import annotations

import json

from tests.admin.clients import unique
from tests.cluster.harness import LocalCluster, produce_body, produce_error

PRODUCE, DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 0, 48, 49
CLIENT = "cluster-harness"  # the harness connections' client id


def _alter(cluster: LocalCluster, via: int, quotas: dict[str, float | None]) -> int:
    answer = cluster.request(via, ALTER_CLIENT_QUOTAS, 1, {"entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": CLIENT}],
        "ops": [{"key": k, "value": v or 0.0, "remove": v is None}
                for k, v in quotas.items()]}], "validate_only": False})
    (entry,) = answer["entries"]
    return int(entry["error_code"])


def _described(cluster: LocalCluster, broker_id: int) -> dict[str, float]:
    answer = cluster.request(broker_id, DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
        {"entity_type": "client-id", "match_type": 0, "match": CLIENT}], "strict": True})
    return {v["key"]: v["value"] for entry in answer["entries"] for v in entry["values"]}


def test_a_quota_set_through_one_broker_is_enforced_by_another(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, size=2) as cluster:
        topic = unique("quota-led-by-2")
        cluster.create_topic(topic, assignment=[[2]])
        assert _alter(cluster, 1, {"producer_byte_rate": 1000}) == 0
        stored = cluster.zk_get(f"/config/clients/{CLIENT}")
        assert stored is not None
        assert json.loads(stored[0]) == {"version": 1,
                                         "config": {"producer_byte_rate": "1000"}}
        assert cluster.wait_for(lambda: _described(cluster, 2) == {"producer_byte_rate": 1000.0},
                                what="the quota described by broker 2")

        answer = cluster.request(2, PRODUCE, 9, produce_body(topic, 0, b"x" * 50_000))
        assert produce_error(answer) == 0
        assert answer["throttle_time_ms"] == 1000  # far over: one window, Kafka's bound

        # a quota of any value Kafka takes is stored as text Kafka reads
        assert _alter(cluster, 1, {"request_percentage": float("inf")}) == 0
        assert cluster.wait_for(lambda: _described(cluster, 2).get("request_percentage")
                                == float("inf"), what="the infinite quota on broker 2")

        cluster.restart(2)
        assert _described(cluster, 2) == {"producer_byte_rate": 1000.0,
                                          "request_percentage": float("inf")}
        assert _alter(cluster, 2, {"producer_byte_rate": None,
                                   "request_percentage": None}) == 0
        assert cluster.wait_for(lambda: _described(cluster, 1) == {},
                                what="the removal seen by broker 1")
