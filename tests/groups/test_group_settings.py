"""Group and offsets broker settings from every config source, against real brokers."""

from __future__ import annotations

from typing import Any

from pybroker.config import BrokerConfig
from pybroker.coordinator import CoordinatorConfig
from pybroker.coordinator.consumer_protocol import encode_subscription
from pybroker.errors import ErrorCode
from tests.conftest import BrokerProcess
from tests.groups.helpers import WireConnection, wait_until

JOIN = 11


def join_body(group: str, session_timeout_ms: int, member_id: str = "") -> dict:
    return {"group_id": group, "session_timeout_ms": session_timeout_ms,
            "rebalance_timeout_ms": 10000, "member_id": member_id, "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": encode_subscription(["t"])}]}


def test_group_settings_are_known_with_kafka_defaults() -> None:
    config = BrokerConfig.load(environ={})
    assert config["offsets.topic.num.partitions"] == 50
    assert config["offsets.retention.minutes"] == 7 * 24 * 60
    assert config["group.max.size"] == 2**31 - 1
    # the broker defaults are exactly what the coordinator uses when nothing is set
    assert CoordinatorConfig.from_config(config) == CoordinatorConfig()
    config = BrokerConfig.load(environ={"PYBROKER_OFFSETS_RETENTION_MINUTES": "5",
                                        "PYBROKER_GROUP_MAX_SIZE": "3"})
    assert not config.extra
    coordinator = CoordinatorConfig.from_config(config)
    assert coordinator.offsets_retention_ms == 300_000 and coordinator.max_group_size == 3


def test_group_settings_from_a_file_and_the_environment(tmp_path: Any) -> None:
    path = tmp_path / "broker.properties"
    path.write_text("group.max.session.timeout.ms=20000\n")
    broker = BrokerProcess(str(tmp_path / "data"), log_path=str(tmp_path / "broker.log"),
                           extra_args=["--config", str(path)],
                           env={"PYBROKER_GROUP_MIN_SESSION_TIMEOUT_MS": "8000"})
    broker.start()
    try:
        host, port = broker.bootstrap.split(":")
        with WireConnection(host, int(port)) as conn:
            too_short = conn.request(JOIN, 5, join_body("settings", 7000))
            assert too_short["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
            too_long = conn.request(JOIN, 5, join_body("settings", 30000))
            assert too_long["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
            allowed = conn.request(JOIN, 5, join_body("settings", 10000))
            assert allowed["error_code"] == ErrorCode.MEMBER_ID_REQUIRED  # i.e. accepted
    finally:
        assert broker.stop() == 0
    assert "ignoring unknown config" not in broker.log_text()


def test_sigterm_answers_parked_and_queued_joins_before_the_drain(broker_factory: Any) -> None:
    """A consumer mid-rebalance does not hold shutdown up: the join parked in the
    coordinator and the one queued behind it on the same connection are both answered
    NOT_COORDINATOR at once, so the drain never waits out its 10 s limit."""
    broker = broker_factory()
    host, port = broker.bootstrap.split(":")
    with WireConnection(host, int(port)) as first, WireConnection(host, int(port)) as late:
        member = first.request(JOIN, 5, join_body("stopping", 10000))["member_id"]
        assert first.request(JOIN, 5, join_body("stopping", 10000, member))["error_code"] == 0
        # a second member: its join parks until the first rejoins, which never happens
        pending = late.request(JOIN, 5, join_body("stopping", 10000))["member_id"]
        late.send(JOIN, 5, join_body("stopping", 10000, pending))
        late.send(JOIN, 5, join_body("stopping", 10000, pending))  # queued behind it

        def preparing() -> bool:
            described = first.request(15, 5, {"groups": ["stopping"]})["groups"][0]
            return bool(described["group_state"] == "PreparingRebalance")
        wait_until(preparing, what="the rebalance to start")
        assert broker.stop() == 0
        assert late.receive()[1]["error_code"] == ErrorCode.NOT_COORDINATOR
        assert late.receive()[1]["error_code"] == ErrorCode.NOT_COORDINATOR
    text = broker.log_text()
    assert "still busy at shutdown" not in text, text[-2000:]


def join_one_after_the_other(broker: BrokerProcess, group: str) -> list[dict]:
    """Two members of a new group: the second asks to join after the first has joined."""
    host, port = broker.bootstrap.split(":")
    with WireConnection(host, int(port)) as first, WireConnection(host, int(port)) as second:
        for conn in (first, second):
            member = conn.request(JOIN, 5, join_body(group, 10000))["member_id"]
            conn.send(JOIN, 5, join_body(group, 10000, member))
        return [conn.receive()[1] for conn in (first, second)]


def test_default_initial_delay_gathers_early_joiners_into_one_generation(
        broker_factory: Any) -> None:
    """Kafka's default 3000 ms: a new group waits for more members before its first
    rebalance, so two consumers starting together share generation 1."""
    broker = broker_factory(group_initial_rebalance_delay_ms=None)  # the broker's default
    joined = join_one_after_the_other(broker, "gathered")
    assert [j["error_code"] for j in joined] == [0, 0]
    assert [j["generation_id"] for j in joined] == [1, 1]
    leader = next(j for j in joined if j["member_id"] == j["leader"])
    assert sorted(m["member_id"] for m in leader["members"]) == \
        sorted(j["member_id"] for j in joined)
    assert "group.initial.rebalance.delay.ms" not in broker.log_text()


def test_zero_initial_delay_answers_the_first_member_alone(broker_factory: Any) -> None:
    """With 0 the first member gets generation 1 at once; the second starts generation 2,
    which the first (never rejoining here) is left out of at the rebalance timeout."""
    broker = broker_factory(group_initial_rebalance_delay_ms=0)
    first, second = join_one_after_the_other(broker, "alone")
    assert (first["error_code"], first["generation_id"]) == (0, 1)
    assert (second["error_code"], second["generation_id"]) == (0, 2)
    assert [m["member_id"] for m in second["members"]] == [second["member_id"]]
