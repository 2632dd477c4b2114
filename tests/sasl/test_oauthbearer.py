"""OAUTHBEARER: librdkafka's unsecured JWT accepted by Kafka's default (unsecured)
validator and its principal given to the ACLs; a pluggable validator class; refused
tokens answered SASL_AUTHENTICATION_FAILED; a session ending with its token."""

from __future__ import annotations

import base64
import json
import time

import pytest
from confluent_kafka import Producer

from tests.admin.clients import create_topic
from tests.broker.wire_client import WireClient

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
TIMEOUT = 30.0


def _listener(broker_factory, **settings):
    """A broker with a PLAINTEXT listener and a SASL_PLAINTEXT one named CLIENTS (a name
    without "_": the test fixture spells settings' dots as underscores)."""
    from tests.sasl.conftest import listener_port

    broker = broker_factory(listeners="PLAINTEXT://127.0.0.1:0,CLIENTS://127.0.0.1:0",
                            listener_security_protocol_map="PLAINTEXT:PLAINTEXT,"
                                                           "CLIENTS:SASL_PLAINTEXT",
                            sasl_enabled_mechanisms="OAUTHBEARER", **settings)
    return broker, f"127.0.0.1:{listener_port(broker, 'CLIENTS')}"


def _b64(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _jws(claims: dict) -> str:
    return f"{_b64({'alg': 'none'})}.{_b64(claims)}."


def _authenticate(bootstrap: str, token: str) -> dict:
    with WireClient(bootstrap) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"})[
            "error_code"] == 0
        answer = client.request(SASL_AUTHENTICATE, 2, {
            "auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})
        if answer["error_code"]:
            assert client.closed_by_peer()
        return answer


def test_librdkafka_unsecured_jwt(broker_factory):
    broker, sasl = _listener(broker_factory)
    create_topic(broker.bootstrap, "tokens")
    errors: list = []
    producer = Producer({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": "OAUTHBEARER",
                         "enable.sasl.oauthbearer.unsecure.jwt": True,
                         "sasl.oauthbearer.config": "principal=alice",
                         "error_cb": errors.append})
    delivered: list = []
    producer.produce("tokens", b"v", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(TIMEOUT) == 0, errors
    assert delivered == [None]


def test_unsecured_validator_checks(broker_factory):
    broker, sasl = _listener(broker_factory, connections_max_reauth_ms=600_000)
    now = int(time.time())
    good = _authenticate(sasl, _jws({"sub": "alice", "iat": now, "exp": now + 60}))
    assert good["error_code"] == 0
    assert 0 < good["session_lifetime_ms"] <= 60_000  # the token's, under the reauth limit
    for token, why in ((_jws({"sub": "alice", "exp": now - 60}), "the token expired"),
                       (_jws({"exp": now + 60}), "no 'sub' claim"),
                       ("not-a-jwt", "not an unsecured JWS")):
        refused = _authenticate(sasl, token)
        assert refused["error_code"] == 58
        assert refused["error_message"].startswith(f"Authentication failed: {why}")


def test_pluggable_validator(broker_factory):
    broker, sasl = _listener(broker_factory, **{
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                            'OAuthBearerLoginModule required secret="s3cret";',
        "listener.name.clients.oauthbearer.sasl.server.callback.handler.class":
            "tests.sasl.token_validator.SharedSecretValidator"})
    assert _authenticate(sasl, "s3cret:bob")["error_code"] == 0
    assert _authenticate(sasl, "wrong:bob")["error_message"] == \
        "Authentication failed: unknown secret"


def test_validator_loading_and_messages():
    from pybroker.security.oauthbearer import (
        InvalidToken,
        UnsecuredJwtValidator,
        bearer_token,
        load_validator,
    )

    assert isinstance(load_validator(None, {}), UnsecuredJwtValidator)
    for name in ("no.such.module.Validator", "org.apache.kafka.common.security.oauthbearer."
                 "OAuthBearerValidatorCallbackHandler"):
        with pytest.raises(ValueError):
            load_validator(name, {})
    assert bearer_token(b"n,,\x01auth=Bearer abc\x01\x01") == "abc"
    assert bearer_token(b"n,,\x01host=x\x01auth=bearer abc\x01\x01") == "abc"
    for message in (b"", b"n,,", b"n,,\x01auth=Basic abc\x01\x01", b"n,,\x01x=y\x01\x01",
                    b"\xff"):
        with pytest.raises(InvalidToken):
            bearer_token(message)
    scoped = UnsecuredJwtValidator({"unsecuredValidatorRequiredScope": "write"})
    now = int(time.time())
    with pytest.raises(InvalidToken):
        scoped.validate(_jws({"sub": "a", "exp": now + 60, "scope": "read"}))
    assert scoped.validate(_jws({"sub": "a", "exp": now + 60, "scope": ["read", "write"]})
                           ).principal_name == "a"
