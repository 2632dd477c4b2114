"""SCRAM credentials in a cluster: kept in ZooKeeper's ``/config/users/<user>`` as Kafka's
ZooKeeper mode kept them, a change made through one broker seen by every broker, and a
user's other config keys (client quotas) kept by every change."""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from pybroker.security.scram import SCRAM_SHA_256, salted_password
from tests.cluster.harness import INTER_BROKER_USER, LocalCluster

ALTER, DESCRIBE = 51, 50
ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS = 49, 48
SALT = b"saltsalt"


def _upsert(name: str, mechanism: int = 1) -> dict:
    return {"name": name, "mechanism": mechanism, "iterations": 4096, "salt": SALT,
            "salted_password": salted_password(SCRAM_SHA_256, "pw", SALT, 4096)}


def _described(cluster: LocalCluster, broker_id: int) -> dict:
    """Every user's credentials but the brokers' own (a secured cluster's)."""
    answer = cluster.request(broker_id, DESCRIBE, 0, {"users": None})
    return {r["user"]: [(i["mechanism"], i["iterations"]) for i in r["credential_infos"]]
            for r in answer["results"] if r["user"] != INTER_BROKER_USER}


def _set_quota(cluster: LocalCluster, broker_id: int, user: str, key: str, value: float
               ) -> None:
    answer = cluster.request(broker_id, ALTER_CLIENT_QUOTAS, 1, {"validate_only": False,
                             "entries": [{"entity": [{"entity_type": "user",
                                                      "entity_name": user}],
                                          "ops": [{"key": key, "value": value,
                                                   "remove": False}]}]})
    assert [e["error_code"] for e in answer["entries"]] == [0]


def test_credentials_made_on_one_broker_seen_by_all(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, size=2) as cluster:
        zk = KazooClient(hosts=cluster.zookeeper)
        zk.start(timeout=30)
        try:
            # a client quota of alice's, as Kafka's ZooKeeper mode keeps it
            zk.create("/config/users/alice", json.dumps(
                {"version": 1, "config": {"producer_byte_rate": "1024"}}).encode(),
                makepath=True)
            altered = cluster.request(1, ALTER, 0, {"deletions": [], "upsertions": [
                _upsert("alice"), _upsert("alice", 2), _upsert("b*~b")]})
            assert [r["error_code"] for r in altered["results"]] == [0, 0]
            cluster.wait_for(lambda: _described(cluster, 2) == {
                "alice": [(1, 4096), (2, 4096)], "b*~b": [(1, 4096)]},
                30, what="broker 2 seeing the credentials")
            data, _ = zk.get("/config/users/alice")
            config = json.loads(data)["config"]
            assert config["producer_byte_rate"] == "1024"
            assert config[SCRAM_SHA_256].startswith("salt=c2FsdHNhbHQ=,stored_key=")
            assert config[SCRAM_SHA_256].endswith(",iterations=4096")
            assert zk.exists("/config/users/b%2A%7Eb") is not None  # Kafka's Sanitizer
            # a quota of the same user lands in the same znode, sanitized the same way
            _set_quota(cluster, 1, "b*~b", "consumer_byte_rate", 4096.0)
            config = json.loads(zk.get("/config/users/b%2A%7Eb")[0])["config"]
            assert config["consumer_byte_rate"] == "4096" and SCRAM_SHA_256 in config
            # a quota change through another broker keeps the credentials, and the
            # credentials are not taken for quotas
            _set_quota(cluster, 2, "alice", "producer_byte_rate", 2048.0)
            config = json.loads(zk.get("/config/users/alice")[0])["config"]
            assert config["producer_byte_rate"] == "2048" and SCRAM_SHA_256 in config
            described = cluster.request(1, DESCRIBE_CLIENT_QUOTAS, 1, {"strict": True,
                                        "components": [{"entity_type": "user",
                                                        "match_type": 0, "match": "alice"}]})
            assert [v["key"] for e in described["entries"] for v in e["values"]] == [
                "producer_byte_rate"]
            assert _described(cluster, 1)["alice"] == [(1, 4096), (2, 4096)]
            changes = [json.loads(zk.get(f"/config/changes/{c}")[0])
                       for c in zk.get_children("/config/changes")]
            assert {"version": 2, "entity_path": "users/alice"} in changes

            deleted = cluster.request(2, ALTER, 0, {"upsertions": [], "deletions": [
                {"name": "alice", "mechanism": 1}, {"name": "alice", "mechanism": 2},
                {"name": "b*~b", "mechanism": 1}]})
            assert [r["error_code"] for r in deleted["results"]] == [0, 0]
            cluster.wait_for(lambda: "alice" not in _described(cluster, 1), 30,
                             what="broker 1 seeing alice's credentials deleted")
            # the quota stays; a znode left with nothing stays empty, as Kafka leaves it
            data, _ = zk.get("/config/users/alice")
            assert json.loads(data)["config"] == {"producer_byte_rate": "2048"}
            assert json.loads(zk.get("/config/users/b%2A%7Eb")[0])["config"] == {
                "consumer_byte_rate": "4096"}
            cluster.restart(1)
            assert _described(cluster, 1) == {}
        finally:
            zk.stop()
            zk.close()
