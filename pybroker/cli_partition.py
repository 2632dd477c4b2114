"""``pybroker partition elect|move|reassignments``: operations on partitions, as Kafka's
partition tools.

    pybroker partition elect --type preferred|unclean (--all | --topic T [--partition P])
    pybroker partition move TOPIC PARTITION --replicas 1,2,3 [--throttle BYTES_PER_S]
                                [--no-wait]
    pybroker partition reassignments [--topic T ...] [--cancel | --clear-throttles]

``elect`` is ``kafka-leader-election.sh``: ElectLeaders through confluent-kafka's
``AdminClient`` (sent to the controller, any Kafka broker), for every partition
(``--all``), every partition of a topic, or one. Preferred gives a partition back to its
first replica when that one is live and in the ISR; unclean gives a partition without a
live leader the first live replica, losing what that one lacks. One line per partition:
elected on stdout, "election not needed" for a partition already led as asked (not an
error, as Kafka's tool counts it), Kafka's error name and text on stderr for a partition
that could not be elected, which makes the exit status 1. With ``--all`` the broker
answers only the partitions that needed an election.

``move`` and ``reassignments`` are ``kafka-reassign-partitions.sh``'s. ``move`` starts
the reassignment of one partition to the replicas given (the first the preferred leader)
and, as ``cluster rebalance --execute`` does (``cli_cluster``), reports until it is done,
a throttle set for it and removed after. ``reassignments`` lists the ones in progress
(replicas, adding, removing), ``--cancel`` cancels them (each partition goes back to the
replicas it had before, as Kafka's cancellation does), ``--clear-throttles`` removes
every replication throttle the commands set (every live broker's rates, every topic's
throttled replicas) once nothing is moving: after a ``--no-wait`` run, as Kafka's
``--verify`` does. librdkafka has no AlterPartitionReassignments or
ListPartitionReassignments: these go through pybroker's own client
(``pybroker.reassignment_admin``), SASL and TLS as ``txn``'s (``--command-config``).

Each subcommand is added by its ``_add_<name>(sub)``, called from ``register``, which
gives every one the client options (``cli_connect``): ``--bootstrap``, ``--timeout``,
``-v``, ``--command-config``, and one line on stderr when no broker answers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pybroker.cli import CommandError
from pybroker.cli_cluster import add_reassign_options, run_reassignment
from pybroker.cli_connect import BrokerClients, add_client_options, protocol_cluster
from pybroker.cli_group import _table
from pybroker.cli_topic import _ids
from pybroker.kafka_admin import error_name, error_text

ELECTION_NOT_NEEDED = "ELECTION_NOT_NEEDED"


def register(subparsers: Any) -> None:
    """Add ``partition`` and its subcommands to ``pybroker``'s parser."""
    partition = subparsers.add_parser(
        "partition", help="elect partition leaders; move replicas; reassignments in progress")
    sub = partition.add_subparsers(dest="partition_command", required=True)
    _add_elect(sub)
    _add_move(sub)
    _add_reassignments(sub)
    for parser in sub.choices.values():
        add_client_options(parser)


def _add_elect(sub: Any) -> None:
    p = sub.add_parser("elect", help="elect partition leaders: the preferred replica, or an "
                       "unclean leader where there is none (kafka-leader-election.sh)")
    p.set_defaults(func=elect_main)
    p.add_argument("--type", dest="election_type", required=True,
                   choices=("preferred", "unclean"),
                   help="preferred: the first replica leads again where it is live and in "
                        "the ISR; unclean: a partition without a live leader gets the first "
                        "live replica, even outside the ISR (what it lacks is lost)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every partition of every topic")
    which.add_argument("--topic", "-t", help="the partitions of this topic")
    p.add_argument("--partition", "-p", type=int, metavar="P",
                   help="only this partition of --topic")


def elect_main(args: argparse.Namespace) -> int:
    from confluent_kafka import ElectionType, TopicPartition

    if args.partition is not None and args.topic is None:
        raise CommandError("--partition needs --topic")
    clients = BrokerClients(args)
    admin = clients.admin()  # held until the future resolves: a collected client fails it
    metadata = clients.metadata()
    partitions: list[Any] | None = None
    if args.topic is not None:
        topic = metadata.topics.get(args.topic)
        if args.partition is not None:
            partitions = [TopicPartition(args.topic, args.partition)]
        elif topic is None or topic.error is not None:
            print(f"{args.topic}: {topic.error if topic else 'UNKNOWN_TOPIC_OR_PARTITION'}",
                  file=sys.stderr)
            return 1
        else:
            partitions = [TopicPartition(args.topic, p) for p in sorted(topic.partitions)]
    kind = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    # no request_timeout/operation_timeout: confluent-kafka 2.16's elect_leaders refuses
    # them (SystemError from its C keyword list); the wait below bounds the command
    results = admin.elect_leaders(kind, partitions).result(timeout=args.timeout)
    if not results:
        print("no partition needed an election")
    status = 0
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic,
                                                                 item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if error is None:
            print(f"{name}: elected ({args.election_type})")
        elif error_name(error) == ELECTION_NOT_NEEDED:
            print(f"{name}: election not needed")
        else:
            print(f"{name}: {error_text(error)}", file=sys.stderr)
            status = 1
    return status


def _add_move(sub: Any) -> None:
    p = sub.add_parser(
        "move", help="reassign one partition to the replicas given",
        description="Move TOPIC's PARTITION to the brokers of --replicas (the first the "
        "preferred leader): they copy it as followers, join the in-sync replicas, then "
        "the replicas not listed are removed.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("partition", type=int, metavar="PARTITION")
    p.add_argument("--replicas", required=True, type=_broker_ids, metavar="ID,ID,...",
                   help="the target replicas, preferred leader first")
    add_reassign_options(p, execute=False)
    p.set_defaults(func=move_main)


def _add_reassignments(sub: Any) -> None:
    p = sub.add_parser("reassignments", help="reassignments in progress; cancel them")
    p.add_argument("--topic", "-t", action="append", default=[], metavar="TOPIC",
                   help="only this topic's (repeatable)")
    actions = p.add_mutually_exclusive_group()
    actions.add_argument("--cancel", action="store_true",
                         help="cancel them: each partition keeps its replicas from before")
    actions.add_argument("--clear-throttles", action="store_true",
                         help="remove the replication throttles of every broker and topic "
                         "(refused while a reassignment is in progress)")
    p.set_defaults(func=reassignments_main)


def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"broker ids separated by commas, not {text!r}") \
            from None
    if len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"a broker appears twice in {text!r}")
    return ids


def move_main(args: argparse.Namespace) -> int:
    from pybroker import reassignment_admin

    with protocol_cluster(args, "pybroker-reassign") as cluster:
        layout = reassignment_admin.read_layout(cluster, [args.topic])
        partition = (args.topic, args.partition)
        if partition not in layout.assignment:
            raise CommandError(f"topic {args.topic} has no partition {args.partition}")
        absent = [b for b in args.replicas if b not in layout.brokers]
        if absent:
            raise CommandError(f"no live broker {_ids(absent)} (live: "
                               f"{_ids(sorted(layout.brokers))})")
        current = layout.assignment[partition]
        print(f"{args.topic}-{args.partition}: {_ids(current)} -> {_ids(args.replicas)}")
        if current == args.replicas:
            print("Nothing to move.")
            return 0
        return run_reassignment(args, cluster, {partition: current},
                                {partition: args.replicas})


def reassignments_main(args: argparse.Namespace) -> int:
    from pybroker import reassignment_admin

    with protocol_cluster(args, "pybroker-reassign") as cluster:
        listed = reassignment_admin.ongoing(cluster)
        if args.topic:
            listed = {p: o for p, o in listed.items() if p[0] in args.topic}
        if args.clear_throttles:
            if listed:
                raise CommandError(f"{len(listed)} reassignments in progress: the "
                                   "throttles stay until they are done")
            layout = reassignment_admin.read_layout(cluster, args.topic or None)
            reassignment_admin.clear_throttles(cluster, layout.brokers,
                                         {t for t, _ in layout.assignment})
            print("Throttles removed")
            return 0
        if not listed:
            print("No reassignment in progress.")
            return 0
        _table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
               [[t, p, _ids(o.replicas), _ids(o.adding), _ids(o.removing)]
                for (t, p), o in sorted(listed.items())])
        if not args.cancel:
            return 0
        refused = reassignment_admin.alter(cluster, {p: None for p in listed}, args.timeout)
        for (topic, index), error in sorted(refused.items()):
            print(f"{topic}-{index}: {error}", file=sys.stderr)
        print(f"Cancelled {len(listed) - len(refused)} reassignments")
        return 1 if refused else 0
