"""AlterUserScramCredentials and DescribeUserScramCredentials on a real broker: the exact
answers Kafka 4.1 gives (recorded from it with the same requests), confluent-kafka's
admin client, ``pybroker user``, persistence across a restart, and the cluster ALTER /
DESCRIBE the authorizer asks for."""

from __future__ import annotations

import json
import os

from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from pybroker.security.scram import SCRAM_SHA_256, ScramCredential, salted_password
from tests.admin.clients import admin
from tests.broker.wire_client import WireClient
from tests.cli.test_cli import pybroker
from tests.security.test_acls_broker import ANON, AUTHORIZER

TIMEOUT = 30.0
SALT = b"saltsalt"
SALTED = salted_password(SCRAM_SHA_256, "alice-secret", SALT, 8192)


def _upsert(name: str, iterations: int = 8192, mechanism: int = 1, salt: bytes = SALT,
            salted: bytes = SALTED) -> dict:
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt,
            "salted_password": salted}


def test_answers_as_kafka(broker):
    with WireClient(broker.bootstrap) as client:
        answer = client.request(51, 0, {
            "deletions": [{"name": "nobody", "mechanism": 1}, {"name": "x", "mechanism": 3}],
            "upsertions": [_upsert("alice"), _upsert("bob", iterations=100),
                           _upsert("carl", iterations=20000), _upsert(""),
                           _upsert("dave", salt=b""), _upsert("fred"), _upsert("fred")]})
        results = {r["user"]: (r["error_code"], r["error_message"])
                   for r in answer["results"]}
        # Kafka 4.1's answers to the same request
        assert results == {
            "alice": (0, None), "dave": (0, None),
            "": (93, "Username must not be empty"),
            "bob": (93, "Too few iterations"), "carl": (93, "Too many iterations"),
            "x": (33, "Unknown SCRAM mechanism"),
            "fred": (92, "A user credential cannot be altered twice in the same request"),
            "nobody": (91, "Attempt to delete a user credential that does not exist")}
        described = client.request(50, 0, {"users": None})
        assert described["error_code"] == 0
        assert {r["user"]: r["credential_infos"] for r in described["results"]} == {
            "alice": [{"mechanism": 1, "iterations": 8192}],
            "dave": [{"mechanism": 1, "iterations": 8192}]}
        assert client.request(50, 0, {"users": []})["results"] == described["results"]
        named = client.request(50, 0, {"users": [{"name": "alice"}, {"name": "zed"},
                                                 {"name": "alice"}]})
        assert {r["user"]: (r["error_code"], r["error_message"]) for r in named["results"]} == {
            "zed": (91, "Attempt to describe a user credential that does not exist: zed"),
            "alice": (92, "Cannot describe SCRAM credentials for the same user twice in a "
                          "single request: alice")}
    # stored salted: neither the password nor the salted password is in the file
    with open(os.path.join(broker.data_dir, "scram-credentials.json"), "rb") as f:
        stored = f.read()
    assert b"alice-secret" not in stored and SALTED.hex().encode() not in stored
    credential = ScramCredential.from_text(
        json.loads(stored)["users"]["alice"][SCRAM_SHA_256])
    assert credential.salt == SALT and credential.iterations == 8192


def test_admin_client_and_restart(broker):
    client = admin(broker.bootstrap)
    futures = client.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_256, 4096), b"alice-secret"),
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_512, 8192), b"alice-secret"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")], request_timeout=TIMEOUT)
    for future in futures.values():
        future.result(timeout=TIMEOUT)
    client.alter_user_scram_credentials([UserScramCredentialDeletion(
        "bob", ScramMechanism.SCRAM_SHA_256)])["bob"].result(timeout=TIMEOUT)
    broker.restart()
    client = admin(broker.bootstrap)
    found = client.describe_user_scram_credentials(request_timeout=TIMEOUT).result(
        timeout=TIMEOUT)
    assert set(found) == {"alice"}
    assert sorted((i.mechanism, i.iterations) for i in found["alice"].scram_credential_infos) \
        == [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]


def test_cli_user(broker):
    created = pybroker(broker, "user", "create", "alice", "--password", "alice-secret",
                       "--iterations", "8192").stdout.decode()
    assert "set SCRAM credentials of alice" in created
    pybroker(broker, "user", "create", "bob", "--password", "b", "--mechanism", "SCRAM-SHA-512")
    listed = pybroker(broker, "user", "list").stdout.decode().splitlines()
    assert listed == ["alice SCRAM-SHA-256 iterations=8192",
                      "alice SCRAM-SHA-512 iterations=8192", "bob SCRAM-SHA-512 iterations=4096"]
    refused = pybroker(broker, "user", "create", "carl", "--password", "c", "--iterations",
                       "10", check=False)
    assert refused.returncode == 1 and b"UNACCEPTABLE_CREDENTIAL" in refused.stderr
    pybroker(broker, "user", "delete", "alice")
    assert pybroker(broker, "user", "list").stdout.decode().splitlines() == [
        "bob SCRAM-SHA-512 iterations=4096"]
    missing = pybroker(broker, "user", "list", "alice", check=False)
    assert missing.returncode == 1 and b"RESOURCE_NOT_FOUND" in missing.stderr


def test_cluster_alter_and_describe_are_authorized(broker_factory):
    broker = broker_factory(authorizer_class_name=AUTHORIZER)  # no ACL: nobody may
    with WireClient(broker.bootstrap) as client:
        altered = client.request(51, 0, {"deletions": [], "upsertions": [
            _upsert("alice"), _upsert("bob")]})
        assert [(r["user"], r["error_code"]) for r in altered["results"]] == [
            ("alice", 31), ("bob", 31)]
        assert client.request(50, 0, {"users": None})["error_code"] == 31
    broker.settings["super.users"] = ANON
    broker.restart()
    with WireClient(broker.bootstrap) as client:
        altered = client.request(51, 0, {"deletions": [], "upsertions": [_upsert("alice")]})
        assert altered["results"] == [{"user": "alice", "error_code": 0,
                                       "error_message": None}]
