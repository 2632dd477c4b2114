"""``pybroker partition elect``: operations on partitions, as Kafka's partition tools.

    pybroker partition elect --type preferred|unclean (--all | --topic T [--partition P])

``elect`` is ``kafka-leader-election.sh``: ElectLeaders through confluent-kafka's
``AdminClient`` (sent to the controller, any Kafka broker), for every partition
(``--all``), every partition of a topic, or one. Preferred gives a partition back to its
first replica when that one is live and in the ISR; unclean gives a partition without a
live leader the first live replica, losing what that one lacks. One line per partition:
elected on stdout, "election not needed" for a partition already led as asked (not an
error, as Kafka's tool counts it), Kafka's error name and text on stderr for a partition
that could not be elected, which makes the exit status 1. With ``--all`` the broker
answers only the partitions that needed an election.

Each subcommand is added by its ``_add_<name>(sub)``, called from ``register``, which
gives every one the client options (``cli_connect``): ``--bootstrap``, ``--timeout``,
``-v``, ``--command-config``, and one line on stderr when no broker answers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pybroker.cli import CommandError
from pybroker.cli_connect import BrokerClients, add_client_options
from pybroker.kafka_admin import error_name, error_text

ELECTION_NOT_NEEDED = "ELECTION_NOT_NEEDED"


def register(subparsers: Any) -> None:
    """Add ``partition`` and its subcommands to ``pybroker``'s parser."""
    partition = subparsers.add_parser("partition", help="elect partition leaders")
    sub = partition.add_subparsers(dest="partition_command", required=True)
    _add_elect(sub)
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

