"""``pybroker cluster info|health|rebalance|drain|local``: a cluster's brokers and health,
growing and shrinking it, and a local multi-broker cluster for development.

    pybroker cluster info [-b HOST:PORT]     cluster id, controller, brokers (host, port,
                                             rack), topic and partition counts
    pybroker cluster health [-b HOST:PORT]   rpk's ``cluster health``: healthy or not, and
                                             why; exit status 1 when unhealthy
    pybroker cluster rebalance [--topic T ...] [--execute] [--throttle BYTES_PER_S]
                     [--no-wait]             spread replicas and leaders over the brokers
    pybroker cluster drain BROKER [--execute] [--throttle BYTES_PER_S] [--no-wait]
                                             move every replica off a broker
    pybroker cluster local [--brokers 3] [--data-dir DIR] [--base-port 9092]
                     [--zookeeper HOST:PORT[/chroot]] [--set KEY=VALUE ...]

``info`` and ``health`` are client commands like ``topic`` (``cli_connect``: ``--timeout``,
one line and exit status 1 when no broker answers), over Kafka's protocol only
(DescribeCluster, Metadata), so they work against any Kafka broker. ``health`` reads one
Metadata answer: the live brokers, the controller, and each partition's leader, replicas
and in-sync replicas. A broker is *down* when a partition names it as a replica but it is
not among the live brokers (the protocol does not list registered brokers that hold no
replica); a partition is *leaderless* when its leader is -1 or not live, and
*under-replicated* when its ISR is smaller than its replica set less the replicas a
reassignment is still adding (ListPartitionReassignments; Kafka's
``--under-replicated-partitions`` counts the same way). Healthy means a controller and
none of those.

``rebalance`` and ``drain`` read the live brokers (with the rack each reports, Kafka's
``broker.rack``) and every
partition's replicas from Metadata, show the plan of ``pybroker.cluster.rebalance_plan``
(each partition that changes, current -> target replicas; each broker's replica and
preferred leader counts before -> after) and with ``--execute`` run it through
``pybroker.reassignment_admin`` (``run_reassignment``, which ``partition move`` shares):
throttles set if asked, AlterPartitionReassignments, ListPartitionReassignments polled
for progress until none is moving (unless ``--no-wait``), throttles removed, and every
partition checked against its target. A broker that holds replicas but is not live makes
``rebalance`` refuse: planning over the live brokers would empty it, which is ``drain``'s
job, asked for by name.

``local`` starts a ZooKeeper of its own (Debian's package, through
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
from typing import Any, NamedTuple

from pybroker.cli import CommandError
from pybroker.cli_connect import BrokerClients, add_client_options, protocol_cluster
from pybroker.cli_group import _table
from pybroker.cli_topic import _ids

READY = re.compile(r"ready: listening on (\S+):(\d+)")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
HOST = "127.0.0.1"


def register(subparsers: Any) -> None:
    """Add ``cluster`` and its subcommands to ``pybroker``'s parser."""
    cluster = subparsers.add_parser(
        "cluster", help="a cluster's brokers and health; a local cluster for development",
        description="info and health ask a running cluster (any Kafka broker); local "
        "starts a ZooKeeper and N brokers on this machine for development "
        "(pybroker cluster local --brokers 3).")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)

    p = sub.add_parser("info", help="cluster id, controller, brokers, topic and partition "
                       "counts")
    add_client_options(p)
    p.set_defaults(func=info_main)

    p = sub.add_parser(
        "health", help="healthy or not: brokers down, leaderless and under-replicated "
        "partitions (exit status 1 when unhealthy)",
        description="rpk's cluster health over Kafka's protocol. Exit status: 0 healthy, "
        "1 unhealthy (or no broker reachable: stderr says which).")
    add_client_options(p)
    p.set_defaults(func=health_main)

    p = sub.add_parser(
        "rebalance", help="spread replicas and leaders evenly over the live brokers",
        description="Plan a reassignment that spreads the replicas and preferred leaders "
        "of every partition (or of the topics given) evenly over the live brokers, "
        "replicas of a partition on distinct racks (broker.rack) where possible, moving "
        "as few replicas as possible. Shows the plan; --execute runs it.")
    p.add_argument("--topic", "-t", action="append", default=[], metavar="TOPIC",
                   help="only this topic's partitions (repeatable; default: every topic)")
    add_reassign_options(p)
    add_client_options(p)
    p.set_defaults(func=rebalance_main)

    p = sub.add_parser(
        "drain", help="move every replica off a broker (before removing it)",
        description="Plan a reassignment that moves every replica off BROKER onto the "
        "other live brokers (the least loaded, racks considered) and nothing else. Shows "
        "the plan; --execute runs it. Once it is done the broker holds no partition and "
        "can be stopped.")
    p.add_argument("broker", type=int, metavar="BROKER", help="the broker id to empty")
    add_reassign_options(p)
    add_client_options(p)
    p.set_defaults(func=drain_main)

    p = sub.add_parser(
        "local", help="start a local multi-broker cluster (development only)",
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
    p.set_defaults(func=local_main)


# ------------------------------------------------------------------------ info, health


def info_main(args: argparse.Namespace) -> int:
    from pybroker.broker.topic_manager import INTERNAL_TOPICS  # (only this command needs it)

    clients = BrokerClients(args)
    metadata = clients.metadata()
    described = clients.admin().describe_cluster(request_timeout=args.timeout) \
        .result(timeout=args.timeout)
    controller = described.controller.id if described.controller is not None else -1
    partitions = sum(len(t.partitions) for t in metadata.topics.values())
    internal = len(INTERNAL_TOPICS & set(metadata.topics))
    print(f"CLUSTER     {described.cluster_id or '-'}")
    print(f"CONTROLLER  {controller}")
    print(f"TOPICS      {len(metadata.topics)} ({internal} internal)")
    print(f"PARTITIONS  {partitions}")
    print()
    _table(["ID", "HOST", "PORT", "RACK"],
           [[f"{node.id}*" if node.id == controller else node.id, node.host, node.port,
             node.rack or "-"] for node in sorted(described.nodes, key=lambda n: n.id)])
    print("\n(* the controller)")
    return 0


class ClusterHealth(NamedTuple):
    controller: int
    brokers: list[int]  # live
    down: list[int]  # named as replicas, not live
    leaderless: list[str]  # topic/partition
    under_replicated: list[str]

    @property
    def reasons(self) -> list[str]:
        found = [("no_controller", self.controller < 0), ("brokers_down", self.down),
                 ("leaderless_partitions", self.leaderless),
                 ("under_replicated_partitions", self.under_replicated)]
        return [reason for reason, present in found if present]


def cluster_health(metadata: Any,
                   adding: dict[tuple[str, int], list[int]] | None = None) -> ClusterHealth:
    """The health of the cluster a confluent-kafka ``ClusterMetadata`` describes, where
    ``adding`` names the replicas that moves in progress are still adding."""
    adding = adding or {}
    live = set(metadata.brokers)
    replicas: set[int] = set()
    leaderless, under_replicated = [], []
    for name in sorted(metadata.topics):
        partitions = metadata.topics[name].partitions
        for index in sorted(partitions):
            partition = partitions[index]
            replicas.update(partition.replicas)
            if partition.leader not in live:
                leaderless.append(f"{name}/{index}")
            settled = len(partition.replicas) - len(adding.get((name, index), ()))
            if len(partition.isrs) < settled:
                under_replicated.append(f"{name}/{index}")
    return ClusterHealth(metadata.controller_id, sorted(live), sorted(replicas - live),
                         leaderless, under_replicated)


def _adding_replicas(args: argparse.Namespace) -> dict[tuple[str, int], list[int]]:
    """The replicas each partition's reassignment is still adding; none from a broker
    that does not serve ListPartitionReassignments."""
    from pybroker import reassignment_admin

    try:
        with protocol_cluster(args, "pybroker-health") as cluster:
            moving = reassignment_admin.ongoing(cluster)
    except CommandError:  # the request refused or unknown: count as Metadata says
        return {}
    return {partition: move.adding for partition, move in moving.items()}


def health_main(args: argparse.Namespace) -> int:
    health = cluster_health(BrokerClients(args).metadata(), _adding_replicas(args))

    def listed(items: list[Any]) -> str:
        return "[" + " ".join(map(str, items)) + "]"

    rows = [("Healthy:", str(not health.reasons).lower()),
            ("Unhealthy reasons:", listed(health.reasons)),
            ("Controller ID:", str(health.controller)),
            ("All brokers:", listed(health.brokers)),
            ("Brokers down:", listed(health.down)),
            (f"Leaderless partitions ({len(health.leaderless)}):", listed(health.leaderless)),
            (f"Under-replicated partitions ({len(health.under_replicated)}):",
             listed(health.under_replicated))]
    width = max(len(label) for label, _ in rows)
    print("CLUSTER HEALTH OVERVIEW\n=======================")
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 1 if health.reasons else 0


# ------------------------------------------------------------------- rebalance, drain


def add_reassign_options(parser: argparse.ArgumentParser, execute: bool = True) -> None:
    """``--execute`` (unless the command always runs), ``--throttle`` and ``--no-wait``."""
    if execute:
        parser.add_argument("--execute", action="store_true",
                            help="start the reassignment (default: only show the plan)")
    parser.add_argument("--throttle", type=_positive_int, metavar="BYTES_PER_S",
                        help="limit the replication of the moves to this rate on every "
                        "broker involved (Kafka's leader/follower.replication.throttled."
                        "rate and .replicas), removed when the moves are done")
    parser.add_argument("--no-wait", action="store_true",
                        help="return once the reassignment is started (progress: pybroker "
                        "partition reassignments; a throttle stays until pybroker "
                        "partition reassignments --clear-throttles)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive number of bytes per second, not {text!r}")
    return value


def rebalance_main(args: argparse.Namespace) -> int:
    from pybroker import reassignment_admin
    from pybroker.cluster.rebalance_plan import rebalance

    with protocol_cluster(args, "pybroker-rebalance") as cluster:
        layout = reassignment_admin.read_layout(cluster, args.topic or None)
        _refuse_dead_holders(layout, ignore=None)
        plan = rebalance(layout.assignment, layout.brokers)
        return _show_and_run(args, cluster, layout, plan)


def drain_main(args: argparse.Namespace) -> int:
    from pybroker import reassignment_admin
    from pybroker.cluster.rebalance_plan import PlanError, drain

    with protocol_cluster(args, "pybroker-rebalance") as cluster:
        layout = reassignment_admin.read_layout(cluster)
        _refuse_dead_holders(layout, ignore=args.broker)
        try:
            plan = drain(layout.assignment, layout.brokers, args.broker)
        except PlanError as exc:
            raise CommandError(f"cannot drain broker {args.broker}: {exc}") from None
        return _show_and_run(args, cluster, layout, plan)


def _refuse_dead_holders(layout: Any, ignore: int | None) -> None:
    """A plan spreads over the live brokers only: one that holds replicas but is down
    (restarting, say) would be emptied by it. The operator says so with ``drain``."""
    dead = sorted({b for replicas in layout.assignment.values() for b in replicas
                   if b not in layout.brokers and b != ignore})
    if dead:
        listed = ", ".join(map(str, dead))
        raise CommandError(f"broker{'s' if len(dead) > 1 else ''} {listed} hold"
                           f"{'' if len(dead) > 1 else 's'} replicas but "
                           f"{'are' if len(dead) > 1 else 'is'} not live: start "
                           f"{'them' if len(dead) > 1 else 'it'}, or move everything off "
                           f"with pybroker cluster drain {dead[0]}")


def print_plan(plan: Any, racks: dict[int, str | None]) -> None:
    """Each partition that changes (current -> target replicas), then the replica and
    preferred leader count of each broker before and after."""
    changes = plan.changes
    print(f"Partitions to reassign: {len(changes)} of {len(plan.current)}; replicas to "
          f"move: {plan.moves}")
    if changes:
        print()
        _table(["TOPIC", "PARTITION", "CURRENT", "TARGET"],
               [[t, p, _ids(plan.current[(t, p)]), _ids(target)]
                for (t, p), target in changes.items()])
    before, after = plan.replica_counts(plan.current), plan.replica_counts(plan.target)
    led_before, led_after = plan.leader_counts(plan.current), plan.leader_counts(plan.target)
    print()
    _table(["BROKER", "RACK", "REPLICAS", "LEADERS"],
           [[b, racks.get(b) or "-", f"{before.get(b, 0)} -> {after.get(b, 0)}",
             f"{led_before.get(b, 0)} -> {led_after.get(b, 0)}"]
            for b in sorted(set(before) | set(after) | set(racks))])


def _show_and_run(args: argparse.Namespace, cluster: Any, layout: Any, plan: Any) -> int:
    print_plan(plan, layout.brokers)
    if not plan.changes:
        print("\nNothing to move.")
        return 0
    if not args.execute:
        print("\n(a plan only: --execute starts it)")
        return 0
    print()
    return run_reassignment(args, cluster, plan.current, plan.changes)


def run_reassignment(args: argparse.Namespace, cluster: Any,
                     current: dict[tuple[str, int], list[int]],
                     targets: dict[tuple[str, int], list[int]]) -> int:
    """Start the reassignment of ``targets`` (partition -> target replicas), throttled
    with ``--throttle``, and unless ``--no-wait`` report progress until it is done, then
    remove the throttles and check every partition reached its target."""
    from pybroker import reassignment_admin

    busy = reassignment_admin.ongoing(cluster)
    if busy:
        raise CommandError(f"{len(busy)} reassignments in progress: wait for them "
                           "(pybroker partition reassignments) or cancel them (--cancel)")
    throttles = None
    if args.throttle:
        throttles = reassignment_admin.throttles(current, targets, args.throttle)
        reassignment_admin.apply_throttles(cluster, throttles)
        print(f"Throttle: {args.throttle} B/s on brokers {_ids(throttles.brokers)}")
    refused = reassignment_admin.alter(cluster, targets, args.timeout)
    for (topic, index), error in sorted(refused.items()):
        print(f"{topic}-{index}: {error}", file=sys.stderr)
    started = sorted(set(targets) - set(refused))
    print(f"Started {len(started)} reassignments")
    if not started:
        if throttles is not None:
            reassignment_admin.clear_throttles(cluster, throttles.brokers, throttles.topics)
        return 1
    if args.no_wait:
        print("Not waiting: pybroker partition reassignments shows them"
              + ("; pybroker partition reassignments --clear-throttles removes the "
                 "throttles once they are done" if throttles else ""))
        return 1 if refused else 0

    def progress(done: int, remaining: int) -> None:
        print(f"Reassigning: {done} of {len(started)} done, {remaining} remaining",
              flush=True)

    try:
        reassignment_admin.wait(cluster, started, progress)
    except KeyboardInterrupt:
        print("\nStopped waiting; the reassignments go on (pybroker partition "
              "reassignments shows them)", file=sys.stderr)
        return 1
    if throttles is not None:
        reassignment_admin.clear_throttles(cluster, throttles.brokers, throttles.topics)
        print("Throttles removed")
    reached = reassignment_admin.read_layout(cluster, sorted({t for t, _ in started})).assignment
    status = 1 if refused else 0
    for partition in started:
        if reached.get(partition) != targets[partition]:
            status = 1
            print(f"{partition[0]}-{partition[1]}: replicas "
                  f"{_ids(reached.get(partition, []))}, not the target "
                  f"{_ids(targets[partition])}", file=sys.stderr)
    print("Done" if status == 0 else "Done, with errors")
    return status


# ------------------------------------------------------------------------------ local


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


def local_main(args: argparse.Namespace) -> int:
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
