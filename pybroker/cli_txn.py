"""``pybroker txn list|describe|abort|find-hanging``: transactions, as Kafka's
``kafka-transactions.sh`` shows and mends them.

librdkafka has no admin call for transactions, so these commands speak the protocol
through pybroker's own client (:class:`pybroker.client.Cluster`); they work against any
Kafka-protocol broker (``--bootstrap HOST:PORT``, and ``--command-config FILE`` for a TLS
or SASL listener, as the other commands: :mod:`pybroker.client.security`):

    pybroker txn list [--state Ongoing ...]     ListTransactions at every broker (each
                                                coordinator knows its own ids)
    pybroker txn describe ID...                 DescribeTransactions at the id's coordinator:
                                                state, producer id/epoch, timeout, start
                                                time, partitions
    pybroker txn abort ID                       abort the open transaction of a
                                                transactional id
    pybroker txn abort --topic T --partition P (--start-offset O |
        --producer-id N --producer-epoch E --coordinator-epoch C)
                                                abort a hanging transaction on a partition
    pybroker txn find-hanging [--topic T [--partition P]] [--max-transaction-timeout MIN]

Two ways to abort, as Kafka has. ``abort ID`` is Kafka's ``forceTerminateTransaction``:
an InitProducerId with the transactional id, which bumps its epoch; the coordinator aborts
the open transaction (markers on every partition of it) and fences the id's producers,
whose next request fails. It refuses an id with no open transaction rather than fence a
healthy producer. ``abort --topic ...`` is Kafka's ``abort``, for a *hanging* transaction:
one a partition holds open though its coordinator has no transaction for it (a marker
lost, a coordinator's state lost), which holds the partition's last stable offset, and so
every read_committed reader, back forever. It writes the abort marker on that partition
alone (WriteTxnMarkers to its leader) for the producer the partition names: by
``--start-offset``, the producer whose open transaction began there (from
DescribeProducers), or given in full.

``find-hanging`` is Kafka's: DescribeProducers at the partitions' leaders finds the
producers with a transaction open longer than ``--max-transaction-timeout`` (default
Kafka's ``transaction.max.timeout.ms``, 15 minutes: no coordinator lets a transaction
live longer), then keeps those their coordinator does not account for (ListTransactions
by producer id, then DescribeTransactions: no transactional id, another producer epoch,
no transaction in progress, or one without this partition). Each is printed with what
``abort --topic`` needs.

Errors go to stderr with Kafka's error name and make the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from pybroker.cli_connect import add_client_options, protocol_cluster
from pybroker.cli_group import _table
from pybroker.client.cluster import Cluster
from pybroker.errors import ErrorCode, KafkaError

DESCRIBE_PRODUCERS, LIST_TRANSACTIONS, WRITE_TXN_MARKERS = 61, 66, 27
# Kafka's transaction.max.timeout.ms default: no transaction outlives it at its coordinator.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES = 15
# States in which the coordinator drives a transaction to its end (markers pending or
# the timeout to come); a partition's open transaction outside them is hanging.
_IN_PROGRESS = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


def register(subparsers: Any) -> None:
    """Add ``txn`` and its subcommands to ``pybroker``'s parser."""
    txn = subparsers.add_parser("txn", help="list, describe and abort transactions; find "
                                "hanging ones")
    sub = txn.add_subparsers(dest="txn_command", required=True)

    p = sub.add_parser("list", help="transactional ids with their producer id and state")
    p.add_argument("--state", action="append", default=[],
                   help="only transactions in this state, e.g. Ongoing (repeatable)")
    p.set_defaults(func=list_main)

    p = sub.add_parser("describe", help="state, partitions, timeout, producer of an id")
    p.add_argument("ids", nargs="+", metavar="TRANSACTIONAL_ID")
    p.set_defaults(func=describe_main)

    p = sub.add_parser("abort", help="abort the open transaction of an id, or a hanging "
                       "transaction on one partition")
    p.add_argument("id", nargs="?", metavar="TRANSACTIONAL_ID",
                   help="abort this id's open transaction (fences its producers)")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--start-offset", type=int,
                   help="the offset the hanging transaction began at (find-hanging)")
    p.add_argument("--producer-id", type=int)
    p.add_argument("--producer-epoch", type=int)
    p.add_argument("--coordinator-epoch", type=int)
    p.set_defaults(func=abort_main)

    p = sub.add_parser("find-hanging", help="partitions held open by a transaction its "
                       "coordinator no longer drives")
    p.add_argument("--topic", action="append", default=[],
                   help="search this topic (repeatable; default: every topic)")
    p.add_argument("--partition", type=int, help="only this partition of --topic")
    p.add_argument("--max-transaction-timeout", type=float,
                   default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES, metavar="MINUTES",
                   help="the brokers' transaction.max.timeout.ms, in minutes "
                        f"(default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES})")
    p.set_defaults(func=find_hanging_main)

    for parser in sub.choices.values():
        add_client_options(parser)


def _error(what: str, code: int) -> None:
    print(f"error: {what}: {ErrorCode(code).name}", file=sys.stderr)


def _list_transactions(cluster: Cluster, states: list[str], producer_ids: list[int]
                       ) -> tuple[list[tuple[int, dict]], int]:
    """(broker id, transaction) from every broker's ListTransactions, and 1 on an error."""
    found, status = [], 0
    for broker_id in sorted(cluster.brokers):
        response = cluster.connection(broker_id).request(
            LIST_TRANSACTIONS, 0, {"state_filters": states, "producer_id_filters": producer_ids})
        if response["error_code"] != ErrorCode.NONE:
            _error(f"ListTransactions at broker {broker_id}", response["error_code"])
            status = 1
        for unknown in response["unknown_state_filters"]:
            print(f"error: unknown transaction state {unknown!r}", file=sys.stderr)
            status = 1
        found += [(broker_id, t) for t in response["transaction_states"]]
    return found, status


def list_main(args: argparse.Namespace) -> int:
    with protocol_cluster(args, "pybroker-txn") as cluster:
        found, status = _list_transactions(cluster, args.state, [])
    _table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
           [[t["transactional_id"], broker_id, t["producer_id"], t["transaction_state"]]
            for broker_id, t in sorted(found, key=lambda f: f[1]["transactional_id"])])
    return status


def describe_main(args: argparse.Namespace) -> int:
    rows, status = [], 0
    now = int(time.time() * 1000)
    with protocol_cluster(args, "pybroker-txn") as cluster:
        for transactional_id in args.ids:
            state = cluster.describe_transaction(transactional_id)
            if state["error_code"] != ErrorCode.NONE:
                _error(transactional_id, state["error_code"])
                status = 1
                continue
            start = state["transaction_start_time_ms"]
            partitions = ",".join(f"{t['topic']}-{p}" for t in state["topics"]
                                  for p in t["partitions"])
            rows.append([transactional_id, state["producer_id"], state["producer_epoch"],
                         state["transaction_state"], state["transaction_timeout_ms"],
                         _time_text(start), "-" if start < 0 else now - start,
                         partitions or "-"])
    if rows:
        _table(["TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS",
                "START-TIME", "DURATION-MS", "PARTITIONS"], rows)
    return status


def _time_text(ms: int) -> str:
    if ms < 0:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def abort_main(args: argparse.Namespace) -> int:
    by_partition = args.topic is not None or args.partition is not None
    if args.id is not None and by_partition:
        raise SystemExit("abort: give a transactional id or --topic/--partition, not both")
    if args.id is not None:
        with protocol_cluster(args, "pybroker-txn") as cluster:
            return _abort_transactional_id(cluster, args.id)
    if args.topic is None or args.partition is None:
        raise SystemExit("abort: give a transactional id, or --topic and --partition")
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    given = sum(v is not None for v in explicit)
    if (args.start_offset is None and given < 3) or (args.start_offset is not None and given):
        raise SystemExit("abort: give --start-offset, or all of --producer-id, "
                         "--producer-epoch and --coordinator-epoch")
    with protocol_cluster(args, "pybroker-txn") as cluster:
        if args.start_offset is None:
            producer = {"producer_id": args.producer_id, "producer_epoch": args.producer_epoch,
                        "coordinator_epoch": args.coordinator_epoch}
        else:
            producers = _describe_producers(cluster, args.topic, [args.partition])
            error, active = producers[args.partition]
            if error:
                _error(f"DescribeProducers {args.topic}-{args.partition}", error)
                return 1
            matching = [p for p in active if p["current_txn_start_offset"] == args.start_offset]
            if not matching:
                print(f"error: no open transaction began at offset {args.start_offset} of "
                      f"{args.topic}-{args.partition}", file=sys.stderr)
                return 1
            producer = matching[0]
        return _write_abort_marker(cluster, args.topic, args.partition, producer)


def _abort_transactional_id(cluster: Cluster, transactional_id: str) -> int:
    state = cluster.describe_transaction(transactional_id)
    if state["error_code"] != ErrorCode.NONE:
        _error(transactional_id, state["error_code"])
        return 1
    if state["transaction_state"] not in _IN_PROGRESS:
        print(f"error: {transactional_id} has no open transaction "
              f"({state['transaction_state']})", file=sys.stderr)
        return 1
    try:
        producer_id, epoch = cluster.init_producer_id(transactional_id,
                                                      state["transaction_timeout_ms"])
    except KafkaError as exc:
        _error(f"InitProducerId({transactional_id})", exc.code)
        return 1
    print(f"{transactional_id}: aborted the transaction of producer id "
          f"{state['producer_id']} epoch {state['producer_epoch']}; the id's producers are "
          f"fenced (producer id {producer_id} epoch {epoch} now)")
    return 0


def _describe_producers(cluster: Cluster, topic: str, partitions: list[int]
                        ) -> dict[int, tuple[int, list[dict]]]:
    """Per partition: (error code, active producers) from DescribeProducers at its leader."""
    meta = cluster.topic(topic)
    by_leader: dict[int, list[int]] = {}
    for p in partitions:
        by_leader.setdefault(meta.leaders[p], []).append(p)
    out = {}
    for leader, parts in by_leader.items():
        response = cluster.connection(leader).request(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": parts}]})
        for t in response["topics"]:
            for p in t["partitions"]:
                out[p["partition_index"]] = (p["error_code"], p["active_producers"])
    return out


def _write_abort_marker(cluster: Cluster, topic: str, partition: int, producer: dict) -> int:
    leader = cluster.topic(topic).leaders[partition]
    response = cluster.connection(leader).request(WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"],
        "transaction_result": False, "coordinator_epoch": producer["coordinator_epoch"],
        "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
    code = response["markers"][0]["topics"][0]["partitions"][0]["error_code"]
    if code != ErrorCode.NONE:
        _error(f"WriteTxnMarkers {topic}-{partition}", code)
        return 1
    print(f"{topic}-{partition}: aborted the transaction of producer id "
          f"{producer['producer_id']} epoch {producer['producer_epoch']}")
    return 0


def find_hanging_main(args: argparse.Namespace) -> int:
    if args.partition is not None and len(args.topic) != 1:
        raise SystemExit("find-hanging: --partition goes with one --topic")
    max_age_ms = args.max_transaction_timeout * 60_000
    now = int(time.time() * 1000)
    status = 0
    with protocol_cluster(args, "pybroker-txn") as cluster:
        topics = args.topic or sorted(t for t in cluster.topics if not t.startswith("__"))
        # (topic, partition, producer) of every transaction open longer than any may be
        candidates = []
        for topic in topics:
            meta = cluster.topic(topic)
            partitions = ([args.partition] if args.partition is not None
                          else list(range(meta.partitions)))
            for p, (error, active) in sorted(_describe_producers(cluster, topic,
                                                                 partitions).items()):
                if error:
                    _error(f"DescribeProducers {topic}-{p}", error)
                    status = 1
                    continue
                candidates += [(topic, p, producer) for producer in active
                               if producer["current_txn_start_offset"] >= 0
                               and now - producer["last_timestamp"] > max_age_ms]
        hanging = _not_driven_by_a_coordinator(cluster, candidates)
    _table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
            "START-OFFSET", "LAST-TIMESTAMP", "DURATION-MIN"],
           [[topic, p, producer["producer_id"], producer["producer_epoch"],
             producer["coordinator_epoch"], producer["current_txn_start_offset"],
             _time_text(producer["last_timestamp"]),
             (now - producer["last_timestamp"]) // 60_000]
            for topic, p, producer in hanging])
    return status


def _not_driven_by_a_coordinator(cluster: Cluster, candidates: list) -> list:
    """The candidates whose coordinator has no transaction in progress with their
    producer (id and epoch) on their partition: those no timeout will ever abort."""
    if not candidates:
        return []
    producer_ids = sorted({producer["producer_id"] for _, _, producer in candidates})
    listed, _ = _list_transactions(cluster, [], producer_ids)
    transactional_ids = {t["producer_id"]: t["transactional_id"] for _, t in listed}
    hanging = []
    for topic, p, producer in candidates:
        transactional_id = transactional_ids.get(producer["producer_id"])
        if transactional_id is not None:
            state = cluster.describe_transaction(transactional_id)
            if state["error_code"] == ErrorCode.NONE and \
                    state["producer_id"] == producer["producer_id"] and \
                    state["producer_epoch"] == producer["producer_epoch"] and \
                    state["transaction_state"] in _IN_PROGRESS and \
                    any(t["topic"] == topic and p in t["partitions"] for t in state["topics"]):
                continue
        hanging.append((topic, p, producer))
    return hanging
