"""The reference workloads side by side with Apache Kafka, on conditioned memory.

    python3 -m bench.side_by_side ROUNDS [--condition-gib 3] [--data-dir DIR] -- COMMAND...

What /work/shared/reference/side-by-side.sh does (Kafka 4.1 through its kafka.sh and the
broker COMMAND, each started fresh every round, which goes first alternating by round),
except that each reference workload runs by itself through run-workloads.sh (``SKIP=``,
``WARMUP=0``) with the page cache conditioned right before it, for each broker: W1 and W3
together (W3 reads W1's topic), then W2. On this VM a page of guest memory not touched
recently costs a host fault when first written, so whichever broker wrote right after a
large free looked up to twice as fast; conditioning (bench.driver.pagecache) gives every
workload the same start. The reference's unmeasured warm-up (500k x 100 B) runs once per
broker start, before the first conditioning (``--no-warmup`` skips it).

COMMAND starts a broker in the foreground on 127.0.0.1:$PB_PORT (default 49092) with an
empty data dir (``--data-dir``: where it is, so conditioning writes on its filesystem);
"rm -rf" of that dir between rounds is COMMAND's business (``sh -c 'rm -rf D && exec
...'``). Kafka listens on $KAFKA_PORT (default 29092) with its data under
${TMPDIR:-/tmp}/ref-kafka-$KAFKA_PORT.

Prints summarize.py's table (medians and ranges per broker and workload, from
$BASELINE_DIR/results/results.csv; BASELINE_DIR defaults to ${TMPDIR:-/tmp}/baseline)
and then, per workload, the ratios other / kafka of msgs/s, broker CPU s/GB and client
CPU s for each round with their median, minimum and maximum, so a claim such as "no round
below 1.2x" can be read off (for CPU per GB lower is better: read the maximum).
"""

from __future__ import annotations

import argparse
import csv
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.driver import pagecache

REFERENCE = "/work/shared/reference"
GROUPS = (("W1", "W3"), ("W2",))     # run separately, each after conditioning
ALL = ("W1", "W2", "W3", "W4")
RATIOS = (("msgs/s", "msgs_per_s"), ("broker CPU s/GB", "broker_cpu_s_per_GB"),
          ("client CPU s", "client_cpu_s"))
START_TIMEOUT = 30.0


def temp_dir() -> str:
    return os.environ.get("TMPDIR") or "/tmp"


def baseline_dir() -> str:
    return os.environ.get("BASELINE_DIR") or os.path.join(temp_dir(), "baseline")


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Kafka:
    name = "kafka"

    def __init__(self, reference: str):
        self.reference = reference
        self.port = int(os.environ.get("KAFKA_PORT", "29092"))
        self.work = os.environ.get("KAFKA_WORK") or \
            os.path.join(temp_dir(), f"ref-kafka-{self.port}")
        self.data_dir = os.path.join(self.work, "data")

    def start(self) -> int:
        env = dict(os.environ, KAFKA_FRESH="1", KAFKA_PORT=str(self.port))
        subprocess.run([os.path.join(self.reference, "kafka.sh"), "start"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.work, "kafka.pid")) as f:
            return int(f.read())

    def stop(self) -> None:
        env = dict(os.environ, KAFKA_PORT=str(self.port))
        subprocess.run([os.path.join(self.reference, "kafka.sh"), "stop"], env=env,
                       check=True)


class Other:
    name = "other"

    def __init__(self, command: list[str], data_dir: str | None):
        self.command = command
        self.port = int(os.environ.get("PB_PORT", "49092"))
        self.data_dir = data_dir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        if port_open(self.port):
            raise RuntimeError(f"127.0.0.1:{self.port} is taken by another process")
        log = open(os.path.join(temp_dir(), "side-by-side-broker.log"), "ab")
        self.process = subprocess.Popen(self.command, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while not port_open(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the broker did not open 127.0.0.1:{self.port}")
            time.sleep(0.1)
        return self.process.pid

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)


def run_workloads(reference: str, broker: Any, label: str, pid: int, skip: tuple[str, ...],
                  warmup: bool) -> None:
    env = dict(os.environ, SKIP=" ".join(skip), WARMUP="1" if warmup else "0",
               BASELINE_DIR=baseline_dir())
    subprocess.run([os.path.join(reference, "run-workloads.sh"), f"127.0.0.1:{broker.port}",
                    label, str(pid)], env=env, check=False)


def one_broker(args: argparse.Namespace, broker: Any, label: str) -> None:
    pid = broker.start()
    try:
        if not args.no_warmup:
            run_workloads(args.reference, broker, label, pid, ALL, warmup=True)
        for group in GROUPS:
            if args.condition_gib > 0:
                done = pagecache.condition(args.condition_gib,
                                           pagecache.conditioning_dir(broker.data_dir))
                print(f"# {label} {'+'.join(group)}: conditioned {done['written_gib']} GiB "
                      f"in {done['seconds']} s", flush=True)
            run_workloads(args.reference, broker, label, pid,
                          tuple(w for w in ALL if w not in group), warmup=False)
    finally:
        broker.stop()


def ratio_table(rows: list[dict[str, str]], tag: str) -> str:
    """Per workload and metric: other / kafka for each round, median, min, max."""
    values: dict[tuple[str, str, int], dict[str, str]] = {}
    for row in rows:
        name, _, rest = row["label"].partition(f"-{tag}-r")
        if rest.isdigit() and name in ("kafka", "other"):
            values[(name, row["workload"], int(rest))] = row
    rounds = sorted({r for _, _, r in values})
    lines = []
    for workload in sorted({w for _, w, _ in values}):
        lines += ["", f"## {workload}: other / kafka", "",
                  "| metric | " + " | ".join(f"round {r}" for r in rounds)
                  + " | median | min | max |", "|---|" + "---:|" * (len(rounds) + 3)]
        for title, key in RATIOS:
            cells: list[float | None] = []
            for r in rounds:
                k, o = values.get(("kafka", workload, r)), values.get(("other", workload, r))
                try:
                    cells.append(float(o[key]) / float(k[key]) if k and o else None)
                except (ValueError, ZeroDivisionError):
                    cells.append(None)
            got = [c for c in cells if c is not None]
            summary = [statistics.median(got), min(got), max(got)] if got else [None] * 3
            lines.append(f"| {title} | " + " | ".join(_cell(c) for c in cells + summary)
                         + " |")
    return "\n".join(lines) + "\n"


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.side_by_side", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rounds", type=int)
    parser.add_argument("command", nargs="+", help="-- COMMAND that starts the other broker")
    parser.add_argument("--condition-gib", type=float, default=3.0, metavar="N",
                        help="GiB written and deleted before each workload (0: off)")
    parser.add_argument("--data-dir", help="the other broker's data dir (its filesystem "
                                           "is conditioned; default the temp dir's)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip run-workloads.sh's unmeasured warm-up")
    parser.add_argument("--reference", default=REFERENCE, help="the reference tooling")
    args = parser.parse_args(argv)
    tag = time.strftime("%H%M%S")
    kafka, other = Kafka(args.reference), Other(args.command, args.data_dir)
    for round_no in range(1, args.rounds + 1):
        order = (kafka, other) if round_no % 2 else (other, kafka)
        for broker in order:
            one_broker(args, broker, f"{broker.name}-{tag}-r{round_no}")
    env = dict(os.environ, BASELINE_DIR=baseline_dir())
    subprocess.run([sys.executable, os.path.join(args.reference, "summarize.py"),
                    f"kafka-{tag}", f"other-{tag}"], env=env, check=False)
    with open(os.path.join(baseline_dir(), "results", "results.csv")) as f:
        sys.stdout.write(ratio_table(list(csv.DictReader(f)), tag))
    return 0


if __name__ == "__main__":
    sys.exit(main())
