"""``pybroker acl`` as a subprocess against a real broker with an authorizer."""

from tests.cli.test_cli import pybroker
from tests.security.test_acls_broker import ANON, AUTHORIZER


def test_create_list_delete(broker_factory):
    broker = broker_factory(authorizer_class_name=AUTHORIZER, super_users=ANON)
    created = pybroker(broker, "acl", "create", "--allow-principal", "User:alice",
                       "--operation", "Read", "--operation", "Describe", "--topic", "orders",
                       "--resource-pattern-type", "prefixed")
    assert created.stdout.decode().count("created") == 2
    pybroker(broker, "acl", "create", "--deny-principal", "User:bob", "--deny-host",
             "10.0.0.1", "--operation", "all", "--group", "billing")
    listed = pybroker(broker, "acl", "list").stdout.decode()
    assert ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
            "patternType=PREFIXED)`:") in listed
    assert ("(principal=User:bob, host=10.0.0.1, operation=ALL, permissionType=DENY)"
            in listed)
    matching = pybroker(broker, "acl", "list", "--topic", "orders-2024",
                        "--resource-pattern-type", "match").stdout.decode()
    assert "operation=READ" in matching and "billing" not in matching
    deleted = pybroker(broker, "acl", "delete", "--topic", "orders", "--resource-pattern-type",
                       "prefixed", "--operation", "Read").stdout.decode()
    assert deleted.count("deleted") == 1
    listed = pybroker(broker, "acl", "list", "--principal", "User:alice").stdout.decode()
    assert "operation=DESCRIBE" in listed and "operation=READ" not in listed


def test_refused_without_an_authorizer(broker_factory):
    broker = broker_factory()
    done = pybroker(broker, "acl", "create", "--allow-principal", "User:alice", "--operation",
                    "Read", "--topic", "orders", check=False)
    assert done.returncode == 1 and b"SECURITY_DISABLED" in done.stderr
