"""``pybroker group list|describe|delete|reset-offsets``: consumer groups and their lag.

Like Kafka's ``kafka-consumer-groups.sh``, over confluent-kafka's ``AdminClient``, so it
works against any Kafka-protocol broker (``--bootstrap HOST:PORT``):

    pybroker group list [--state Stable ...]
    pybroker group describe GROUP...        per partition: member, committed offset,
                                            log end offset, lag
    pybroker group delete GROUP...          only empty groups can be deleted
    pybroker group reset-offsets GROUP (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N) [--execute]

``reset-offsets`` prints the plan and changes nothing unless ``--execute`` is given, and
refuses a group that has members (they would overwrite the reset with their next commit).
``--to-offset`` is clamped into each partition's [earliest, latest], as Kafka's tool does.
Errors go to stderr and make the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pybroker.cli_connect import add_client_options
from pybroker.cli_topic import _admin, _report
from pybroker.kafka_admin import (
    apply_reset,
    committed_offsets,
    describe_group_lag,
    error_text,
    reset_plan,
    reset_refusal,
    state_name,
)


def register(subparsers: Any) -> None:
    """Add ``group`` and its subcommands to ``pybroker``'s parser."""
    group = subparsers.add_parser("group", help="list, describe, delete consumer groups; "
                                  "reset their offsets")
    sub = group.add_subparsers(dest="group_command", required=True)

    p = sub.add_parser("list", help="list consumer groups")
    p.add_argument("--state", action="append", default=[],
                   help="only groups in this state, e.g. Stable, Empty (repeatable)")
    p.set_defaults(func=list_main)

    p = sub.add_parser("describe", help="members, committed offsets and lag per partition")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    p.set_defaults(func=describe_main)

    p = sub.add_parser("delete", help="delete empty groups and their committed offsets")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    p.set_defaults(func=delete_main)

    p = sub.add_parser("reset-offsets", help="move an empty group's committed offsets")
    p.add_argument("group", metavar="GROUP")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                       help="topic, optionally with partitions (repeatable)")
    which.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    p.add_argument("--execute", action="store_true",
                   help="apply the plan (without it: print it only)")
    p.set_defaults(func=reset_offsets_main)

    for parser in sub.choices.values():
        add_client_options(parser)


def _table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def list_main(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupState

    kwargs: dict[str, Any] = {"request_timeout": args.timeout}
    if args.state:
        by_name = {s.name.lower().replace("_", ""): s for s in ConsumerGroupState}
        try:
            kwargs["states"] = {by_name[s.lower().replace("_", "")] for s in args.state}
        except KeyError as exc:
            raise SystemExit(f"unknown group state {exc}; one of "
                             f"{', '.join(s.name for s in ConsumerGroupState)}") from None
    admin = _admin(args)  # kept referenced: a collected client cancels its requests
    result = admin.list_consumer_groups(**kwargs).result(timeout=args.timeout)
    for error in result.errors:
        print(f"error: {error_text(error)}", file=sys.stderr)
    _table(["GROUP", "STATE"], [[g.group_id, state_name(g.state)]
                                for g in sorted(result.valid, key=lambda g: g.group_id)])
    return 1 if result.errors else 0


def describe_main(args: argparse.Namespace) -> int:
    admin = _admin(args)
    status = 0
    for group_id in args.groups:
        try:
            lag = describe_group_lag(admin, group_id, args.timeout)
        except Exception as exc:
            print(f"{group_id}: {error_text(exc)}", file=sys.stderr)
            status = 1
            continue
        if lag is None:
            print(f"{group_id}: no such group", file=sys.stderr)
            status = 1
            continue
        for (topic, partition), error in lag.errors.items():
            print(f"{topic}-{partition}: {error}", file=sys.stderr)
        print(f"GROUP {group_id}  STATE {lag.state}  ASSIGNOR {lag.assignor}  "
              f"MEMBERS {len(lag.members)}")
        _table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                "CONSUMER-ID", "HOST", "CLIENT-ID"],
               [[row.topic, row.partition, _or_dash(row.committed), _or_dash(row.end),
                 _or_dash(row.lag)]
                + ([row.member.member_id, row.member.host, row.member.client_id]
                   if row.member else ["-"] * 3)
                for row in lag.rows])
        print()
    return status


def _or_dash(value: int | None) -> int | str:
    return "-" if value is None else value


def delete_main(args: argparse.Namespace) -> int:
    admin = _admin(args)
    futures = admin.delete_consumer_groups(list(args.groups), request_timeout=args.timeout)
    return _report(futures, "deleted", args.timeout)


def _targets(admin: Any, args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed_offsets(admin, args.group, args.timeout))
    out = []
    for item in args.topic:
        topic, _, parts = item.partition(":")
        if parts:
            out += [(topic, int(p)) for p in parts.split(",") if p]
            continue
        metadata = admin.list_topics(topic, timeout=args.timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            reason = error_text(metadata.error) if metadata else "unknown topic"
            raise SystemExit(f"{topic}: {reason}")
        out += [(topic, p) for p in sorted(metadata.partitions)]
    return out


def reset_offsets_main(args: argparse.Namespace) -> int:
    admin = _admin(args)
    group = args.group
    refusal = reset_refusal(admin, group, args.timeout)
    if refusal is not None:
        print(f"{group}: {refusal}", file=sys.stderr)
        return 1
    partitions = _targets(admin, args)
    to = "earliest" if args.to_earliest else "latest" if args.to_latest else args.to_offset
    plan, failed = reset_plan(admin, partitions, to, args.timeout)
    for (topic, partition), error in failed.items():
        print(f"{topic}-{partition}: {error}", file=sys.stderr)
    committed = committed_offsets(admin, group, args.timeout)
    _table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
           [[t, p, committed.get((t, p), "-"), offset] for (t, p), offset in plan.items()])
    if len(plan) < len(partitions):
        return 1
    if not args.execute:
        print("(dry run: add --execute to apply)")
        return 0
    errors = apply_reset(admin, group, plan, args.timeout)
    for key, error in errors.items():
        print(f"{group if key is None else f'{key[0]}-{key[1]}'}: {error}", file=sys.stderr)
    return 1 if errors else 0
