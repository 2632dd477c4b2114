"""The client commands over a SASL_SSL listener with Kafka's ``--command-config``
properties (``sasl.jaas.config``'s user, a PEM truststore), and a refused login; ``txn``
too, which speaks through pybroker's own client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

from tests.admin.clients import unique
from tests.cli.test_cli import ROOT, TIMEOUT
from tests.sasl.conftest import SaslBroker


def _run(bootstrap: str, config: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "pybroker", *args, "--bootstrap", bootstrap,
                           "--command-config", config, "--timeout", "10"],
                          capture_output=True, timeout=TIMEOUT, cwd=ROOT)


def _command_config(broker: SaslBroker, path: Path) -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={broker.stores.ca}\n")
    return path


def test_commands_over_sasl_ssl(module_sasl_broker: SaslBroker, tmp_path):
    broker = module_sasl_broker
    config = _command_config(broker, tmp_path / "client.properties")
    created = _run(broker.sasl_ssl, str(config), "topic", "create", "over-sasl")
    assert created.returncode == 0, created.stderr
    listed = _run(broker.sasl_ssl, str(config), "topic", "list")
    assert b"over-sasl" in listed.stdout, listed.stderr
    # librdkafka's calls and pybroker's own client's (ListPartitionReassignments)
    described = _run(broker.sasl_ssl, str(config), "topic", "describe", "over-sasl")
    assert described.returncode == 0 and b"PARTITION" in described.stdout, described.stderr
    users = _run(broker.sasl_ssl, str(config), "user", "list")
    assert b"alice SCRAM-SHA-512 iterations=4096" in users.stdout, users.stderr

    config.write_text(config.read_text().replace("alice-secret", "wrong"))
    refused = _run(broker.sasl_ssl, str(config), "topic", "list")
    assert refused.returncode == 1
    assert b": SASL authentication error: Authentication failed" in refused.stderr, \
        refused.stderr


# Runs a command as `python3 -m pybroker` does, then names the librdkafka threads (librdkafka
# names them rdk:...) still running when the process is about to exit.
_RUN_AND_NAME_THREADS = """
import os, sys
from pybroker.cli import main
status = main(sys.argv[1:])
names = (open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task"))
print(" ".join(name for name in names if name.startswith("rdk:")))
sys.exit(status)
"""


def test_refused_login_leaves_no_client_running_at_exit(module_sasl_broker: SaslBroker,
                                                        tmp_path):
    """A client alive at exit let a broker thread, redoing its TLS handshake after the
    refused login, race OpenSSL's atexit cleanup: SIGSEGV, about one run in thirty under
    load. The command must have destroyed its clients when it returns."""
    broker = module_sasl_broker
    config = _command_config(broker, tmp_path / "client.properties")
    config.write_text(config.read_text().replace("alice-secret", "wrong"))
    for _ in range(5):
        refused = subprocess.run(
            [sys.executable, "-c", _RUN_AND_NAME_THREADS, "topic", "list", "--bootstrap",
             broker.sasl_ssl, "--command-config", str(config), "--timeout", "10"],
            capture_output=True, timeout=TIMEOUT, cwd=ROOT)
        assert refused.returncode == 1, refused.stderr
        assert b"Authentication failed" in refused.stderr, refused.stderr
        assert refused.stdout.strip() == b"", refused.stdout


def test_txn_list_over_sasl_ssl(module_sasl_broker: SaslBroker, tmp_path):
    broker = module_sasl_broker
    config = _command_config(broker, tmp_path / "client.properties")
    topic, transactional_id = unique("txn-sasl"), unique("txn-sasl-id")
    producer = Producer(broker.confluent("alice", "alice-secret", tls=True,
                                         **{"transactional.id": transactional_id}))
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    assert producer.flush(TIMEOUT) == 0
    try:
        listed = _run(broker.sasl_ssl, str(config), "txn", "list", "--state", "Ongoing")
        assert listed.returncode == 0, listed.stderr
        assert [line.split()[-1] for line in listed.stdout.decode().splitlines()
                if line.startswith(transactional_id + " ")] == ["Ongoing"], listed.stdout
        described = _run(broker.sasl_ssl, str(config), "txn", "describe", transactional_id)
        assert described.returncode == 0, described.stderr
        assert f"{topic}-0".encode() in described.stdout

        config.write_text(config.read_text().replace("alice-secret", "wrong"))
        refused = _run(broker.sasl_ssl, str(config), "txn", "list")
        assert refused.returncode == 1
        assert b"Authentication failed" in refused.stderr, refused.stderr
    finally:
        producer.abort_transaction(TIMEOUT)
