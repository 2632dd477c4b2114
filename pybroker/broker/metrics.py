"""Prometheus metrics: ``GET /metrics`` in the text exposition format (version 0.0.4) on
the opt-in ``metrics.listener=HOST:PORT``.

Threads: the HTTP listener (:mod:`pybroker.broker.http_listener`) serves scrapes on its
own thread. It never reads the broker's state itself: each scrape asks the loop, through
``call_soon_threadsafe``, to take a snapshot (``samples``: plain tuples of numbers, built
from the same counters as the stats file, ``Broker.stats``), and formats the text
(``render``) on its own thread. The loop's share of a scrape is one walk over the partitions
and the groups' committed offsets: no record is read.

Names follow the Prometheus JMX exporter's common Kafka rules where Kafka has the metric
(``kafka_server_brokertopicmetrics_bytesin_total{topic}``, ``kafka_log_log_size``, ...),
so dashboards and alerts written for Kafka read pybroker (README lists them all); what
Kafka lacks is ``pybroker_``: the zero-copy counters, the event loop's CPU time and the
network threads' busy time, and the consumer lag the broker computes per group and
partition (the committed offset against the partition's high watermark: this broker's
replica's, else the leader's last answer, ``leader_offsets.py``, never waited for).
Request latency is a real histogram per API (``_bucket{le}``/``_sum``/``_count``,
``kafka_network_requestmetrics_totaltime_seconds``; what is timed:
``pybroker/net/request_times.py``) where the JMX exporter has TotalTimeMs percentiles.

Client quotas' figures are Kafka's per-entity sensors (``kafka_server_produce_byte_rate``,
``..._throttle_time_ms_total`` and the fetch and request ones, labelled ``user`` and
``client_id``: ``ClientQuotas.measured``); the replication quotas' are Kafka's
``kafka_server_leaderreplication_byte_rate`` and ``..._followerreplication_byte_rate``.

Counters kept per partition (bytes, ISR shrinks and expansions) are summed over the
partitions this broker has now: a deleted topic's counts leave the sums (Prometheus's
``rate`` reads the drop as a reset).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pybroker.broker.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from pybroker.net.protocol.codec import api_name
from pybroker.net.request_times import BOUNDS, RequestTimes

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker

log = logging.getLogger("pybroker.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]
# (labels, value) or, in a histogram, (labels, value, the sample name's suffix: "_bucket",
# "_sum", "_count")
Sample = tuple[Labels, float] | tuple[Labels, float, str]
# (name, type, help, samples)
Family = tuple[str, str, str, list[Sample]]


def samples(broker: Broker) -> list[Family]:
    """The broker's metrics now; runs on the event loop."""
    stats = broker.stats()
    bytes_in: dict[str, int] = collections.Counter()
    bytes_out: dict[str, int] = collections.Counter()
    messages_in: dict[str, int] = collections.Counter()
    replication_in: dict[str, int] = collections.Counter()
    replication_out: dict[str, int] = collections.Counter()
    log_size: list[Sample] = []
    segments: list[Sample] = []
    under_min_isr_flags: list[Sample] = []
    high_watermarks: dict[tuple[str, int], int] = {}
    partitions = leaders = under_replicated = under_min_isr = shrinks = expands = 0
    for partition in broker.topics.partitions():
        plog = partition.log
        if plog is None:
            continue  # a partition of the cluster with no replica here
        topic = partition.topic
        partitions += 1
        bytes_in[topic] += partition.bytes_in
        bytes_out[topic] += partition.bytes_out
        messages_in[topic] += partition.messages_in
        replication_in[topic] += partition.replication_bytes_in
        replication_out[topic] += partition.replication_bytes_out
        shrinks += partition.isr_shrinks
        expands += partition.isr_expands
        labels = (("topic", topic), ("partition", str(partition.index)))
        log_size.append((labels, plog.size()))
        segments.append((labels, len(plog.segments)))
        high_watermarks[(topic, partition.index)] = plog.high_watermark
        if partition.is_leader:
            leaders += 1
            under_replicated += len(partition.isr) < len(partition.replicas)
            short = len(partition.isr) < plog.config.min_insync_replicas
            under_min_isr += short
            under_min_isr_flags.append((labels, int(short)))
    lag: list[Sample] = []
    states: list[Sample] = []
    members: list[Sample] = []
    groups = list(broker.group_coordinator.groups.values())
    # a group's partitions led by another broker: their leaders' last answers
    remote = broker.leader_offsets.known(
        tp for group in groups for tp in group.offsets if tp not in high_watermarks)
    for group in groups:
        states.append(((("group", group.group_id), ("state", group.state.value)), 1))
        members.append(((("group", group.group_id),), len(group.members)))
        for (topic, index), committed in group.offsets.items():
            hw = high_watermarks.get((topic, index))
            if hw is None:
                hw = remote.get((topic, index))
            if hw is not None:
                lag.append(((("group", group.group_id), ("topic", topic),
                             ("partition", str(index))), max(hw - committed.offset, 0)))
    server = broker.server
    threads = server.network_threads if server is not None else None
    cold_threads = server.cold_read_threads if server is not None else None
    metadata = broker.metadata

    def per_topic(counts: dict[str, int]) -> list[Sample]:
        return [((("topic", topic),), value) for topic, value in sorted(counts.items())]

    return [
        ("kafka_server_brokertopicmetrics_bytesin_total", "counter",
         "Bytes appended by producers, per topic", per_topic(bytes_in)),
        ("kafka_server_brokertopicmetrics_bytesout_total", "counter",
         "Bytes sent to consumers (not followers), per topic", per_topic(bytes_out)),
        ("kafka_server_brokertopicmetrics_messagesin_total", "counter",
         "Records appended by producers, per topic", per_topic(messages_in)),
        ("kafka_server_brokertopicmetrics_replicationbytesin_total", "counter",
         "Bytes appended from leaders as a follower, per topic", per_topic(replication_in)),
        ("kafka_server_brokertopicmetrics_replicationbytesout_total", "counter",
         "Bytes sent to followers as the leader, per topic", per_topic(replication_out)),
        ("kafka_network_requestmetrics_requests_total", "counter",
         "Requests received, per API",
         [((("request", api_name(key) or str(key)),), count)
          for key, count in sorted(stats["requests_by_api"].items())]),
        ("kafka_network_requestmetrics_totaltime_seconds", "histogram",
         "Requests answered, per API, by the time from being taken off the connection's "
         "queue until the response was entirely in the socket",
         _request_times(server.request_times) if server is not None else []),
        ("kafka_server_replicamanager_partitioncount", "gauge",
         "Partitions with a replica on this broker", [((), partitions)]),
        ("kafka_server_replicamanager_leadercount", "gauge",
         "Partitions this broker leads", [((), leaders)]),
        ("kafka_server_replicamanager_underreplicatedpartitions", "gauge",
         "Led partitions whose ISR is smaller than their replica set",
         [((), under_replicated)]),
        ("kafka_server_replicamanager_underminisrpartitioncount", "gauge",
         "Led partitions whose ISR is smaller than min.insync.replicas",
         [((), under_min_isr)]),
        ("kafka_cluster_partition_underminisr", "gauge",
         "1 if the led partition's ISR is smaller than min.insync.replicas",
         under_min_isr_flags),
        ("kafka_server_replicamanager_isrshrinks_total", "counter",
         "ISR shrinks this broker made as a leader (of the partitions it has now)",
         [((), shrinks)]),
        ("kafka_server_replicamanager_isrexpands_total", "counter",
         "ISR expansions this broker made as a leader (of the partitions it has now)",
         [((), expands)]),
        ("kafka_controller_kafkacontroller_activecontrollercount", "gauge",
         "1 on the active controller, 0 elsewhere",
         [((), int(metadata.is_active_controller()))]),
        ("kafka_controller_kafkacontroller_offlinepartitionscount", "gauge",
         "Partitions without a live leader, as the active controller sees them "
         "(0 elsewhere)", [((), metadata.offline_partition_count())]),
        ("kafka_log_log_size", "gauge", "Bytes in the partition's log segments", log_size),
        ("kafka_log_log_numlogsegments", "gauge", "Segments of the partition's log", segments),
        ("pybroker_connections", "gauge", "Open client connections",
         [((), stats["connections"])]),
        ("pybroker_request_queue_bytes", "gauge",
         "Bytes of requests received and not yet answered (queued.max.request.bytes "
         "bounds them)", [((), stats["request_bytes"])]),
        ("pybroker_zero_copy_bytes_total", "counter",
         "Bytes sent with sendfile/splice", [((), stats["zero_copy_bytes"])]),
        ("pybroker_copied_bytes_total", "counter",
         "Bytes sent from memory", [((), stats["copied_bytes"])]),
        ("pybroker_event_loop_cpu_seconds_total", "counter",
         "CPU time (user and system) of the event loop's thread", [((), time.thread_time())]),
        ("pybroker_network_threads", "gauge", "Threads of num.network.threads",
         [((), threads.count if threads is not None else 0)]),
        ("pybroker_network_threads_busy_seconds_total", "counter",
         "Wall time the network threads spent moving bytes, all threads together",
         [((), threads.busy_seconds() if threads is not None else 0.0)]),
        ("pybroker_cold_regions_total", "counter",
         "Pieces of file regions found not in the page cache, sent by the cold-read "
         "threads", [((), stats["cold_regions"])]),
        ("pybroker_cold_read_threads_busy_seconds_total", "counter",
         "Wall time the cold-read threads spent sending regions not in the page cache",
         [((), cold_threads.busy_seconds() if cold_threads is not None else 0.0)]),
        ("pybroker_group_lag", "gauge",
         "High watermark minus the group's committed offset, per partition", lag),
        ("pybroker_group_state", "gauge", "1 for the group's current state", states),
        ("pybroker_group_members", "gauge", "Members of the group", members),
        *_quota_families(broker),
        *_replication_quota_families(broker),
    ]


# quota key -> Kafka's sensor type and what its rate measures
_QUOTA_METRICS = {PRODUCER_BYTE_RATE: ("produce", "byte_rate", "Bytes a second produced"),
                  CONSUMER_BYTE_RATE: ("fetch", "byte_rate", "Bytes a second fetched"),
                  REQUEST_PERCENTAGE: ("request", "request_time",
                                       "Request handler time, percent of one thread")}


def _quota_families(broker: Broker) -> list[Family]:
    """Kafka's client quota metrics, per entity measured (its ``user`` and ``client_id``
    labels empty where the quota names none): the rate and the throttle time given."""
    rates: dict[str, list[Sample]] = collections.defaultdict(list)
    throttles: dict[str, list[Sample]] = collections.defaultdict(list)
    for key, user, client, rate, throttle_ms in broker.quotas.measured():
        labels = (("user", user), ("client_id", client))
        rates[key].append((labels, rate))
        throttles[key].append((labels, throttle_ms))
    families: list[Family] = []
    for key, (kind, measure, help_text) in _QUOTA_METRICS.items():
        families.append((f"kafka_server_{kind}_{measure}", "gauge",
                         f"{help_text}, per quota entity", rates[key]))
        families.append((f"kafka_server_{kind}_throttle_time_ms_total", "counter",
                         f"Throttle time given for the {kind} quota, per quota entity",
                         throttles[key]))
    return families


def _replication_quota_families(broker: Broker) -> list[Family]:
    """Kafka's ``LeaderReplication``/``FollowerReplication`` ``byte-rate``: the bytes a
    second of the throttled replicas each side measures (0 while its rate is unset)."""
    quotas = broker.replication_quotas
    return [(f"kafka_server_{side}replication_byte_rate", "gauge",
             f"Bytes a second of the replicas throttled on the {side} side "
             f"({side}.replication.throttled.replicas)", [((), quota.rate())])
            for side, quota in (("leader", quotas.leader), ("follower", quotas.follower))]


def _request_times(times: RequestTimes) -> list[Sample]:
    out: list[Sample] = []
    for key, cumulative, total in times.histograms():
        request = ("request", api_name(key) or str(key))
        for bound, count in zip(BOUNDS, cumulative, strict=False):
            out.append(((request, ("le", repr(bound))), count, "_bucket"))
        out.append(((request, ("le", "+Inf")), cumulative[-1], "_bucket"))
        out.append(((request,), total, "_sum"))
        out.append(((request,), cumulative[-1], "_count"))
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(families: Iterable[Family]) -> bytes:
    """The text exposition format, version 0.0.4."""
    lines: list[str] = []
    for name, kind, help_text, values in families:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for sample in values:
            labels, value = sample[0], sample[1]
            sample_name = name + sample[2] if len(sample) == 3 else name
            label_text = ",".join(f'{key}="{_escape(text)}"' for key, text in labels)
            lines.append(f"{sample_name}{{{label_text}}} {value}" if labels
                         else f"{sample_name} {value}")
    return ("\n".join(lines) + "\n").encode()
