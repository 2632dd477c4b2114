"""SCRAM's server side against RFC 7677's test vector and against kafka-python's SCRAM
client, an implementation nobody here wrote; PLAIN and JAAS parsing."""

from __future__ import annotations

import base64

import pytest
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from pybroker.security.jaas import JaasError, parse_jaas
from pybroker.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    new_credential,
)

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _server(mechanism: str, credential: ScramCredential, user: str = "user",
            nonce: str | None = None) -> ScramServer:
    return ScramServer(mechanism, lambda name: credential if name == user else None, nonce)


def test_rfc7677_vector() -> None:
    credential = new_credential(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    server = _server(SCRAM_SHA_256, credential, nonce=RFC_SERVER_NONCE)
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.username == "user"


def test_rfc7677_wrong_proof_refused() -> None:
    credential = new_credential(SCRAM_SHA_256, "pencil2", 4096, RFC_SALT)
    server = _server(SCRAM_SHA_256, credential, nonce=RFC_SERVER_NONCE)
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError):
        server.final(RFC_CLIENT_FINAL)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
@pytest.mark.parametrize("password,accepted", [("alice-secret", True), ("wrong", False)])
def test_against_kafka_python_client(mechanism: str, password: str, accepted: bool) -> None:
    credential = new_credential(mechanism, "alice-secret", 8192)
    server = _server(mechanism, credential, user="alice")
    client = KafkaPythonScramClient("alice", password, mechanism)
    client.process_server_first_message(server.first(client.first_message()))
    if not accepted:
        with pytest.raises(ScramError):
            server.final(client.final_message())
        return
    server_final = server.final(client.final_message())
    client.process_server_final_message(server_final)  # raises if the signature is wrong
    assert server.username == "alice"


def test_client_against_rfc7677_vector() -> None:
    """The inter-broker SCRAM client sends RFC 7677's messages and checks the server."""
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(ScramError):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


def test_unknown_user_refused_at_first_message() -> None:
    server = _server(SCRAM_SHA_256, new_credential(SCRAM_SHA_256, "x"), user="alice")
    with pytest.raises(ScramError):
        server.first(b"n,,n=bob,r=abc")


@pytest.mark.parametrize("message", [
    b"", b"n,,", b"x,,n=user,r=abc", b"p=tls-unique,,n=user,r=abc", b"n,,r=abc,n=user",
    b"n,,n=user", b"n,,n=us=er,r=abc", b"n,a=other,n=user,r=abc", b"\xff\xfe",
])
def test_malformed_client_first_refused(message: bytes) -> None:
    server = _server(SCRAM_SHA_256, new_credential(SCRAM_SHA_256, "x"))
    with pytest.raises(ScramError):
        server.first(message)


def test_client_final_checks_nonce_binding_and_order() -> None:
    credential = new_credential(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    for final in (RFC_CLIENT_FINAL.replace(b"hNlF", b"XXXX"),  # another nonce
                  RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # "y,," binding
                  b"garbage", b"c=biws,p=abc"):
        server = _server(SCRAM_SHA_256, credential, nonce=RFC_SERVER_NONCE)
        server.first(RFC_CLIENT_FIRST)
        with pytest.raises(ScramError):
            server.final(final)
    server = _server(SCRAM_SHA_256, credential, nonce=RFC_SERVER_NONCE)
    with pytest.raises(ScramError):  # final before first
        server.final(RFC_CLIENT_FINAL)


def test_escaped_username() -> None:
    credential = new_credential(SCRAM_SHA_256, "pw")
    server = _server(SCRAM_SHA_256, credential, user="a,b=c")
    client = KafkaPythonScramClient("a,b=c", "pw", SCRAM_SHA_256)
    # kafka-python does not escape: send RFC 5802's form ourselves
    first = client.first_message().replace(b"n=a,b=c", b"n=a=2Cb=3Dc")
    client.auth_message = client.auth_message.replace(b"n=a,b=c", b"n=a=2Cb=3Dc")
    client.process_server_first_message(server.first(first))
    server.final(client.final_message())
    assert server.username == "a,b=c"


def test_credential_text_is_kafkas() -> None:
    credential = new_credential(SCRAM_SHA_512, "pw", 4096, b"salt")
    text = credential.to_text()
    assert text.startswith("salt=c2FsdA==,stored_key=") and text.endswith(",iterations=4096")
    assert ScramCredential.from_text(text) == credential
    assert "pw" not in text


def test_jaas_plain_users() -> None:
    jaas = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="admin" password="admin-secret" user_admin="admin-secret" '
                      'user_alice="a\\"lice";')
    assert jaas.login_module.endswith("PlainLoginModule")
    assert jaas.options["username"] == "admin"
    assert jaas.plain_users() == {"admin": "admin-secret", "alice": 'a"lice'}


@pytest.mark.parametrize("text", [
    "", "Module", "Module required a=b", "Module whenever;", "Module required a=;",
    "A required; B required;",
])
def test_jaas_refused(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas(text)
