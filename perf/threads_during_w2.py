"""Broker CPU by thread while W2 writes to a compacted topic and to a delete topic.

    python3 perf/threads_during_w2.py [--order delete,compact,compact,delete]

Starts ``pybroker serve`` on a fresh data directory (``log.cleaner.backoff.ms=200``, as
bench/cleaner.py), then per run creates a 4-partition topic with 8 MiB segments and the
run's ``cleanup.policy`` and runs W2 (rdkafka_performance, 2M x 1 KiB, acks=1,
linger.ms=5, every record keyed ``w2``, ``partitioner=random``). Between the run's start
and end it reads each broker thread's user+system time from /proc: the event loop
(``main``), the network threads, the io_uring workers that copy appends into the page
cache (``iou-wrk-*``) and the log cleaner (the threads running at a positive nice value).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from confluent_kafka.admin import AdminClient, NewTopic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(REPO, "..", "shared", "reference")


def thread_cpu(pid: int) -> dict[int, tuple[str, int, float]]:
    """tid -> (name, nice, CPU seconds)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # the thread ended
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        out[int(tid)] = (name, int(fields[16]), cpu)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", default="delete,compact,compact,delete")
    parser.add_argument("--port", type=int, default=49777)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="threads-w2-")
    bootstrap = f"127.0.0.1:{args.port}"
    with open(os.path.join(work, "broker.log"), "w") as log:
        broker = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "serve", "--data-dir", os.path.join(work, "data"),
             "--listen", bootstrap, "--set", "log.cleaner.backoff.ms=200"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, stdout=log,
            stderr=subprocess.STDOUT)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.list_topics(timeout=30)
        for policy in args.order.split(","):
            topic = f"w2-{policy}-{time.time_ns()}"
            admin.create_topics([NewTopic(topic, 4, 1, config={
                "cleanup.policy": policy, "segment.bytes": str(8 << 20)})])[topic].result()
            time.sleep(1)
            before = thread_cpu(broker.pid)
            started = time.monotonic()
            subprocess.run([os.path.join(REFERENCE, "rdkafka_performance"), "-P", "-t", topic,
                            "-s", "1024", "-c", "2000000", "-b", bootstrap, "-X", "linger.ms=5",
                            "-a", "1", "-k", "w2", "-X", "partitioner=random"],
                           capture_output=True, check=True)
            wall = time.monotonic() - started
            spent: dict[str, float] = {}
            for tid, (name, nice, cpu) in thread_cpu(broker.pid).items():
                key = "cleaner" if nice > 0 else "main" if tid == broker.pid else \
                    "iou-wrk" if name.startswith("iou-wrk") else name
                spent[key] = spent.get(key, 0.0) + cpu - before.get(tid, (name, nice, 0.0))[2]
            print(f"{policy}: {wall:.1f} s, {2048 / wall:.0f} MB/s; broker CPU s: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
                              if v >= 0.05))
            time.sleep(4)  # the cleaner's backlog
            os.sync()
    finally:
        broker.terminate()
        broker.wait()


if __name__ == "__main__":
    main()
