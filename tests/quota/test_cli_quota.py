"""``pybroker quota set|describe|delete`` as a subprocess against a real broker: what it
sets is what DescribeClientQuotas answers, refusals end with Kafka's error and status 1."""

from __future__ import annotations

from tests.cli.test_cli import pybroker
from tests.conftest import BrokerProcess
from tests.quota.quota_clients import describe


def test_set_describe_delete(broker: BrokerProcess) -> None:
    done = pybroker(broker, "quota", "set", "--user", "alice", "--client-id-default",
                    "--config", "producer_byte_rate=1024,request_percentage=12.5")
    assert done.stdout.decode() == "Completed updating quotas for user-principal 'alice', " \
                                   "the default client-id.\n"
    pybroker(broker, "quota", "set", "--client-id", "app", "--config",
             "consumer_byte_rate=2048")
    assert describe(broker.bootstrap) == {
        (("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0,
                                                   "request_percentage": 12.5},
        (("client-id", "app"),): {"consumer_byte_rate": 2048.0}}
    listed = pybroker(broker, "quota", "describe").stdout.decode().splitlines()
    assert listed == [
        "Quota configs for client-id 'app' are consumer_byte_rate=2048.0",
        "Quota configs for user-principal 'alice', the default client-id are "
        "producer_byte_rate=1024.0, request_percentage=12.5"]
    assert pybroker(broker, "quota", "describe", "--user", "alice", "--strict"
                    ).stdout.decode() == ""

    refused = pybroker(broker, "quota", "set", "--client-id", "app", "--config",
                       "producer_byte_rate=1.5", check=False)
    assert refused.returncode == 1
    assert refused.stderr.decode() == "error: client-id 'app': INVALID_REQUEST: " \
                                      "producer_byte_rate cannot be a fractional value.\n"

    pybroker(broker, "quota", "delete", "--user", "alice", "--client-id-default",
             "--config", "request_percentage")
    pybroker(broker, "quota", "delete", "--client-id", "app")
    assert describe(broker.bootstrap) == {
        (("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0}}
    gone = pybroker(broker, "quota", "delete", "--client-id", "app", check=False)
    assert (gone.returncode, gone.stderr.decode()) == (
        1, "pybroker: client-id 'app' has no quotas\n")
