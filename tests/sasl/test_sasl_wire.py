"""The authenticator seen through exact requests (``WireClient``), with the answers Kafka
4.1 gives to the same requests: what is served before authentication, the v0 handshake's
raw tokens, refusals, re-authentication (KIP-368) and session expiry, and ACLs applied to
the authenticated principal."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Producer
from kafka.net.sasl.scram import ScramClient

from tests.admin.clients import admin, create_topic
from tests.broker.wire_client import WireClient
from tests.sasl.conftest import SaslBroker

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
NONE, TOPIC_AUTHORIZATION_FAILED = 0, 29
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
ENABLED = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
METADATA_ALL = {"topics": None, "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}
TIMEOUT = 30.0


def _plain(client: WireClient, user: str, password: str, version: int = 2) -> dict:
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}) == {
        "error_code": NONE, "mechanisms": ENABLED}
    return client.request(SASL_AUTHENTICATE, version,
                          {"auth_bytes": b"\0" + user.encode() + b"\0" + password.encode()})


def _scram(client: WireClient, user: str, password: str, mechanism: str = "SCRAM-SHA-256",
           version: int = 2) -> dict:
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == NONE
    scram = ScramClient(user, password, mechanism)
    first = client.request(SASL_AUTHENTICATE, version, {"auth_bytes": scram.first_message()})
    assert first["error_code"] == NONE, first
    scram.process_server_first_message(first["auth_bytes"])
    final = client.request(SASL_AUTHENTICATE, version, {"auth_bytes": scram.final_message()})
    if final["error_code"] == NONE:
        scram.process_server_final_message(final["auth_bytes"])
    return final


def test_before_authentication(module_sasl_broker: SaslBroker):
    broker = module_sasl_broker
    with WireClient(broker.sasl) as client:
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in client.request(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )["api_keys"]}
        # Kafka 4.1's served versions
        assert keys[SASL_HANDSHAKE] == (0, 1) and keys[SASL_AUTHENTICATE] == (0, 2)
        assert keys[50] == (0, 0) and keys[51] == (0, 0)
        client.send(METADATA, 12, METADATA_ALL)
        assert client.closed_by_peer()
    with WireClient(broker.sasl) as client:  # an authentication before its handshake
        client.send(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-secret"})
        assert client.closed_by_peer()
    # after the handshake, anything but SaslAuthenticate is answered ILLEGAL_SASL_STATE
    # where its response has an error code (Kafka's getErrorResponse), then closed
    with WireClient(broker.sasl) as client:
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        versions = client.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                    "client_software_version": "1"})
        assert (versions["error_code"], versions["api_keys"]) == (ILLEGAL_SASL_STATE, [])
        assert client.closed_by_peer()
    with WireClient(broker.sasl) as client:
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}) == {
            "error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
        assert client.closed_by_peer()
    with WireClient(broker.sasl) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}) == {
            "error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": ENABLED}
        assert client.closed_by_peer()
    log = broker.process.log_text()
    assert "unexpected Metadata request from client 'tests' during SASL authentication" in log
    assert "SASL mechanism 'GSSAPI' is not enabled on listener SASL_PLAINTEXT" in log


def test_large_frames_wait_for_authentication(module_sasl_broker: SaslBroker):
    """Until authenticated a client may send no frame over sasl.server.max.receive.size
    (Kafka's 512 KiB): it is closed at the size prefix; afterwards the listener takes
    socket.request.max.bytes as any other."""
    broker = module_sasl_broker
    with WireClient(broker.sasl) as client:
        client.raw(struct.pack(">i", 524288 + 1))
        assert client.closed_by_peer()
    assert "(sasl.server.max.receive.size), closing" in broker.process.log_text()
    with WireClient(broker.sasl) as client:
        assert _plain(client, "alice", "alice-secret")["error_code"] == NONE
        topics = {"topics": [{"name": f"t{i:06d}" + "x" * 200} for i in range(3000)],
                  "allow_auto_topic_creation": False,
                  "include_topic_authorized_operations": False}
        answer = client.request(METADATA, 12, topics)  # a frame of about 600 KiB
        assert len(answer["topics"]) == 3000


def test_plain_answers_as_kafka(module_sasl_broker: SaslBroker):
    broker = module_sasl_broker
    with WireClient(broker.sasl) as client:
        assert _plain(client, "alice", "wrong") == {
            "error_code": SASL_AUTHENTICATION_FAILED,
            "error_message": "Authentication failed: Invalid username or password",
            "auth_bytes": b"", "session_lifetime_ms": 0}
        assert client.closed_by_peer()
    with WireClient(broker.sasl) as client:
        assert _plain(client, "alice", "alice-secret") == {
            "error_code": NONE, "error_message": "", "auth_bytes": b"",
            "session_lifetime_ms": 0}
        # authenticated: a handshake is the broker's to answer, as Kafka's KafkaApis does
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}) == {
            "error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
        assert client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b""})["error_message"] == \
            "SaslAuthenticate request received after successful authentication"
        assert client.request(METADATA, 12, METADATA_ALL)["brokers"][0]["port"] == \
            broker.sasl_port


def test_scram_wrong_password_answer(module_sasl_broker: SaslBroker):
    with WireClient(module_sasl_broker.sasl) as client:
        answer = _scram(client, "alice", "wrong", "SCRAM-SHA-512")
        assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
        assert answer["error_message"] == ("Authentication failed during authentication due "
                                           "to invalid credentials with SASL mechanism "
                                           "SCRAM-SHA-512")
        assert client.closed_by_peer()


def test_v0_handshake_takes_raw_tokens(module_sasl_broker: SaslBroker):
    with WireClient(module_sasl_broker.sasl) as client:
        assert client.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == NONE
        token = b"\0alice\0alice-secret"
        client.raw(struct.pack(">i", len(token)) + token)
        assert client.read_frame() == b""  # PLAIN's empty answer, size-prefixed
        assert client.request(METADATA, 12, METADATA_ALL)["brokers"]
    with WireClient(module_sasl_broker.sasl) as client:
        client.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        token = b"\0alice\0wrong"
        client.raw(struct.pack(">i", len(token)) + token)
        assert client.closed_by_peer()


def test_reauthentication(sasl_broker_factory):
    broker = sasl_broker_factory(connections_max_reauth_ms=1500)
    broker.add_user("alice", "alice-secret")
    broker.add_user("bob", "bob-secret")
    with WireClient(broker.sasl) as client:
        first = _scram(client, "alice", "alice-secret")
        assert first["error_code"] == NONE and 0 < first["session_lifetime_ms"] <= 1500
        assert client.request(METADATA, 12, METADATA_ALL)["brokers"]
        # re-authentication mid-connection: a new session
        again = _scram(client, "alice", "alice-secret")
        assert again["error_code"] == NONE and again["session_lifetime_ms"] > 0
        assert client.request(METADATA, 12, METADATA_ALL)["brokers"]
        # another principal may not take the connection over
        changed = _scram(client, "bob", "bob-secret")
        assert changed["error_code"] == SASL_AUTHENTICATION_FAILED
        assert changed["error_message"] == ("Cannot change principals during "
                                            "re-authentication from User:alice: User:bob")
        assert client.closed_by_peer()
    with WireClient(broker.sasl) as client:  # nor another mechanism
        assert _scram(client, "alice", "alice-secret")["error_code"] == NONE
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == \
            ILLEGAL_SASL_STATE
        assert client.closed_by_peer()
    with WireClient(broker.sasl) as client:
        assert _plain(client, "alice", "alice-secret")["session_lifetime_ms"] > 0
        time.sleep(2.0)  # past the session: the next request closes the connection
        client.send(METADATA, 12, METADATA_ALL)
        assert client.closed_by_peer()
    with WireClient(broker.sasl) as client:  # v0 clients cannot re-authenticate: no limit
        assert _plain(client, "alice", "alice-secret", version=0)["error_code"] == NONE
        time.sleep(2.0)
        assert client.request(METADATA, 12, METADATA_ALL)["brokers"]


def test_librdkafka_reauthenticates(sasl_broker_factory):
    """librdkafka re-authenticates before each session ends; its producer keeps working
    across several session lifetimes on the same connection."""
    broker = sasl_broker_factory(connections_max_reauth_ms=1000)
    broker.add_user("alice", "alice-secret")
    topic = "reauth"
    create_topic(broker.plaintext, topic)
    errors: list = []
    producer = Producer({**broker.confluent("alice", "alice-secret"),
                         "error_cb": errors.append, "linger.ms": 0})
    delivered: list = []
    for i in range(25):  # about 5 s: several sessions
        producer.produce(topic, b"%d" % i,
                         on_delivery=lambda err, msg: delivered.append(err or msg))
        producer.flush(TIMEOUT)
        time.sleep(0.2)
    assert all(not isinstance(d, Exception) and d.error() is None for d in delivered)
    assert len(delivered) == 25
    assert not [e for e in errors if e.name() == "_AUTHENTICATION"], errors
    assert "expired without re-authentication" not in broker.process.log_text()


def test_acls_see_the_sasl_principal(sasl_broker_factory):
    broker = sasl_broker_factory(
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        super_users="User:ANONYMOUS")  # the PLAINTEXT listener's admin
    broker.add_user("alice", "alice-secret")
    broker.add_user("bob", "bob-secret")
    create_topic(broker.plaintext, "orders")
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    futures = admin(broker.plaintext).create_acls([AclBinding(
        ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", op,
        AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)])
    for future in futures.values():
        future.result(timeout=TIMEOUT)
    topics = {"topics": [{"name": "orders"}],
              "allow_auto_topic_creation": False,
              "include_topic_authorized_operations": False}
    with WireClient(broker.sasl) as client:
        assert _scram(client, "alice", "alice-secret")["error_code"] == NONE
        assert client.request(METADATA, 12, topics)["topics"][0]["error_code"] == NONE
    with WireClient(broker.sasl) as client:
        assert _scram(client, "bob", "bob-secret")["error_code"] == NONE
        assert client.request(METADATA, 12, topics)["topics"][0]["error_code"] == \
            TOPIC_AUTHORIZATION_FAILED
    # real clients: alice's produce is delivered, bob's refused
    for user, allowed in (("alice", True), ("bob", False)):
        outcome: list = []
        producer = Producer({**broker.confluent(user, f"{user}-secret"),
                             "message.timeout.ms": 5000})
        producer.produce("orders", b"x",
                         on_delivery=lambda err, _m, into=outcome: into.append(err))
        producer.flush(TIMEOUT)
        assert outcome and (outcome[0] is None) == allowed, (user, outcome)
        if not allowed:
            assert outcome[0].name() == "TOPIC_AUTHORIZATION_FAILED"


@pytest.mark.parametrize("settings,message", [
    ({}, "GSSAPI: pybroker serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": None},
     "PLAIN needs the users in listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "Nonsense"},
     "sasl.jaas.config: expected"),
])
def test_settings_refused_at_start(broker_factory, settings, message):
    with pytest.raises(RuntimeError) as failed:
        broker_factory(listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                       **settings)
    assert message in str(failed.value)
    assert "FileNotFoundError" not in str(failed.value)  # one error, not a shutdown's too


def test_garbage_in_every_state_closes_quietly(module_sasl_broker: SaslBroker):
    """Random frames before the handshake, after it, and as v0 raw tokens: each
    connection is closed (or answered) with a log line, never a handler failure, and the
    broker goes on serving."""
    import random

    broker = module_sasl_broker
    rng = random.Random(7)
    for i in range(60):
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80)))
        with WireClient(broker.sasl) as client:
            state = i % 3
            if state == 1:
                client.request(SASL_HANDSHAKE, 1, {"mechanism": ENABLED[i % 3]})
            elif state == 2:
                client.request(SASL_HANDSHAKE, 0, {"mechanism": ENABLED[i % 3]})
            client.raw(struct.pack(">i", len(garbage)) + garbage)
            try:
                while True:  # whatever it answers, then its close
                    client.read_frame()
            except (ConnectionError, OSError):
                pass
    log = broker.process.log_text()
    assert "request handling failed" not in log and "Traceback" not in log
    with WireClient(broker.sasl) as client:
        assert _scram(client, "alice", "alice-secret")["error_code"] == NONE
