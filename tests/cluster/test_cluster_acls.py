"""ACLs in a cluster: kept in ZooKeeper as Kafka's ZooKeeper mode kept them, a change
made through one broker enforced by every broker, still there after a restart, and the
brokers' own requests authorized as a client's."""

from __future__ import annotations

import json

from pybroker.errors import ErrorCode
from tests.admin.clients import consume, produce
from tests.cluster.harness import LocalCluster

CREATE_ACLS, DELETE_ACLS = 30, 31
ANON = "User:ANONYMOUS"
TOPIC, CLUSTER, LITERAL, PREFIXED = 2, 4, 3, 4
DESCRIBE, ALL, DENY, ALLOW = 8, 2, 2, 3


def _acl(resource_type: int, name: str, pattern: int, operation: int, permission: int) -> dict:
    return {"resource_type": resource_type, "resource_name": name,
            "resource_pattern_type": pattern, "principal": ANON, "host": "*",
            "operation": operation, "permission_type": permission}


def _topic_error(cluster: LocalCluster, broker_id: int, topic: str) -> int:
    return cluster.metadata([topic], broker_id)["topics"][0]["error_code"]


def test_an_acl_made_on_one_broker_holds_on_every_broker(zk_connect, tmp_path):
    # No ACL at all at first: everybody may, so the client can create its own.
    settings = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "allow.everyone.if.no.acl.found": "true"}
    with LocalCluster(zk_connect, tmp_path, size=2, settings=settings) as cluster:
        assert _topic_error(cluster, 2, "hidden-1") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        created = cluster.request(1, CREATE_ACLS, 3, {"creations": [
            _acl(CLUSTER, "kafka-cluster", LITERAL, ALL, ALLOW),
            _acl(TOPIC, "hidden-", PREFIXED, DESCRIBE, DENY)]})
        assert [r["error_code"] for r in created["results"]] == [0, 0]
        # the brokers' own requests (replica fetches) are the client's principal's too:
        # with CLUSTER_ACTION (in ALL) replication goes on, acks=all answered
        cluster.create_topic("data", replication_factor=2)
        produce(cluster.bootstrap, "data", [b"v%d" % i for i in range(10)], acks="all")
        assert [m.value() for m in consume(cluster.bootstrap, "data")] == \
            [b"v%d" % i for i in range(10)]

        cluster.wait_for(lambda: _topic_error(cluster, 2, "hidden-1")
                         == ErrorCode.TOPIC_AUTHORIZATION_FAILED, 30,
                         what="broker 2 enforcing broker 1's ACL")
        data, _ = cluster.zk_get("/kafka-acl-extended/prefixed/Topic/hidden-")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": ANON, "permissionType": "Deny", "operation": "Describe",
             "host": "*"}]}
        assert cluster.zk_get("/kafka-acl/Cluster/kafka-cluster") is not None

        cluster.restart(2)  # loaded from ZooKeeper
        assert _topic_error(cluster, 2, "hidden-1") == ErrorCode.TOPIC_AUTHORIZATION_FAILED

        deleted = cluster.request(2, DELETE_ACLS, 3, {"filters": [{
            "resource_type_filter": TOPIC, "resource_name_filter": "hidden-",
            "pattern_type_filter": PREFIXED, "principal_filter": None, "host_filter": None,
            "operation": DESCRIBE, "permission_type": DENY}]})
        assert len(deleted["filter_results"][0]["matching_acls"]) == 1
        cluster.wait_for(lambda: _topic_error(cluster, 1, "hidden-1")
                         == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 30,
                         what="broker 1 seeing broker 2's deletion")
        assert cluster.zk_get("/kafka-acl-extended/prefixed/Topic/hidden-") is None
