"""``pybroker produce`` and ``pybroker consume``: rpk-like clients over confluent-kafka.

Any Kafka broker will do (``--bootstrap HOST:PORT``, default ``$PYBROKER_BOOTSTRAP`` or
127.0.0.1:9092); pybroker is not special to them, which is the point: they are the same
librdkafka client applications use. Both are built, and fail, as every client command
(``cli_connect``): one line and exit status 1 when no broker answers within ``--timeout``.

- ``produce TOPIC`` sends each line of stdin as one record (the newline removed). With
  ``--key-separator SEP`` the text before the first SEP is the key, the rest the value (a
  line without SEP has a null key). It waits for every delivery report (a record not
  delivered within ``--timeout`` fails); the exit status is 1 if any record failed, and
  the summary goes to stderr.
- ``consume TOPIC`` reads the assigned partitions from ``--offset`` (``start``, ``end`` or
  a number) without a consumer group (nothing committed). ``-n N`` stops after N records
  (waiting for them); ``--follow`` runs until interrupted; neither stops at the end of the
  partitions as they were when it started. Each record is printed with ``--format``
  (kcat's: ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%v`` value, ``%T``
  timestamp ms, ``%h`` headers, ``\\n``, ``\\t``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from pybroker.cli_connect import BrokerClients, add_client_options

# librdkafka's own default for message.max.bytes is 1000000; a record pybroker accepts
# (max.message.bytes 1048588) must not be refused by the client first.
_CLIENT_MAX_MESSAGE = 16 * 1024 * 1024


def register(subparsers: Any) -> None:
    """Add the ``produce`` and ``consume`` subcommands to ``pybroker``'s parser."""
    p = subparsers.add_parser("produce", help="produce lines of stdin as records")
    p.add_argument("topic")
    p.add_argument("--key-separator", "-k", metavar="SEP",
                   help="split each line into key SEP value at the first SEP")
    p.add_argument("--partition", "-p", type=int, default=None,
                   help="partition to write to (default: the client's partitioner)")
    p.add_argument("--acks", default="all", choices=("0", "1", "all", "-1"))
    p.add_argument("--compression", "-z", default="none",
                   choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--header", "-H", action="append", default=[], metavar="K=V",
                   help="header added to every record (repeatable)")
    add_client_options(p)  # --timeout: also how long a record may take to be delivered
    p.set_defaults(func=produce_main)

    c = subparsers.add_parser("consume", help="print records of a topic")
    c.add_argument("topic")
    c.add_argument("--num", "-n", type=int, default=None, help="stop after N records")
    c.add_argument("--follow", "-f", action="store_true",
                   help="keep waiting for new records until interrupted")
    c.add_argument("--offset", "-o", default="start",
                   help="where to start in each partition: start, end or an offset")
    c.add_argument("--partition", "-p", type=int, action="append", default=None,
                   help="partition to read (repeatable; default all)")
    c.add_argument("--format", "-F", default="%v\\n", help="output format (default %%v\\n)")
    add_client_options(c)
    c.set_defaults(func=consume_main)


# produce ---------------------------------------------------------------------------------


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    return (key, value) if sep else (None, line)


def _headers(pairs: list[str]) -> list[tuple[str, str | bytes | None]]:
    out: list[tuple[str, str | bytes | None]] = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--header {pair!r}: expected K=V")
        out.append((name, value.encode()))
    return out


def produce_main(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    clients = BrokerClients(args)
    producer = clients.producer(**{
        "acks": args.acks,
        "compression.type": args.compression,
        "message.max.bytes": _CLIENT_MAX_MESSAGE,
        "enable.idempotence": args.acks in ("all", "-1"),
        "message.timeout.ms": int(args.timeout * 1000),
        # an unknown topic fails its records after this, not after the whole timeout
        "topic.metadata.propagation.max.ms": int(min(args.timeout, 5.0) * 1000),
    })
    clients.metadata(producer)  # fails fast when no broker answers
    separator = args.key_separator.encode() if args.key_separator is not None else None
    headers = _headers(args.header) or None
    failures: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            failures.append(str(err))
        else:
            delivered += 1

    extra = {} if args.partition is None else {"partition": args.partition}
    sent = 0
    for raw in sys.stdin.buffer:
        key, value = split_line(raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw, separator)
        while True:
            try:
                producer.produce(args.topic, value, key, headers=headers,
                                 on_delivery=on_delivery, **extra)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.1)
            except KafkaException as exc:
                print(f"produce failed: {exc}", file=sys.stderr)
                return 1
        sent += 1
        producer.poll(0)
    remaining = producer.flush(args.timeout + 1)
    if remaining:
        failures.append(f"{remaining} records not delivered within {args.timeout} s")
    for reason in sorted(set(failures)):
        print(f"error: {reason}", file=sys.stderr)
    print(f"produced {delivered} of {sent} records to {args.topic}", file=sys.stderr)
    return 1 if failures else 0


# consume ---------------------------------------------------------------------------------


def compile_format(fmt: str) -> Callable[[Any], bytes]:
    """kcat-style format string -> function of a confluent-kafka Message to output bytes."""
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t")
    fields: dict[str, Callable[[Any], bytes]] = {
        "t": lambda m: m.topic().encode(),
        "p": lambda m: str(m.partition()).encode(),
        "o": lambda m: str(m.offset()).encode(),
        "k": lambda m: m.key() or b"",
        "v": lambda m: m.value() or b"",
        "T": lambda m: str(m.timestamp()[1]).encode(),
        "h": lambda m: b",".join(k.encode() + b"=" + (v or b"")
                                for k, v in (m.headers() or [])),
        "%": lambda m: b"%",
    }
    parts: list[Callable[[Any], bytes] | bytes] = []
    i = 0
    while i < len(fmt):
        j = fmt.find("%", i)
        if j < 0 or j + 1 >= len(fmt):
            parts.append(fmt[i:].encode())
            break
        if j > i:
            parts.append(fmt[i:j].encode())
        spec = fmt[j + 1]
        if spec not in fields:
            raise SystemExit(f"--format: unknown field %{spec}")
        parts.append(fields[spec])
        i = j + 2

    def render(msg: Any) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(msg) for p in parts)
    return render


def _start_offset(text: str) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    named = {"start": OFFSET_BEGINNING, "beginning": OFFSET_BEGINNING, "end": OFFSET_END}
    if text in named:
        return named[text]
    try:
        return int(text)
    except ValueError:
        raise SystemExit(f"--offset {text!r}: expected start, end or a number") from None


def consume_records(consumer: Any, topic: str, partitions: list[int], start: int,
                    stop_at_end: bool, timeout: float) -> Iterator[Any]:
    """Records of ``partitions`` from ``start``; with ``stop_at_end`` until each partition's
    high watermark as read now, else forever."""
    from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

    ends: dict[int, int] = {}
    if stop_at_end:
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                       timeout=timeout)
            first = high if start == OFFSET_END else low if start < 0 else max(start, low)
            if high > first:
                ends[p] = high
        # Only partitions with something to read are fetched: a fetch past the end gets
        # OFFSET_OUT_OF_RANGE, and librdkafka deadlocks when that answer lands while the
        # consumer closes (confluentinc/librdkafka#4514, seen here with gdb).
        partitions = list(ends)
        if not partitions:
            return
    consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    while not stop_at_end or ends:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().retriable() or msg.error().code() < 0:  # librdkafka-local events
                continue
            raise KafkaException(msg.error())
        yield msg
        if stop_at_end and msg.offset() + 1 >= ends.get(msg.partition(), 0):
            ends.pop(msg.partition(), None)


def consume_main(args: argparse.Namespace) -> int:
    render = compile_format(args.format)
    start = _start_offset(args.offset)
    clients = BrokerClients(args)
    consumer = clients.consumer(**{
        # assign() without a group: librdkafka still wants an id, nothing is committed
        "group.id": "pybroker-cli",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.message.max.bytes": _CLIENT_MAX_MESSAGE,
    })
    out = sys.stdout.buffer
    count = 0
    try:
        # through the admin client: a Consumer's poll waits for its list_topics to return
        metadata = clients.metadata()
        topic = metadata.topics.get(args.topic)
        if topic is None or topic.error is not None:
            reason = topic.error.name() if topic is not None else "UNKNOWN_TOPIC_OR_PARTITION"
            print(f"{args.topic}: {reason}", file=sys.stderr)
            return 1
        partitions = args.partition or sorted(topic.partitions)
        stop_at_end = not args.follow and args.num is None
        if args.num == 0:
            return 0
        for msg in consume_records(consumer, args.topic, partitions, start, stop_at_end,
                                   args.timeout):
            out.write(render(msg))
            out.flush()
            count += 1
            if args.num is not None and count >= args.num:
                break
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0
