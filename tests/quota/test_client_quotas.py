"""AlterClientQuotas and DescribeClientQuotas as Kafka 4.1 answers them: Kafka's own
``kafka-configs.sh`` (its Java admin client) setting and describing quotas, exact
requests for each refusal (the answers recorded from Kafka 4.1), Kafka's precedence of
entities, throttle_time_ms in Produce and Fetch answers, quotas kept across a restart."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from pybroker._native.records import encode_batch
from pybroker.broker.quotas import ClientQuotas, entity_of
from pybroker.errors import ErrorCode
from tests.admin.clients import create_topic, unique
from tests.broker.prometheus import metrics_url, scrape
from tests.broker.wire_client import WireClient, fetch_body, produce_body
from tests.conftest import BrokerProcess
from tests.quota.quota_clients import ALTER_CLIENT_QUOTAS, alter, describe
from tests.security.test_acls_broker import acl_broker  # noqa: F401 (the fixture)

KAFKA_CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                             "reference", "kafka_2.13-4.1.0", "bin", "kafka-configs.sh")
PRODUCE, FETCH = 0, 1
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
INVALID_REQUEST = ErrorCode.INVALID_REQUEST


def _kafka_configs(bootstrap: str, *args: str) -> str:
    done = subprocess.run([KAFKA_CONFIGS, "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kafka_configs_tool_sets_and_describes_quotas(broker: BrokerProcess) -> None:
    _kafka_configs(broker.bootstrap, "--alter", "--entity-type", "users", "--entity-name",
                   "alice", "--entity-type", "clients", "--entity-default", "--add-config",
                   "producer_byte_rate=1024,request_percentage=12.5")
    out = _kafka_configs(broker.bootstrap, "--describe", "--entity-type", "users",
                         "--entity-name", "alice", "--entity-type", "clients")
    assert "Quota configs for user-principal 'alice', the default client-id are " \
           "producer_byte_rate=1024.0, request_percentage=12.5" in out
    assert describe(broker.bootstrap) == {
        (("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0,
                                                   "request_percentage": 12.5}}


# (entity, ops, the error Kafka 4.1 answers), each checked with validate_only
REFUSED: list[tuple[dict[str, str | None], dict[str, float | None], str]] = [
    ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
    ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
    ({"ip": "1.2.3.4", "user": "a"}, {"connection_creation_rate": 1},
     "Invalid quota entity combination, IP entity shouldnot be combined with User or "
     "ClientId"),
    ({"ip": "not an ip"}, {"connection_creation_rate": 1},
     "not an ip is not a valid IP or resolvable host."),
    ({"client-id": "X"}, {"connection_creation_rate": 1},
     "Invalid configuration key connection_creation_rate"),
    ({"ip": "1.2.3.4"}, {"producer_byte_rate": 1}, "Invalid configuration key producer_byte_rate"),
    ({"client-id": "X"}, {"foo": 1}, "Invalid configuration key foo"),
    ({"client-id": "X"}, {"producer_byte_rate": 1.5},
     "producer_byte_rate cannot be a fractional value."),
    ({"client-id": "X"}, {"producer_byte_rate": -5}, "Quota producer_byte_rate must be greater than 0"),
    ({"client-id": "X"}, {"request_percentage": -1}, "Quota request_percentage must be greater than 0"),
    ({"client-id": "X"}, {"producer_byte_rate": -1.5},
     "Quota producer_byte_rate must be greater than 0"),
    ({"client-id": "X"}, {"producer_byte_rate": float("-inf")},
     "Quota producer_byte_rate must be greater than 0"),
    ({"client-id": "X"}, {"producer_byte_rate": float("inf")},
     "Proposed value for producer_byte_rate is too large for a LONG."),
    # a deliberate difference: Kafka 4.1 takes NaN
    ({"client-id": "X"}, {"request_percentage": float("nan")},
     "Quota request_percentage must be greater than 0"),
    ({"client-id": "X"}, {"producer_byte_rate": 1e30},
     "Proposed value for producer_byte_rate is too large for a LONG."),
    ({"client-id": ""}, {"producer_byte_rate": 7}, "Empty client-id not supported"),
    ({"user": ""}, {"producer_byte_rate": 7}, "Empty user not supported"),
    ({"ip": "1.1.1.1"}, {"connection_creation_rate": 2.5},
     "connection_creation_rate cannot be a fractional value."),
]


@pytest.mark.parametrize(("entity", "ops", "message"), REFUSED)
def test_alter_refusals_as_kafka(module_broker: BrokerProcess, entity: Any, ops: Any,
                                 message: str) -> None:
    entry = alter(module_broker.bootstrap, entity, ops, validate_only=True)
    assert (entry["error_code"], entry["error_message"]) == (INVALID_REQUEST, message)


def test_an_entity_named_twice_is_refused_once(module_broker: BrokerProcess) -> None:
    entity = [{"entity_type": "user", "entity_name": "a"},
              {"entity_type": "client-id", "entity_name": "twice"}]
    ops = [{"key": "producer_byte_rate", "value": 7.0, "remove": False}]
    with WireClient(module_broker.bootstrap) as client:
        answer = client.request(ALTER_CLIENT_QUOTAS, 1, {"entries": [
            {"entity": entity, "ops": ops}, {"entity": entity[::-1], "ops": ops},
            {"entity": [{"entity_type": "client-id", "entity_name": "once"}], "ops": ops}],
            "validate_only": False})
    assert [(e["error_code"], e["error_message"], e["entity"]) for e in answer["entries"]] == [
        (INVALID_REQUEST,
         "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=twice, user=a})",
         [{"entity_type": "client-id", "entity_name": "twice"},
          {"entity_type": "user", "entity_name": "a"}]),
        (0, None, [{"entity_type": "client-id", "entity_name": "once"}])]
    found = describe(module_broker.bootstrap, [("client-id", SPECIFIED, None)])
    assert (("client-id", "once"),) in found
    assert (("client-id", "twice"), ("user", "a")) not in found


def test_describe_filters_as_kafka(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    for entity, ops in [({"client-id": "X"}, {"producer_byte_rate": 1024}),
                        ({"user": "alice", "client-id": None}, {"consumer_byte_rate": 2048}),
                        ({"user": "u"}, {"controller_mutation_rate": 7.5}),
                        ({"ip": "1.2.3.4"}, {"connection_creation_rate": 5}),
                        ({"client-id": None}, {"request_percentage": 50})]:
        assert alter(bootstrap, entity, ops)["error_code"] == 0
    x, alice = (("client-id", "X"),), (("client-id", None), ("user", "alice"))
    u, ip, default = (("user", "u"),), (("ip", "1.2.3.4"),), (("client-id", None),)
    assert set(describe(bootstrap)) == {x, alice, u, ip, default}
    assert set(describe(bootstrap, [("client-id", EXACT, "X")])) == {x}
    assert set(describe(bootstrap, [("client-id", DEFAULT, None)])) == {alice, default}
    assert set(describe(bootstrap, [("client-id", DEFAULT, None)], strict=True)) == {default}
    assert set(describe(bootstrap, [("client-id", SPECIFIED, None)])) == {x, alice, default}
    assert set(describe(bootstrap, [("user", SPECIFIED, None)], strict=True)) == {u}
    assert set(describe(bootstrap, [("user", DEFAULT, None)])) == set()
    assert describe(bootstrap, strict=True) == {}
    # removing every key removes the entity; removing what is not set is no error
    assert alter(bootstrap, {"client-id": "X"}, {"producer_byte_rate": None,
                                                 "consumer_byte_rate": None})["error_code"] == 0
    assert set(describe(bootstrap)) == {alice, u, ip, default}


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("client-id", EXACT, None)], INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("client-id", DEFAULT, "x")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("client-id", SPECIFIED, "x")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("client-id", 7, None)], INVALID_REQUEST, "Unknown match type 7"),
    ([("user", SPECIFIED, None), ("user", DEFAULT, None)], INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", SPECIFIED, None)], ErrorCode.UNSUPPORTED_VERSION,
     "Unsupported entity type group"),
    ([("ip", SPECIFIED, None), ("user", SPECIFIED, None)], INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be "
     "used with user or clientId filter component."),
])
def test_describe_refusals_as_kafka(module_broker: BrokerProcess, components: Any, code: int,
                                    message: str) -> None:
    with WireClient(module_broker.bootstrap) as client:
        answer = client.request(48, 1, {"components": [
            {"entity_type": t, "match_type": m, "match": s} for t, m, s in components],
            "strict": False})
    assert (answer["error_code"], answer["error_message"], answer["entries"]) == (
        code, message, None)


def test_precedence_is_kafkas() -> None:
    """Each of Kafka's eight levels wins over the ones after it; the rate is shared by
    the components the winning entity names."""
    quotas = ClientQuotas()
    levels = [
        ({"user": "alice", "client-id": "app"}, ("alice", "app")),
        ({"user": "alice", "client-id": None}, ("alice", "app")),
        ({"user": "alice"}, ("alice", "")),
        ({"user": None, "client-id": "app"}, ("alice", "app")),
        ({"user": None, "client-id": None}, ("alice", "app")),
        ({"user": None}, ("alice", "")),
        ({"client-id": "app"}, ("", "app")),
        ({"client-id": None}, ("", "app")),
    ]
    for rate, (entity, _) in enumerate(levels, 1):
        quotas.set(entity_of(entity.items()), {"producer_byte_rate": float(rate)})
    for rate, (entity, metric) in enumerate(levels, 1):
        assert quotas.resolve("producer_byte_rate", "alice", "app") == (float(rate), metric)
        assert quotas.resolve("consumer_byte_rate", "alice", "app") is None
        quotas.set(entity_of(entity.items()), {})
    assert quotas.resolve("producer_byte_rate", "alice", "app") is None
    assert not quotas.active


def test_throttle_time_in_produce_and_fetch_answers(broker_factory: Any) -> None:
    """A request far over its quota is throttled for Kafka's bound, one quota window
    (1 s); the throttled fetch is answered empty. WireClient's client id is "tests",
    its user ANONYMOUS. The metrics say so per entity."""
    broker = broker_factory(metrics_listener="127.0.0.1:0")
    topic = unique("throttled")
    create_topic(broker.bootstrap, topic)
    batch = encode_batch([b"x" * 50_000])
    with WireClient(broker.bootstrap) as client:
        answer = client.request(PRODUCE, 9, produce_body(topic, 0, batch))
        assert answer["throttle_time_ms"] == 0
        assert alter(broker.bootstrap, {"client-id": "tests"},
                     {"producer_byte_rate": 1000})["error_code"] == 0
        assert alter(broker.bootstrap, {"user": "ANONYMOUS"},
                     {"consumer_byte_rate": 1000})["error_code"] == 0
        answer = client.request(PRODUCE, 9, produce_body(topic, 0, batch))
        assert answer["throttle_time_ms"] == 1000
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        answer = client.request(FETCH, 12, fetch_body(topic, 0, 0))
        assert (answer["throttle_time_ms"], answer["responses"]) == (1000, [])
    with WireClient(broker.bootstrap) as client:  # the quota is the user's: shared
        answer = client.request(FETCH, 12, fetch_body(topic, 0, 0))
        assert (answer["throttle_time_ms"], answer["responses"]) == (1000, [])
    metrics = scrape(metrics_url(broker))
    producer = (("client_id", "tests"), ("user", ""))
    consumer = (("client_id", ""), ("user", "ANONYMOUS"))
    assert metrics[("kafka_server_produce_throttle_time_ms_total", producer)] == 1000
    assert metrics[("kafka_server_produce_byte_rate", producer)] > 1000
    assert metrics[("kafka_server_fetch_throttle_time_ms_total", consumer)] == 2000
    assert metrics[("kafka_server_fetch_byte_rate", consumer)] == 0  # answered empty


def test_quotas_survive_restart(broker: BrokerProcess) -> None:
    assert alter(broker.bootstrap, {"user": "bob", "client-id": "app"},
                 {"producer_byte_rate": 5000, "request_percentage": 25.5})["error_code"] == 0
    assert alter(broker.bootstrap, {"user": "carol"},  # Kafka takes an infinite one too
                 {"request_percentage": float("inf")})["error_code"] == 0
    assert alter(broker.bootstrap, {"ip": None}, {"connection_creation_rate": 10}
                 )["error_code"] == 0
    before = describe(broker.bootstrap)
    broker.restart()
    assert describe(broker.bootstrap) == before == {
        (("client-id", "app"), ("user", "bob")): {"producer_byte_rate": 5000.0,
                                                  "request_percentage": 25.5},
        (("ip", None),): {"connection_creation_rate": 10.0},
        (("user", "carol"),): {"request_percentage": float("inf")}}


def test_quotas_need_the_clusters_configs_acls(acl_broker: BrokerProcess) -> None:  # noqa: F811
    """Under ACLs that grant the cluster neither DESCRIBE_CONFIGS nor ALTER_CONFIGS
    (``test_acls_broker.GRANTS``), as Kafka checks them."""
    entry = alter(acl_broker.bootstrap, {"client-id": "x"}, {"producer_byte_rate": 100})
    assert entry["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with WireClient(acl_broker.bootstrap) as client:
        answer = client.request(48, 1, {"components": [], "strict": False})
    assert (answer["error_code"], answer["entries"]) == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)


def test_request_time_quota_throttles_every_api(broker: BrokerProcess) -> None:
    """A request_percentage far below what one request costs: the next answers report
    Kafka's bound (one window) where the API has the field; versions without it still
    answer."""
    assert alter(broker.bootstrap, {"client-id": "tests"},
                 {"request_percentage": 0.0001})["error_code"] == 0
    metadata = {"topics": [], "allow_auto_topic_creation": False}
    with WireClient(broker.bootstrap) as client:
        client.request(3, 12, metadata)  # counted: the one that takes it over
        assert client.request(3, 12, metadata)["throttle_time_ms"] == 1000
        assert client.request(3, 0, {"topics": []})["brokers"]
        assert client.request(18, 3, {"client_software_name": "t",
                                      "client_software_version": "1"}
                              )["throttle_time_ms"] == 1000
    assert describe(broker.bootstrap)[(("client-id", "tests"),)] == {
        "request_percentage": 0.0001}


def test_a_bad_stored_quota_is_dropped_with_a_warning(broker: BrokerProcess) -> None:
    broker.stop()
    with open(os.path.join(broker.data_dir, "client-quotas.json"), "w") as f:
        json.dump({"version": 1, "quotas": [
            {"entity": [["client-id", "ok"]], "values": {"producer_byte_rate": 100,
                                                        "consumer_byte_rate": -1}},
            {"entity": [["group", "g"]], "values": {"producer_byte_rate": 100}},
            {"entity": "garbage"}]}, f)
    broker.start()
    assert describe(broker.bootstrap) == {(("client-id", "ok"),): {"producer_byte_rate": 100.0}}
    log = broker.log_text()
    assert "ignoring the stored client quota consumer_byte_rate=-1" in log
    assert "ignoring a malformed entry of client-quotas.json" in log


def test_connection_creation_rate_closes_what_goes_over(broker: BrokerProcess) -> None:
    """1 connection a second from 127.0.0.1: Kafka's measure takes about ten at once (the
    window counts as ten seconds at first), then the next are held and closed unread;
    another address's quota does not apply."""
    assert alter(broker.bootstrap, {"ip": "10.1.2.3"}, {"connection_creation_rate": 1000}
                 )["error_code"] == 0
    assert alter(broker.bootstrap, {"ip": "127.0.0.1"}, {"connection_creation_rate": 1}
                 )["error_code"] == 0
    answered = closed = 0
    for _ in range(15):
        with WireClient(broker.bootstrap) as client:
            try:
                client.request(18, 3, {"client_software_name": "t",
                                       "client_software_version": "1"})
                answered += 1
            except ConnectionError:
                closed += 1
    assert answered >= 10 and closed >= 1, (answered, closed)
    assert "over its connection_creation_rate quota" in broker.log_text()


def test_broker_connection_creation_rate_pauses_accepting(broker_factory: Any) -> None:
    """Past max.connection.creation.rate the broker waits before accepting more, as
    Kafka's acceptor: every connection is answered, none refused. The limit leaves the
    inter-broker listener alone, as Kafka's, so the clients use another. The key is
    dynamic."""
    broker = broker_factory(
        quota_window_num=2, max_connection_creation_rate=2,
        listeners="PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        inter_broker_listener_name="INTERNAL")
    for _ in range(6):
        with WireClient(broker.bootstrap) as client:
            assert client.request(18, 3, {"client_software_name": "t",
                                          "client_software_version": "1"})["error_code"] == 0
    assert "max.connection.creation.rate reached: accepting again in" in broker.log_text()
    with WireClient(broker.bootstrap) as client:
        answer = client.request(44, 1, {"resources": [{
            "resource_type": 4, "resource_name": "", "configs": [
                {"name": "max.connection.creation.rate", "value": "1000",
                 "config_operation": 0}]}], "validate_only": False})
    assert answer["responses"][0]["error_code"] == 0



def test_one_quota_window_throttles_without_failing(broker_factory: Any) -> None:
    """quota.window.num=1 measures over the current sample alone, from its first value:
    as in Kafka the rate is then unbounded and the client throttled at once (the longest
    throttle), never an error."""
    broker = broker_factory(quota_window_num=1)
    topic = unique("one-window")
    create_topic(broker.bootstrap, topic)
    assert alter(broker.bootstrap, {"client-id": "tests"},
                 {"producer_byte_rate": 1_000_000})["error_code"] == 0
    with WireClient(broker.bootstrap) as client:
        answer = client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch([b"a"])))
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert answer["throttle_time_ms"] == 1000
