"""``pybroker acl create|list|delete``: ACLs, like Kafka's ``kafka-acls.sh``.

Over confluent-kafka's ``AdminClient`` (CreateAcls, DescribeAcls, DeleteAcls), so it works
against any Kafka-protocol broker with an authorizer (``--bootstrap HOST:PORT``,
``--timeout``, as every client command)::

    pybroker acl create --allow-principal User:alice --operation Read --operation Describe \\
        --topic orders [--resource-pattern-type prefixed] [--allow-host 10.0.0.1]
    pybroker acl create --deny-principal User:bob --operation All --group billing
    pybroker acl list [--topic orders] [--principal User:alice]
        [--resource-pattern-type any|match|literal|prefixed]
    pybroker acl delete --topic orders [--allow-principal User:alice] [--operation Read]

A resource is ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) or
``--cluster``; create makes one ACL per resource, principal, host and operation. Delete
removes what matches: options left out match anything (``--resource-pattern-type`` defaults
to literal for create and delete, to any for list, as Kafka's tool). ``list`` prints
Kafka's tool's lines. Errors go to stderr and make the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pybroker.cli_connect import add_client_options, report_each
from pybroker.cli_topic import _admin
from pybroker.kafka_admin import error_text

CLUSTER_NAME = "kafka-cluster"


def register(subparsers: Any) -> None:
    """Add ``acl`` and its subcommands to ``pybroker``'s parser."""
    acl = subparsers.add_parser("acl", help="create, list, delete ACLs")
    sub = acl.add_subparsers(dest="acl_command", required=True)
    for name, func, help_text in (("create", create_main, "add ACLs"),
                                  ("list", list_main, "list ACLs"),
                                  ("delete", delete_main, "remove the ACLs that match")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--topic", action="append", default=[], metavar="TOPIC")
        p.add_argument("--group", action="append", default=[], metavar="GROUP")
        p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
        p.add_argument("--cluster", action="store_true", help="the cluster resource")
        p.add_argument("--resource-pattern-type", metavar="TYPE",
                       default="any" if name == "list" else "literal",
                       choices=("any", "match", "literal", "prefixed") if name != "create"
                       else ("literal", "prefixed"))
        if name == "list":
            p.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL")
        else:
            for kind in ("allow", "deny"):
                p.add_argument(f"--{kind}-principal", action="append", default=[],
                               metavar="PRINCIPAL", help="Type:name, e.g. User:alice")
                p.add_argument(f"--{kind}-host", action="append", default=[], metavar="HOST",
                               help="client address (default: any, *)")
            p.add_argument("--operation", action="append", default=[], metavar="OP",
                           help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                                "DescribeConfigs, AlterConfigs, IdempotentWrite, All")
        p.set_defaults(func=func)
        add_client_options(p)


def _enum(enum: Any, text: str, what: str) -> Any:
    key = text.replace("-", "").replace("_", "").lower()
    for member in enum:
        if member.name.replace("_", "").lower() == key:
            return member
    raise SystemExit(f"unknown {what} {text!r}")


def _resources(args: argparse.Namespace, required: bool) -> list[tuple[Any, str | None]]:
    from confluent_kafka.admin import ResourceType

    found: list[tuple[Any, str | None]] = (
        [(ResourceType.TOPIC, t) for t in args.topic]
        + [(ResourceType.GROUP, g) for g in args.group]
        + [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
        + ([(ResourceType.BROKER, CLUSTER_NAME)] if args.cluster else []))
    if required and not found:
        raise SystemExit("name a resource: --topic, --group, --transactional-id or --cluster")
    return found


def _entries(args: argparse.Namespace, required: bool) -> list[tuple[Any, str | None, str | None]]:
    """(permission, principal, host) of each principal and host given, both kinds."""
    from confluent_kafka.admin import AclPermissionType

    entries: list[tuple[Any, str | None, str | None]] = []
    for kind, permission in (("allow", AclPermissionType.ALLOW),
                             ("deny", AclPermissionType.DENY)):
        principals = getattr(args, f"{kind}_principal")
        hosts = getattr(args, f"{kind}_host") or ["*" if required else None]
        entries += [(permission, p, h) for p in principals for h in hosts]
    if required and not entries:
        raise SystemExit("name a principal: --allow-principal or --deny-principal")
    return entries


def create_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AclBinding, AclOperation, ResourcePatternType

    if not args.operation:
        raise SystemExit("name an operation: --operation")
    pattern = _enum(ResourcePatternType, args.resource_pattern_type, "pattern type")
    operations = [_enum(AclOperation, op, "operation") for op in args.operation]
    bindings = [AclBinding(kind, str(name), pattern, str(principal), str(host), op, permission)
                for kind, name in _resources(args, required=True)
                for permission, principal, host in _entries(args, required=True)
                for op in operations]
    admin = _admin(args)  # kept referenced: a collected client cancels its requests
    futures = admin.create_acls(bindings, request_timeout=args.timeout)
    return report_each(futures, args.timeout, lambda binding: f"created {_describe(binding)}",
                       _describe)


def _filters(args: argparse.Namespace, principals: list[tuple[Any, str | None, str | None]],
             operations: list[Any]) -> list[Any]:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    pattern = _enum(ResourcePatternType, args.resource_pattern_type, "pattern type")
    # None matches anything in a filter (confluent-kafka's stubs say str)
    return [AclBindingFilter(kind, name, pattern, principal, host, op,  # type: ignore[arg-type]
                             permission)
            for kind, name in _resources(args, required=False) or [(ResourceType.ANY, None)]
            for permission, principal, host in principals
            or [(AclPermissionType.ANY, None, None)]
            for op in operations or [AclOperation.ANY]]


def list_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AclPermissionType

    admin = _admin(args)
    found: dict[str, list[Any]] = {}
    try:
        for selected in _filters(args, [(AclPermissionType.ANY, p, None)
                                        for p in args.principal], []):
            for binding in admin.describe_acls(selected, request_timeout=args.timeout).result(
                    timeout=args.timeout):
                found.setdefault(_resource(binding), []).append(binding)
    except Exception as exc:
        print(f"error: {error_text(exc)}", file=sys.stderr)
        return 1
    for resource, bindings in sorted(found.items()):
        print(f"Current ACLs for resource `{resource}`:")
        for entry in sorted({_entry(b) for b in bindings}):
            print(f" \t{entry}")
        print()
    return 0


def delete_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AclOperation

    _resources(args, required=True)
    admin = _admin(args)
    operations = [_enum(AclOperation, op, "operation") for op in args.operation]
    status = 0
    filters = _filters(args, _entries(args, required=False), operations)
    for _, future in admin.delete_acls(filters, request_timeout=args.timeout).items():
        try:
            for binding in future.result(timeout=args.timeout):
                print(f"deleted {_describe(binding)}")
        except Exception as exc:
            print(f"error: {error_text(exc)}", file=sys.stderr)
            status = 1
    return status


def _resource(binding: Any) -> str:
    return (f"ResourcePattern(resourceType={_kafka_type(binding.restype)}, "
            f"name={binding.name}, patternType={binding.resource_pattern_type.name})")


def _kafka_type(restype: Any) -> str:
    return "CLUSTER" if restype.name == "BROKER" else restype.name


def _entry(binding: Any) -> str:
    return (f"(principal={binding.principal}, host={binding.host}, "
            f"operation={binding.operation.name}, "
            f"permissionType={binding.permission_type.name})")


def _describe(binding: Any) -> str:
    return f"{_entry(binding)} on {_resource(binding)}"
