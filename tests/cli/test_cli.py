"""The CLI end to end: ``python3 -m pybroker topic|produce|consume`` as subprocesses against
a real broker, and kcat (librdkafka's command-line client) against the same broker."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.admin.clients import unique

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 60


def pybroker(broker, *args: str, stdin: bytes | None = None,
             check: bool = True) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "pybroker", *args, "--bootstrap", broker.bootstrap]
    done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT, cwd=ROOT)
    if check:
        assert done.returncode == 0, (cmd, done.stdout, done.stderr)
    return done


def kcat(*args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["kcat", *args], input=stdin, capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout.decode()


def test_topic_commands(module_broker):
    name = unique("cli")
    out = pybroker(module_broker, "topic", "create", name, "-p", "2",
                   "-c", "retention.ms=100000").stdout.decode()
    assert f"{name}: created" in out
    again = pybroker(module_broker, "topic", "create", name, check=False)
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in again.stderr
    bad = pybroker(module_broker, "topic", "create", "bad/name", check=False)
    assert bad.returncode == 1 and b"TOPIC_EXCEPTION" in bad.stderr

    listing = pybroker(module_broker, "topic", "list").stdout.decode().splitlines()
    assert listing[0].split() == ["NAME", "PARTITIONS"]
    assert [name, "2"] in [line.split() for line in listing]
    underscored = "__" + name  # an ordinary topic (Kafka's internal ones are a fixed set)
    pybroker(module_broker, "topic", "create", underscored)
    assert underscored in pybroker(module_broker, "topic", "list").stdout.decode().split()
    pybroker(module_broker, "topic", "delete", underscored)

    described = pybroker(module_broker, "topic", "describe", name).stdout.decode()
    assert "PARTITIONS  2" in described
    assert "retention.ms  100000  DYNAMIC_TOPIC_CONFIG" in described
    assert "segment.bytes" not in described  # defaults only with --all-configs
    everything = pybroker(module_broker, "topic", "describe", name, "-a").stdout.decode()
    assert "segment.bytes  1073741824  DEFAULT_CONFIG" in everything

    pybroker(module_broker, "topic", "alter-config", name, "--set", "cleanup.policy=compact",
             "--delete", "retention.ms")
    described = pybroker(module_broker, "topic", "describe", name).stdout.decode()
    assert "cleanup.policy  compact  DYNAMIC_TOPIC_CONFIG" in described
    assert "retention.ms" not in described
    refused = pybroker(module_broker, "topic", "alter-config", name, "--set",
                       "retention.ms=never", check=False)
    assert refused.returncode == 1 and b"INVALID_CONFIG" in refused.stderr

    pybroker(module_broker, "topic", "add-partitions", name, "-n", "1")
    assert "PARTITIONS  3" in pybroker(module_broker, "topic", "describe", name).stdout.decode()

    assert f"{name}: deleted" in pybroker(module_broker, "topic", "delete", name).stdout.decode()
    listing = pybroker(module_broker, "topic", "list").stdout.decode()
    assert name not in listing.split()
    missing = pybroker(module_broker, "topic", "delete", name, check=False)
    assert missing.returncode == 1 and b"UNKNOWN_TOPIC_OR_PART" in missing.stderr


def test_produce_and_consume(module_broker):
    name = unique("cli-pc")
    pybroker(module_broker, "topic", "create", name, "-p", "1")
    done = pybroker(module_broker, "produce", name, "-k", ":", stdin=b"k1:v1\nk2:v:2\nplain\n")
    assert b"produced 3 of 3 records" in done.stderr

    out = pybroker(module_broker, "consume", name, "-n", "3", "-F", "%k=%v@%o\\n").stdout
    assert out == b"k1=v1@0\nk2=v:2@1\n=plain@2\n"
    # without -n or --follow: everything up to the end, then exit
    assert pybroker(module_broker, "consume", name).stdout == b"v1\nv:2\nplain\n"
    assert pybroker(module_broker, "consume", name, "-o", "2").stdout == b"plain\n"
    assert pybroker(module_broker, "consume", name, "-o", "end").stdout == b""
    assert pybroker(module_broker, "consume", name, "-o", "99").stdout == b""

    pybroker(module_broker, "produce", name, "-z", "zstd", "-H", "h=1",
             stdin=b"compressed\n")
    out = pybroker(module_broker, "consume", name, "-o", "3", "-F", "%v %h\\n").stdout
    assert out == b"compressed h=1\n"


def test_consume_follow(module_broker):
    name = unique("cli-f")
    pybroker(module_broker, "topic", "create", name)
    follower = subprocess.Popen(
        [sys.executable, "-m", "pybroker", "consume", name, "--follow", "--bootstrap",
         module_broker.bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        pybroker(module_broker, "produce", name, stdin=b"first\n")
        assert follower.stdout.readline() == b"first\n"
        pybroker(module_broker, "produce", name, stdin=b"second\n")
        assert follower.stdout.readline() == b"second\n"
    finally:
        follower.terminate()
        follower.wait(TIMEOUT)


def test_produce_to_missing_topic_without_auto_create(broker_factory):
    broker = broker_factory(auto_create_topics_enable=False)
    done = pybroker(broker, "produce", unique("none"), "--timeout", "2", stdin=b"x\n",
                    check=False)
    assert done.returncode == 1
    assert b"produced 0 of 1" in done.stderr


def test_kcat_metadata_and_round_trip(module_broker):
    name = unique("kcat")
    pybroker(module_broker, "topic", "create", name, "-p", "3")
    metadata = kcat("-b", module_broker.bootstrap, "-L", "-t", name)
    assert f'topic "{name}" with 3 partitions' in metadata
    assert "broker 0 at 127.0.0.1" in metadata
    kcat("-b", module_broker.bootstrap, "-P", "-t", name, "-p", "1", "-K", ":",
         stdin=b"a:1\nb:2\n")
    out = kcat("-b", module_broker.bootstrap, "-C", "-t", name, "-p", "1", "-e",
               "-f", "%k=%s\n")
    assert out == "a=1\nb=2\n"
    assert f'topic "{name}" with 3 partitions' in kcat("-b", module_broker.bootstrap, "-L")
