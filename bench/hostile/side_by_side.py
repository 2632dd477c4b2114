"""``python3 -m bench.hostile.side_by_side --rounds 3 --out DIR [session options]``

Runs the same patterns against Apache Kafka 4.1 (``kafka.sh`` of the reference folder,
started fresh) and pybroker (``python3 -m pybroker serve`` of this checkout, fresh data
dir), alternating which goes first each round, and prints one table of medians over the
rounds (pattern x broker). Each broker is started for each round with a descriptor limit
high enough for the idle pattern (this process's hard limit), and again with
``--low-fd`` (1024) for fd-exhaustion alone. A broker that dies during a pattern is
started again for the patterns left, each such session measuring its own idle baseline.

Files: ``DIR/r<round>-<broker>-s<k>/`` per session (result.json, the canary's samples, the
tail of the broker's log) and ``DIR/summary.json`` and ``summary.md`` (also printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from bench.driver.local_broker import LocalBroker, fd_limit_setter
from bench.hostile import report
from bench.hostile.__main__ import add_run_args, parse_run_args
from bench.hostile.patterns import FdExhaustion, raise_fd_limit
from bench.hostile.session import NOT_RUN, Session, Settings

REFERENCE = "/work/shared/reference"
START_TIMEOUT = 300.0
LOG_TAIL = 200_000


def free_port_pair() -> int:
    """A port p with p + 1 also free (Kafka's controller listens on p + 1)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue


class Kafka:
    """``kafka.sh`` of the reference folder, fresh in a work dir of its own (data in
    ``work/data``, logs in ``work/logs``); ``settings`` go to its server.properties."""

    label = "kafka-4.1"

    def __init__(self, reference: str, settings: Mapping[str, object] | None = None) -> None:
        self.script = os.path.join(reference, "kafka.sh")
        self.settings = dict(settings or {})
        self.env: dict[str, str] = {}
        self.work = ""

    def start(self, nofile: int) -> tuple[str, int, str]:
        port = free_port_pair()
        self.work = tempfile.mkdtemp(prefix="hostile-kafka-")
        self.env = dict(os.environ, KAFKA_PORT=str(port), KAFKA_WORK=self.work, KAFKA_FRESH="1",
                        KAFKA_SET=" ".join(f"{k}={v}" for k, v in self.settings.items()))
        done = subprocess.run([self.script, "start"], env=self.env, capture_output=True,
                              text=True, timeout=START_TIMEOUT,
                              preexec_fn=fd_limit_setter(nofile))
        found = re.search(r"pid (\d+) port (\d+)", done.stdout)
        if done.returncode or not found:
            raise RuntimeError(f"kafka.sh start failed: {done.stdout}{done.stderr}")
        return f"127.0.0.1:{port}", int(found.group(1)), self.log_path()

    def log_path(self) -> str:
        return os.path.join(self.work, "logs", "server.log")

    def stop(self) -> None:
        subprocess.run([self.script, "stop"], env=self.env, timeout=START_TIMEOUT,
                       capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)


class PyBroker:
    """``python3 -m pybroker serve`` of this checkout (LocalBroker), fresh in a work dir of
    its own (data in ``work/data``, its log in ``work/broker.log``)."""

    label = "pybroker"

    def __init__(self, settings: Mapping[str, object] | None = None) -> None:
        self.settings = dict(settings or {})
        self.work = ""
        self.broker: LocalBroker | None = None

    def start(self, nofile: int) -> tuple[str, int, str]:
        self.work = tempfile.mkdtemp(prefix="hostile-pybroker-")
        self.broker = LocalBroker(self.work, self.settings)
        self.broker.start(START_TIMEOUT, fd_limit=nofile)
        return self.broker.bootstrap, self.broker.pid, self.broker.log_path

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def keep_log_tail(log_path: str, out_dir: str) -> None:
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL))
            tail = f.read()
    except OSError:
        return
    with open(os.path.join(out_dir, "broker-log-tail.txt"), "wb") as f:
        f.write(tail)


def run_broker(broker: Kafka | PyBroker, names: list[str], settings: Settings, out: str,
               round_no: int, low_fd: int) -> dict[str, dict[str, Any]]:
    """All patterns against one broker in one round: rows by pattern."""
    groups = [(raise_fd_limit(), [n for n in names if n != FdExhaustion.name]),
              (low_fd, [n for n in names if n == FdExhaustion.name])]
    rows: dict[str, dict[str, Any]] = {}
    session_no = 0
    for nofile, left in groups:
        while left:
            session_no += 1
            out_dir = os.path.join(out, f"r{round_no}-{broker.label}-s{session_no}")
            label = f"[r{round_no} {broker.label} s{session_no}] "
            try:
                bootstrap, pid, log = broker.start(nofile)
                print(f"{label}{bootstrap} pid {pid}, ulimit -n {nofile}", file=sys.stderr)
                result = Session(bootstrap, pid, settings, log, out_dir, label).run(left)
                keep_log_tail(log, out_dir)
            finally:
                broker.stop()
            rows.update((name, row) for name, row in report.session_rows(result).items()
                        if row["error"] != NOT_RUN)
            left = [r["pattern"] for r in result["patterns"] if r["error"] == NOT_RUN]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.hostile.side_by_side",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--reference", default=REFERENCE,
                        help=f"the folder of kafka.sh (default {REFERENCE})")
    parser.add_argument("--low-fd", type=int, default=1024,
                        help="ulimit -n of the brokers for fd-exhaustion (default 1024)")
    add_run_args(parser)
    args = parser.parse_args(argv)
    names, settings = parse_run_args(parser, args)
    out = args.out or tempfile.mkdtemp(prefix="bench-hostile-sbs-")
    os.makedirs(out, exist_ok=True)
    kafka, pybroker = Kafka(args.reference), PyBroker()
    rounds: dict[str, list[dict[str, dict[str, Any]]]] = {kafka.label: [], pybroker.label: []}
    try:
        for round_no in range(1, args.rounds + 1):
            order: list[Kafka | PyBroker] = [kafka, pybroker] if round_no % 2 \
                else [pybroker, kafka]
            for broker in order:
                rounds[broker.label].append(
                    run_broker(broker, names, settings, out, round_no, args.low_fd))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"bench.hostile.side_by_side: {e}", file=sys.stderr)
        return 2
    medians = {label: {name: report.median_row([r[name] for r in per_round if name in r])
                       for name in names}
               for label, per_round in rounds.items()}
    text = (f"Medians of {args.rounds} alternating round(s); per-session files in {out}.\n\n"
            + report.table([(name, label, medians[label][name])
                            for name in names for label in rounds])
            + "\n" + report.LEGEND)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"schema": "pybroker-bench-hostile-sbs/1", "patterns": names,
                   "settings": settings.as_dict(), "counts": settings.counts,
                   "rounds": rounds, "medians": medians}, f, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
