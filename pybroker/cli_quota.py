"""``pybroker quota set|describe|delete``: client quotas, like Kafka's ``kafka-configs.sh``
for users, client ids and IPs.

Neither librdkafka nor kafka-python has an admin call for client quotas, so these speak
AlterClientQuotas and DescribeClientQuotas through pybroker's own client (the ``txn``
commands' ``_cluster``), to any Kafka-protocol broker (``--bootstrap HOST:PORT``)::

    pybroker quota set --client-id app --config producer_byte_rate=1048576
    pybroker quota set --user alice --client-id-default --config consumer_byte_rate=2097152
    pybroker quota set --ip-default --config connection_creation_rate=10
    pybroker quota describe [--user alice | --user-default] [--client-id app | ...] [--strict]
    pybroker quota delete --client-id app [--config producer_byte_rate]

An entity is a user, a client id, both, or an IP, each a name or the default
(``--*-default``, Kafka's ``<default>``). ``describe`` lists the quotas whose entity has
the names given (each ``--user``/``--client-id``/``--ip`` an exact match, ``--*-default``
the default; with ``--strict`` no other components), all of them with no option, one
line each as Kafka's tool prints them. ``delete`` removes the keys named, every key the
entity has without ``--config``. Errors go to stderr with Kafka's error name and message
and make the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pybroker.cli import CommandError
from pybroker.cli_connect import add_client_options, protocol_cluster
from pybroker.client.cluster import Cluster
from pybroker.errors import ErrorCode

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
EXACT, DEFAULT = 0, 1
# entity type -> (option, Kafka's tool's name of it)
_TYPES = {"user": ("user", "user-principal"), "client-id": ("client-id", "client-id"),
          "ip": ("ip", "ip")}


def register(subparsers: Any) -> None:
    """Add ``quota`` and its subcommands to ``pybroker``'s parser."""
    quota = subparsers.add_parser("quota", help="set, describe, delete client quotas")
    sub = quota.add_subparsers(dest="quota_command", required=True)
    for name, func, help_text in (("set", set_main, "set quotas of an entity"),
                                  ("describe", describe_main, "list quotas"),
                                  ("delete", delete_main, "remove quotas of an entity")):
        p = sub.add_parser(name, help=help_text)
        for option, _ in _TYPES.values():
            names = p.add_mutually_exclusive_group()
            names.add_argument(f"--{option}", metavar="NAME")
            names.add_argument(f"--{option}-default", action="store_true",
                               help=f"the default {option} (Kafka's <default>)")
        if name == "describe":
            p.add_argument("--strict", action="store_true",
                           help="only entities with no components but those given")
        else:
            p.add_argument("--config", action="append", default=[],
                           metavar="KEY=VALUE" if name == "set" else "KEY",
                           help="producer_byte_rate, consumer_byte_rate, request_percentage, "
                                "controller_mutation_rate (users, client ids), "
                                "connection_creation_rate (IPs); repeatable or "
                                "comma-separated")
        p.set_defaults(func=func)
        add_client_options(p)


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The (type, name or None for the default) components the options name."""
    found: list[tuple[str, str | None]] = []
    for entity_type, (option, _) in _TYPES.items():
        attr = option.replace("-", "_")
        if getattr(args, f"{attr}_default"):
            found.append((entity_type, None))
        elif getattr(args, attr) is not None:
            found.append((entity_type, getattr(args, attr)))
    return found


def _configs(args: argparse.Namespace) -> list[str]:
    return [item.strip() for given in args.config for item in given.split(",") if item.strip()]


def _entity_text(entity: list[tuple[str, str | None]]) -> str:
    """Kafka's tool's words: ``user-principal 'alice', the default client-id``."""
    words = {t: (f"the default {_TYPES[t][1]}" if name is None else f"{_TYPES[t][1]} '{name}'")
             for t, name in entity}
    return ", ".join(words[t] for t in _TYPES if t in words)


def _any_broker(cluster: Cluster) -> Any:
    return cluster.connection(min(cluster.brokers))


def _alter(cluster: Cluster, entity: list[tuple[str, str | None]],
           ops: list[dict[str, Any]]) -> int:
    answer = _any_broker(cluster).request(ALTER_CLIENT_QUOTAS, 1, {"entries": [{
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "ops": ops}],
        "validate_only": False})
    failed = 0
    for entry in answer["entries"]:
        if entry["error_code"]:
            failed = 1
            print(f"error: {_entity_text(entity)}: {ErrorCode(entry['error_code']).name}: "
                  f"{entry['error_message']}", file=sys.stderr)
    if not failed:
        print(f"Completed updating quotas for {_entity_text(entity)}.")
    return failed


def _describe(cluster: Cluster, entity: list[tuple[str, str | None]], strict: bool
              ) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
    answer = _any_broker(cluster).request(DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
        {"entity_type": t, "match_type": EXACT if n is not None else DEFAULT, "match": n}
        for t, n in entity], "strict": strict})
    if answer["error_code"]:
        raise CommandError(f"{ErrorCode(answer['error_code']).name}: "
                           f"{answer['error_message']}")
    return [([(e["entity_type"], e["entity_name"]) for e in entry["entity"]],
             {v["key"]: v["value"] for v in entry["values"]}) for entry in answer["entries"]]


def set_main(args: argparse.Namespace) -> int:
    entity, ops = _entity(args), []
    if not entity:
        raise CommandError("name an entity: --user, --client-id or --ip (or a --*-default)")
    for item in _configs(args):
        key, sep, value = item.partition("=")
        try:
            ops.append({"key": key, "value": float(value), "remove": False})
        except ValueError:
            sep = ""
        if not sep:
            raise CommandError(f"--config {item!r}: expected KEY=NUMBER")
    if not ops:
        raise CommandError("nothing to set: give --config KEY=VALUE")
    with protocol_cluster(args, "pybroker-quota") as cluster:
        return _alter(cluster, entity, ops)


def describe_main(args: argparse.Namespace) -> int:
    with protocol_cluster(args, "pybroker-quota") as cluster:
        found = _describe(cluster, _entity(args), args.strict)
    for entity, values in sorted(found, key=lambda e: _entity_text(e[0])):
        configs = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        print(f"Quota configs for {_entity_text(entity)} are {configs}")
    return 0


def delete_main(args: argparse.Namespace) -> int:
    entity = _entity(args)
    if not entity:
        raise CommandError("name an entity: --user, --client-id or --ip (or a --*-default)")
    with protocol_cluster(args, "pybroker-quota") as cluster:
        keys = _configs(args)
        if not keys:
            found = _describe(cluster, entity, strict=True)
            keys = sorted({k for _, values in found for k in values})
        if not keys:
            raise CommandError(f"{_entity_text(entity)} has no quotas")
        return _alter(cluster, entity, [{"key": k, "value": 0.0, "remove": True}
                                        for k in keys])
