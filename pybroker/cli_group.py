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

from pybroker.cli_clients import add_bootstrap
from pybroker.cli_topic import _admin, _report

_TIMEOUT = 30.0


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
        add_bootstrap(parser)


def _error_text(error: Any) -> str:
    """A confluent-kafka ``KafkaError``, or an exception carrying one, as NAME: text."""
    err = error.args[0] if isinstance(error, Exception) and error.args else error
    if hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(err)


def _table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def list_main(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupState

    kwargs: dict[str, Any] = {"request_timeout": _TIMEOUT}
    if args.state:
        by_name = {s.name.lower().replace("_", ""): s for s in ConsumerGroupState}
        try:
            kwargs["states"] = {by_name[s.lower().replace("_", "")] for s in args.state}
        except KeyError as exc:
            raise SystemExit(f"unknown group state {exc}; one of "
                             f"{', '.join(s.name for s in ConsumerGroupState)}") from None
    admin = _admin(args)  # kept referenced: a collected client cancels its requests
    result = admin.list_consumer_groups(**kwargs).result(timeout=_TIMEOUT)
    for error in result.errors:
        print(f"error: {_error_text(error)}", file=sys.stderr)
    _table(["GROUP", "STATE"], [[g.group_id, _state_name(g.state)]
                                for g in sorted(result.valid, key=lambda g: g.group_id)])
    return 1 if result.errors else 0


def _state_name(state: Any) -> str:
    names = {"PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance"}
    name = getattr(state, "name", str(state))
    return names.get(name, name.title().replace("_", ""))


def _committed(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                request_timeout=_TIMEOUT)
    result = futures[group].result(timeout=_TIMEOUT)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []}


def _offsets(admin: Any, partitions: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int]:
    """ListOffsets of ``partitions`` at ``spec`` (earliest or latest)."""
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                 request_timeout=_TIMEOUT)
    out = {}
    for tp, future in futures.items():
        try:
            out[(tp.topic, tp.partition)] = future.result(timeout=_TIMEOUT).offset
        except Exception as exc:
            print(f"{tp.topic}-{tp.partition}: {_error_text(exc)}", file=sys.stderr)
    return out


def describe_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec

    admin = _admin(args)
    status = 0
    futures = admin.describe_consumer_groups(list(args.groups), request_timeout=_TIMEOUT)
    for group_id, future in futures.items():
        try:
            description = future.result(timeout=_TIMEOUT)
            committed = _committed(admin, group_id)
        except Exception as exc:
            print(f"{group_id}: {_error_text(exc)}", file=sys.stderr)
            status = 1
            continue
        if _state_name(description.state) == "Dead" and not committed:
            print(f"{group_id}: no such group", file=sys.stderr)  # Kafka describes it as Dead
            status = 1
            continue
        owner: dict[tuple[str, int], Any] = {}
        for member in description.members:
            for tp in member.assignment.topic_partitions:
                owner[(tp.topic, tp.partition)] = member
        partitions = sorted(set(committed) | set(owner))
        ends = _offsets(admin, partitions, OffsetSpec.latest())
        print(f"GROUP {group_id}  STATE {_state_name(description.state)}  "
              f"ASSIGNOR {description.partition_assignor or '-'}  "
              f"MEMBERS {len(description.members)}")
        rows = []
        for key in partitions:
            offset = committed.get(key, -1)
            end = ends.get(key)
            lag = end - offset if end is not None and offset >= 0 else "-"
            member = owner.get(key)
            rows.append([key[0], key[1], offset if offset >= 0 else "-",
                         "-" if end is None else end, lag,
                         member.member_id if member else "-",
                         member.host if member else "-",
                         member.client_id if member else "-"])
        _table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                "CONSUMER-ID", "HOST", "CLIENT-ID"], rows)
        print()
    return status


def delete_main(args: argparse.Namespace) -> int:
    admin = _admin(args)
    futures = admin.delete_consumer_groups(list(args.groups), request_timeout=_TIMEOUT)
    return _report(futures, "deleted")


def _targets(admin: Any, args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(_committed(admin, args.group))
    out = []
    for item in args.topic:
        topic, _, parts = item.partition(":")
        if parts:
            out += [(topic, int(p)) for p in parts.split(",") if p]
            continue
        metadata = admin.list_topics(topic, timeout=_TIMEOUT).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise SystemExit(f"{topic}: {metadata.error if metadata else 'unknown topic'}")
        out += [(topic, p) for p in sorted(metadata.partitions)]
    return out


def reset_offsets_main(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = _admin(args)
    group = args.group
    description = admin.describe_consumer_groups([group], request_timeout=_TIMEOUT)[group] \
        .result(timeout=_TIMEOUT)
    if description.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.UNKNOWN) \
            and description.members:
        print(f"{group}: offsets can only be reset while the group is empty (it is "
              f"{_state_name(description.state)} with {len(description.members)} members)",
              file=sys.stderr)
        return 1
    partitions = _targets(admin, args)
    earliest = _offsets(admin, partitions, OffsetSpec.earliest())
    latest = _offsets(admin, partitions, OffsetSpec.latest())
    committed = _committed(admin, group)
    plan: dict[tuple[str, int], int] = {}
    for key in partitions:
        if key not in earliest or key not in latest:
            continue
        if args.to_earliest:
            plan[key] = earliest[key]
        elif args.to_latest:
            plan[key] = latest[key]
        else:
            plan[key] = min(max(args.to_offset, earliest[key]), latest[key])
    _table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
           [[t, p, committed.get((t, p), "-"), offset] for (t, p), offset in plan.items()])
    if len(plan) < len(partitions):
        return 1
    if not args.execute:
        print("(dry run: add --execute to apply)")
        return 0
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, offset) for (t, p), offset in plan.items()])
    future = admin.alter_consumer_group_offsets([request], request_timeout=_TIMEOUT)[group]
    try:
        result = future.result(timeout=_TIMEOUT)
    except Exception as exc:
        print(f"{group}: {_error_text(exc)}", file=sys.stderr)
        return 1
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    for tp in failed:
        print(f"{tp.topic}-{tp.partition}: {tp.error}", file=sys.stderr)
    return 1 if failed else 0
