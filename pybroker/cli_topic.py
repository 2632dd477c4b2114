"""``pybroker topic create|list|describe|delete|alter-config|add-partitions``.

An rpk-like front end to the admin APIs over confluent-kafka's ``AdminClient``, so it
works against any Kafka broker (``--bootstrap HOST:PORT``). ``describe`` prints each
partition's leader, replicas and ISR as Metadata gives them (a single node is all three;
a cluster member answers its metadata cache, which the controller keeps current) with its
low and high watermark, the replicas being added and removed while a partition is moved
(as Kafka's ``kafka-topics.sh --describe``; ListPartitionReassignments, through pybroker's
own client since librdkafka has no call for it), and the partition's error: KAFKA_STORAGE_ERROR while pybroker's
writes there fail (``pybroker.metadata.single_node``). For a compacted topic it also
prints the log cleaner's state of each partition (the offset cleaned up to, the dirty
ratio) on each broker whose data directory is given (``--data-dir``, repeatable): Kafka
reports these only as metrics and log lines, no protocol API carries them, so they come
from the stats file the broker writes (``Broker.write_stats``), not over the network.
Errors the broker answers are printed one line per topic to stderr and make the exit
status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from pybroker.cli_connect import BrokerClients, add_client_options, report_each
from pybroker.kafka_admin import error_text

LIST_PARTITION_REASSIGNMENTS = 46


def register(subparsers: Any) -> None:
    """Add ``topic`` and its subcommands to ``pybroker``'s parser."""
    topic = subparsers.add_parser("topic", help="create, list, describe, delete, configure")
    sub = topic.add_subparsers(dest="topic_command", required=True)

    p = sub.add_parser("create", help="create topics")
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.add_argument("--partitions", "-p", type=int, default=-1,
                   help="partition count (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", "--replicas", "-r", dest="replicas", type=int,
                   default=-1, help="replicas of each partition (default: the broker's "
                   "default.replication.factor; a single node accepts only 1)")
    p.add_argument("--config", "-c", action="append", default=[], metavar="K=V",
                   help="topic config (repeatable)")
    p.add_argument("--validate-only", action="store_true")
    p.set_defaults(func=create_main)

    p = sub.add_parser("list", help="list topics")
    p.add_argument("--internal", "-i", action="store_true", help="include internal topics")
    p.set_defaults(func=list_main)

    p = sub.add_parser("describe", help="partitions (leader, replicas, in-sync replicas, "
                       "watermarks), configs and log cleaner state of topics")
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.add_argument("--all-configs", "-a", action="store_true",
                   help="every config, not only the ones set on the topic or broker")
    p.add_argument("--data-dir", dest="data_dirs", action="append", default=[],
                   metavar="DIR", help="a pybroker broker's data directory (or its "
                   "stats.file), repeatable: one per broker of a cluster. The log cleaner's "
                   "state of each partition of a compacted topic (last cleaned offset, "
                   "dirty ratio) is read from the stats file the broker writes there every "
                   "stats.interval.ms: Kafka's protocol does not carry it, so it is shown "
                   "only where the broker's files can be read")
    p.set_defaults(func=describe_main)

    p = sub.add_parser("delete", help="delete topics")
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.set_defaults(func=delete_main)

    p = sub.add_parser("alter-config", help="set or delete topic configs (incremental)")
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.add_argument("--set", "-s", action="append", default=[], metavar="K=V")
    p.add_argument("--delete", "-d", action="append", default=[], metavar="K",
                   help="remove the override, back to the default")
    p.add_argument("--append", action="append", default=[], metavar="K=V",
                   help="add V to a list config")
    p.add_argument("--subtract", action="append", default=[], metavar="K=V",
                   help="remove V from a list config")
    p.add_argument("--validate-only", action="store_true")
    p.set_defaults(func=alter_config_main)

    p = sub.add_parser("add-partitions", help="raise the partition count of topics")
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.add_argument("--num", "-n", type=int, required=True, help="partitions to add")
    p.set_defaults(func=add_partitions_main)

    for parser in sub.choices.values():
        add_client_options(parser)


def _connect(args: argparse.Namespace) -> tuple[Any, Any]:
    """The command's admin client and the metadata of every topic: asking for it fails the
    command at once when no broker answers (``BrokerClients.metadata``)."""
    clients = BrokerClients(args)
    return clients.admin(), clients.metadata()


def _admin(args: argparse.Namespace) -> Any:
    """The command's admin client, once a broker has answered."""
    return _connect(args)[0]


def parse_pairs(pairs: Iterable[str], option: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{option} {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _report(futures: dict[Any, Any], done: str, timeout: float) -> int:
    """Wait for per-item futures; one line each; 1 if any failed."""
    def name(item: Any) -> str:
        return str(getattr(item, "name", None) or getattr(item, "topic", None) or item)
    return report_each(futures, timeout, lambda item: f"{name(item)}: {done}", name)


def create_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewTopic

    configs = parse_pairs(args.config, "--config")
    topics = [NewTopic(name, num_partitions=args.partitions,
                       replication_factor=args.replicas, config=configs)
              for name in args.names]
    admin = _admin(args)  # held until the futures resolve: a collected client fails them
    futures = admin.create_topics(topics, operation_timeout=args.timeout,
                                  request_timeout=args.timeout,
                                  validate_only=args.validate_only)
    return _report(futures, "validated" if args.validate_only else "created", args.timeout)


def list_main(args: argparse.Namespace) -> int:
    from pybroker.broker.topic_manager import INTERNAL_TOPICS  # (only this command needs it)

    _, metadata = _connect(args)
    rows = [(name, len(t.partitions)) for name, t in sorted(metadata.topics.items())
            if args.internal or name not in INTERNAL_TOPICS]
    width = max([len("NAME")] + [len(name) for name, _ in rows])
    print(f"{'NAME':<{width}}  PARTITIONS")
    for name, count in rows:
        print(f"{name:<{width}}  {count}")
    return 0


def describe_main(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import ConfigResource, ConfigSource

    from pybroker.cli_group import _table  # (it imports this module: not at the top)

    admin, metadata = _connect(args)
    status = 0
    brokers_stats = _read_stats(args.data_dirs) if args.data_dirs else None
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in args.names]
    config_futures = admin.describe_configs(resources, request_timeout=args.timeout)
    reassignments = _reassignments(args, args.names)
    for resource, future in config_futures.items():
        name = resource.name
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            print(f"{name}: {topic.error if topic else 'UNKNOWN_TOPIC_OR_PARTITION'}",
                  file=sys.stderr)
            status = 1
            continue
        try:
            configs = future.result(timeout=args.timeout)
        except Exception as exc:
            print(f"{name}: {error_text(exc)}", file=sys.stderr)
            status = 1
            continue
        print(f"NAME        {name}")
        print(f"PARTITIONS  {len(topic.partitions)}")
        offsets = _watermarks(args, name, sorted(topic.partitions), TopicPartition)
        moving = {index: change for (t, index), change in reassignments.items() if t == name}
        rows = []
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            low, high = offsets.get(index, ("-", "-"))
            adding, removing = moving.get(index, ([], []))
            rows.append([index, p.leader, _ids(p.replicas), _ids(p.isrs),
                         *([_ids(adding), _ids(removing)] if moving else []), low, high,
                         "" if p.error is None else p.error.name()])
        print()
        _table(["PARTITION", "LEADER", "REPLICAS", "ISR",
                *(["ADDING", "REMOVING"] if moving else []), "LOW", "HIGH", "ERROR"], rows)
        if any(row[-1] == "KAFKA_STORAGE_ERROR" for row in rows):
            print("\nKAFKA_STORAGE_ERROR: the broker refused writes to the partition in the "
                  "last minute (disk full or failing: see the broker's log)")
        policy = configs.get("cleanup.policy")
        if policy is not None and "compact" in (policy.value or ""):
            print()
            if brokers_stats is None:
                print("CLEANER  (with --data-dir: read from the broker's stats file)")
            else:
                _table(["PARTITION", "BROKER", "CLEANED-UP-TO", "DIRTY-RATIO", "AS-OF"],
                       _cleaner_rows(name, sorted(topic.partitions), brokers_stats))
        print("\nKEY  VALUE  SOURCE")
        for entry in sorted(configs.values(), key=lambda e: e.name):
            default = entry.source == ConfigSource.DEFAULT_CONFIG.value
            if default and not args.all_configs:
                continue
            source = ConfigSource(entry.source).name
            print(f"{entry.name}  {entry.value}  {source}")
        print()
    return status


def _reassignments(args: argparse.Namespace, names: list[str]
                   ) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
    """The replicas being added and removed of each partition of ``names`` being moved
    (ListPartitionReassignments). librdkafka has no call for it: pybroker's own client
    asks (with ``--command-config``'s security, as ``txn``'s); nothing is shown where it
    cannot (a broker that does not serve the API)."""
    from pybroker.cli_connect import command_config
    from pybroker.client.cluster import Cluster
    from pybroker.client.security import client_security

    try:
        security = client_security(command_config(args.command_config))
    except (ValueError, OSError):  # librdkafka-only settings: describe without the columns
        return {}
    cluster = Cluster(args.bootstrap, "pybroker-topic", timeout=args.timeout,
                      security=security)
    try:
        cluster.refresh([], auto_create=False, attempts=1)
        answer = cluster.connection(min(cluster.brokers)).request(
            LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": int(args.timeout * 1000),
                                              "topics": None})
    except (OSError, ValueError):
        return {}
    finally:
        cluster.close()
    return {(t["name"], p["partition_index"]): (p["adding_replicas"], p["removing_replicas"])
            for t in answer["topics"] if t["name"] in names for p in t["partitions"]}


def _read_stats(paths: list[str]) -> list[dict[str, Any]]:
    """The stats file of each broker given by its data directory (or the file itself)."""
    from pybroker.broker.files import STATS_FILE, read_json

    found = []
    for path in paths:
        file = os.path.join(path, STATS_FILE) if os.path.isdir(path) else path
        try:
            stats = read_json(file)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"{file}: cannot read the broker's stats: {exc}") from None
        if not isinstance(stats, dict):
            raise SystemExit(f"{file}: no stats file (is a broker running on this data "
                             "directory?)")
        found.append(stats)
    return found


def _cleaner_rows(topic: str, partitions: list[int],
                  brokers_stats: list[dict[str, Any]]) -> list[list[Any]]:
    """A row per partition and broker holding it: the checkpoint (``-``: never cleaned),
    the dirty ratio, and when the broker wrote them."""
    rows = []
    for index in partitions:
        held = False
        for stats in brokers_stats:
            for state in stats.get("cleaner", []):
                if (state["topic"], state["partition"]) == (topic, index):
                    held = True
                    cleaned = state["cleaned_up_to"]
                    rows.append([index, stats.get("broker_id", "-"),
                                 "-" if cleaned is None else cleaned,
                                 f"{state['dirty_ratio']:.3f}",
                                 time.strftime("%H:%M:%S", time.localtime(stats["time"]))])
        if not held:
            rows.append([index, "-", "-", "-", "-"])
    return rows


def _ids(broker_ids: list[int]) -> str:
    """Kafka's tool prints ``1,2,3``; an empty list (no replica known) prints ``-``."""
    return ",".join(map(str, broker_ids)) or "-"


def _watermarks(args: argparse.Namespace, topic: str, partitions: list[int],
                topic_partition: Any) -> dict[int, tuple[int, int]]:
    """Low and high watermark per partition (a throwaway consumer asks ListOffsets)."""
    from confluent_kafka import KafkaException

    consumer = BrokerClients(args).consumer(**{"group.id": "pybroker-cli",
                                               "enable.auto.commit": False})
    try:
        return {p: consumer.get_watermark_offsets(topic_partition(topic, p),
                                                  timeout=args.timeout)
                for p in partitions}
    except KafkaException:
        return {}
    finally:
        consumer.close()


def delete_main(args: argparse.Namespace) -> int:
    admin = _admin(args)
    futures = admin.delete_topics(list(args.names), operation_timeout=args.timeout,
                                  request_timeout=args.timeout)
    return _report(futures, "deleted", args.timeout)


def alter_config_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    ops: list[tuple[Any, dict[str, Any]]] = [
        (AlterConfigOpType.SET, parse_pairs(args.set, "--set")),
        (AlterConfigOpType.APPEND, parse_pairs(args.append, "--append")),
        (AlterConfigOpType.SUBTRACT, parse_pairs(args.subtract, "--subtract")),
        (AlterConfigOpType.DELETE, dict.fromkeys(args.delete))]
    entries = [ConfigEntry(key, value, incremental_operation=op)
               for op, pairs in ops for key, value in pairs.items()]
    if not entries:
        raise SystemExit("alter-config: nothing to change (use --set, --delete, ...)")
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name,
                                incremental_configs=entries) for name in args.names]
    admin = _admin(args)
    futures = admin.incremental_alter_configs(resources, request_timeout=args.timeout,
                                              validate_only=args.validate_only)
    return _report(futures, "validated" if args.validate_only else "altered", args.timeout)


def add_partitions_main(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewPartitions

    admin, metadata = _connect(args)
    requests = []
    status = 0
    for name in args.names:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            print(f"{name}: UNKNOWN_TOPIC_OR_PARTITION", file=sys.stderr)
            status = 1
            continue
        requests.append(NewPartitions(name, len(topic.partitions) + args.num))
    if requests:
        futures = admin.create_partitions(requests, operation_timeout=args.timeout,
                                          request_timeout=args.timeout)
        status |= _report(futures, f"added {args.num} partitions", args.timeout)
    return status
