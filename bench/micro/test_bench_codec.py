"""The generic codec's response encoder on two typical bodies: a Metadata response of a
small cluster and a Fetch-sized response (100 partitions with records).

What it watches: the encoder's per-struct check that every key is a field of its struct
(``UnknownFieldError``) must stay a small share of encoding. Compare ``min`` before and
after a codec change on the same machine.
Run: python -m pytest bench/micro/test_bench_codec.py --benchmark-only -s
"""

from __future__ import annotations

import uuid

from pybroker.net.protocol import encode_response

METADATA_V12 = {
    "throttle_time_ms": 0,
    "brokers": [{"node_id": n, "host": f"broker-{n}.example", "port": 9092, "rack": None}
                for n in range(3)],
    "cluster_id": "q1Sh-9_ISia_zwGINzRvyQ",
    "controller_id": 0,
    "topics": [{
        "error_code": 0, "name": f"topic-{t}", "topic_id": uuid.UUID(int=t + 1),
        "is_internal": False, "topic_authorized_operations": -2147483648,
        "partitions": [{
            "error_code": 0, "partition_index": p, "leader_id": p % 3, "leader_epoch": 0,
            "replica_nodes": [0, 1, 2], "isr_nodes": [0, 1, 2], "offline_replicas": []}
            for p in range(4)]}
        for t in range(50)],
}

RECORDS = bytes(1024)
FETCH_V12 = {
    "throttle_time_ms": 0, "error_code": 0, "session_id": 0,
    "responses": [{"topic": f"topic-{t}", "partitions": [{
        "partition_index": p, "error_code": 0, "high_watermark": 1000,
        "last_stable_offset": 1000, "log_start_offset": 0, "aborted_transactions": None,
        "preferred_read_replica": -1, "records": RECORDS} for p in range(10)]}
        for t in range(10)],
}


def test_encode_metadata_v12_50_topics(benchmark):
    benchmark(encode_response, 3, 12, 1, METADATA_V12)


def test_encode_fetch_v12_100_partitions(benchmark):
    benchmark(encode_response, 1, 12, 1, FETCH_V12)
