"""``pybroker cluster``: a local multi-broker cluster, for development only.

    pybroker cluster [--brokers 3] [--data-dir DIR] [--base-port 9092]
                     [--zookeeper HOST:PORT[/chroot]] [--set KEY=VALUE ...]

Starts a ZooKeeper of its own (Debian's package, through
``pybroker.cluster.zookeeper_server``; data in ``DIR/zookeeper``) unless ``--zookeeper``
names one, then N ``pybroker serve`` processes: broker ids 1..N, listening on 127.0.0.1
ports base..base+N-1 (``--base-port 0``: any free ports), data in ``DIR/broker-<id>``
and logs in ``DIR/broker-<id>.log``. It prints the bootstrap list once every broker is
ready, then waits. SIGINT (Ctrl-C) or SIGTERM is forwarded to the brokers, which shut
down cleanly; ZooKeeper is stopped after them. A broker that dies meanwhile is reported
and the others keep running (killing one is how failover is tried by hand); the command
exits when all are gone, 0 if every broker exited 0.

Every broker is its own session (process group), so a terminal's Ctrl-C reaches them
once, through this process, and in order. The data directory is kept: started again on
it, the cluster continues where it stopped. Nothing here is fit for production: one
ZooKeeper, every broker on loopback of one host (the README's deployment section says
how to run real members).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

READY = re.compile(r"ready: listening on (\S+):(\d+)")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
HOST = "127.0.0.1"


def register(subparsers: Any) -> None:
    """Add ``cluster`` to ``pybroker``'s parser."""
    p = subparsers.add_parser(
        "cluster", help="start a local multi-broker cluster (development only)",
        description="Start a local ZooKeeper (unless --zookeeper is given) and N brokers "
        "on loopback, print the bootstrap list, and run until Ctrl-C/SIGTERM, which "
        "stops everything cleanly. For development and trying failover by hand only: "
        "see the README's deployment section for real hosts.")
    p.add_argument("--brokers", "-n", type=int, default=3, help="broker count (default 3)")
    p.add_argument("--data-dir", metavar="DIR", default="pybroker-cluster",
                   help="ZooKeeper's and every broker's data and logs "
                   "(default ./pybroker-cluster; kept across runs)")
    p.add_argument("--base-port", type=int, default=9092,
                   help="broker i listens on base+i-1 (default 9092; 0: any free ports)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                   help="use this ZooKeeper instead of starting one")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="a setting for every broker, e.g. --set min.insync.replicas=2 "
                   "(repeatable)")
    p.set_defaults(func=cluster_main)


def default_settings(brokers: int) -> dict[str, str]:
    """What every broker of an N-broker dev cluster gets before ``--set``: a topic created
    with the defaults (and ``__consumer_offsets``, whose Kafka default is 3 replicas) must
    fit the brokers there are."""
    factor = str(min(3, brokers))
    return {"default.replication.factor": factor,
            "offsets.topic.replication.factor": factor}


class LocalBroker:
    """One ``pybroker serve`` child: started, waited for, signalled."""

    def __init__(self, broker_id: int, data_dir: str, port: int, zookeeper: str,
                 settings: dict[str, str]) -> None:
        self.broker_id = broker_id
        self.data_dir = os.path.join(data_dir, f"broker-{broker_id}")
        self.log_path = os.path.join(data_dir, f"broker-{broker_id}.log")
        self.cmd = [sys.executable, "-m", "pybroker", "serve", "--zookeeper", zookeeper,
                    "--broker-id", str(broker_id), "--listen", f"{HOST}:{port}",
                    "--data-dir", self.data_dir]
        for key, value in settings.items():
            self.cmd += ["--set", f"{key}={value}"]
        self.address = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self.reported = False

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"--- {' '.join(self.cmd)}\n".encode())
            self._log_start = log.tell()
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log,
                                         env=_child_env(), start_new_session=True)

    def ready(self) -> bool:
        """True once the log says ``ready``; raises if the process exited first."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            match = READY.search(log.read().decode(errors="replace"))
        if match:
            self.address = f"{match.group(1)}:{match.group(2)}"
            return True
        if self.exit_code() is not None:
            raise RuntimeError(f"broker {self.broker_id} exited with {self.exit_code()} "
                               f"before it was ready:\n{self.log_tail()}")
        return False

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def log_tail(self, lines: int = 20) -> str:
        with open(self.log_path, "rb") as log:
            return "\n".join(log.read().decode(errors="replace").splitlines()[-lines:])


def _child_env() -> dict[str, str]:
    """The brokers import the same pybroker as this process, installed or not."""
    import pybroker

    root = os.path.dirname(os.path.dirname(os.path.abspath(pybroker.__file__)))
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=root + os.pathsep + path if path else root)


def cluster_main(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise SystemExit("--brokers must be at least 1")
    settings = default_settings(args.brokers)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set wants KEY=VALUE, got {item!r}")
        settings[key.strip()] = value.strip()
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)

    stop_signal: list[int] = []

    def on_signal(sig: int, _frame: Any) -> None:
        stop_signal.append(sig)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    zookeeper = None
    brokers: list[LocalBroker] = []
    try:
        if args.zookeeper:
            connect = args.zookeeper
        else:
            from pybroker.cluster.zookeeper_server import start_zookeeper

            zookeeper = start_zookeeper(os.path.join(data_dir, "zookeeper"))
            connect = zookeeper.connect
            print(f"zookeeper: {connect} (data {os.path.join(data_dir, 'zookeeper')})",
                  flush=True)
        for broker_id in range(1, args.brokers + 1):
            port = args.base_port + broker_id - 1 if args.base_port else 0
            broker = LocalBroker(broker_id, data_dir, port, connect, settings)
            broker.start()
            brokers.append(broker)
        if not _wait_ready(brokers, stop_signal):
            return _shutdown(brokers, zookeeper, stop_signal, failed=True)
        for broker in brokers:
            print(f"broker {broker.broker_id}: {broker.address} (log {broker.log_path})")
        print(f"bootstrap: {','.join(b.address for b in brokers)}", flush=True)
        print("Ctrl-C stops the cluster.", flush=True)
        failed = _watch(brokers, stop_signal)
        return _shutdown(brokers, zookeeper, stop_signal, failed)
    except BaseException:
        _shutdown(brokers, zookeeper, stop_signal or [signal.SIGTERM], failed=True)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_ready(brokers: list[LocalBroker], stop_signal: list[int]) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = list(brokers)
    while waiting and not stop_signal:
        for broker in list(waiting):
            try:
                if broker.ready():
                    waiting.remove(broker)
            except RuntimeError as exc:
                broker.reported = True
                print(f"cluster: {exc}", file=sys.stderr)
                return False
        if time.monotonic() > deadline:
            print(f"cluster: brokers {[b.broker_id for b in waiting]} not ready in "
                  f"{START_TIMEOUT_S:.0f} s (logs in {os.path.dirname(waiting[0].log_path)})",
                  file=sys.stderr)
            return False
        time.sleep(0.05)
    return not waiting


def _watch(brokers: list[LocalBroker], stop_signal: list[int]) -> bool:
    """Until a signal or every broker is gone; True if a broker died on its own."""
    failed = False
    while not stop_signal:
        running = 0
        for broker in brokers:
            code = broker.exit_code()
            if code is None:
                running += 1
            elif not broker.reported:
                broker.reported = True
                failed = True
                print(f"cluster: broker {broker.broker_id} exited with {code} (log "
                      f"{broker.log_path}); the others keep running", file=sys.stderr,
                      flush=True)
        if not running:
            break
        time.sleep(0.2)
    return failed


def _shutdown(brokers: list[LocalBroker], zookeeper: Any, stop_signal: list[int],
              failed: bool) -> int:
    """Forward the signal, wait for every broker (SIGKILL past the time limit), then stop
    ZooKeeper: the brokers close their sessions first, so nothing waits for a timeout."""
    sig = stop_signal[0] if stop_signal else signal.SIGTERM
    for broker in brokers:
        broker.signal(sig)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    status = 1 if failed else 0
    for broker in brokers:
        if broker.proc is None or broker.reported:
            continue
        try:
            code = broker.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            broker.proc.kill()
            code = broker.proc.wait()
            print(f"cluster: broker {broker.broker_id} did not stop in "
                  f"{STOP_TIMEOUT_S:.0f} s, killed", file=sys.stderr)
        if code != 0:
            print(f"cluster: broker {broker.broker_id} exited with {code}:\n"
                  f"{broker.log_tail()}", file=sys.stderr)
            status = 1
    if zookeeper is not None:
        zookeeper.stop()
    print("cluster stopped", flush=True)
    return status
