"""Cost of the coordinator's offset path on the real log: ``python -m tests.groups.bench_offsets``.

Not a test (nothing is asserted on time, STYLE 25): it prints the time of one OffsetCommit
of 1 and of 100 partitions through ``GroupCoordinator.commit_offsets`` (records encoded
natively, appended to ``__consumer_offsets``), and how fast a broker start loads the topic
back. Best of three rounds, since the shared machine is noisy.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time

from pybroker.coordinator import OffsetCommit
from tests.groups.test_offset_store import one_node, open_topics


def best_us(fn: object, calls: int, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(calls):
            fn(i)  # type: ignore[operator]
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> int:
    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory() as data_dir:
        logs, topics = open_topics(data_dir)
        topics.create("bench", 100, 1, {})
        coordinator = one_node(topics)
        one = best_us(lambda i: coordinator.commit_offsets(
            "g1", "", None, -1, [OffsetCommit("bench", 0, i)]), 5000)
        hundred = best_us(lambda i: coordinator.commit_offsets(
            "g100", "", None, -1, [OffsetCommit("bench", p, i) for p in range(100)]), 500)
        print(f"commit 1 partition:    {one:8.1f} us")
        print(f"commit 100 partitions: {hundred:8.1f} us ({hundred / 100:.2f} us/partition)")
        start = time.perf_counter()
        one_node(topics)
        elapsed = time.perf_counter() - start
        records = sum(p.log.log_end_offset - p.log.log_start_offset
                      for p in topics.get("__consumer_offsets").partitions)
        print(f"load: {records} records in {elapsed:.2f} s ({records / elapsed:,.0f}/s)")
        logs.close(clean=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
