"""One benchmark run: topics, worker processes, phases, and the raw figures they return.

Phases (all times CLOCK_MONOTONIC, shared by every process on this host):

  live      consumers join their groups first; then producers run warm-up + duration
            while consumers read; then consumers drain until each group has everything
            that was acknowledged (or drain_timeout passes).
  backlog   producers fill the topics (warm-up + duration) with no consumer running; then
            consumers join with their partitions paused, are released together, and read
            the backlog from the beginning until each group has all of it.

Workers are separate processes (multiprocessing, spawn: no state or librdkafka threads
inherited by fork), so client CPU is spread over the cores like independent clients.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from bench.driver import consumer as consumer_worker
from bench.driver import producer as producer_worker
from bench.driver.backends import BACKENDS, native_client
from bench.driver.messages import KEY_BYTES
from bench.driver.procstat import CLOCK_TICKS, BrokerProbe
from bench.driver.progress import Progress
from bench.driver.recorder import (
    ASSIGNED,
    CONTROL_SLOTS,
    COUNTER_SLOTS,
    DONE_COUNT,
    ERRORS,
    FINISHED,
    READY,
    SENT,
    T_END,
    T_MEASURE,
    T_START,
    run_worker,
)
from bench.driver.workload import Workload

SETUP_TIMEOUT = 60.0  # spawn + import + connect + group join, per phase
TICK = 0.1
STABLE = 0.5
FOREVER = 1e18


class RunError(RuntimeError):
    """The run could not complete (a worker failed, the broker refused, a timeout)."""


@dataclass
class Worker:
    role: str
    index: int
    process: Any
    counters: Any
    group: str | None = None
    result: dict[str, Any] | None = None


@dataclass
class Phase:
    """Processes started together and released by one ``go``."""
    name: str
    workers: list[Worker] = field(default_factory=list)
    control: Any = None
    go: Any = None
    stop: Any = None

    def total(self, slot: int) -> int:
        return int(sum(w.counters[slot] for w in self.workers))


class Run:
    def __init__(self, workload: Workload, bootstrap: str, broker_pid: int | None = None,
                 progress: Progress | None = None):
        self.workload = workload
        self.bootstrap = bootstrap
        self.progress = progress or Progress()
        self.probe = BrokerProbe(broker_pid) if broker_pid else None
        self.run_id = time.strftime("%H%M%S") + "-" + secrets.token_hex(3)
        self.topics = [f"bench-{workload.name}-{self.run_id}-{i}" for i in range(workload.topics)]
        self.record_bytes = workload.message_size + (KEY_BYTES if workload.keys != "none" else 0)
        self.ctx = mp.get_context("spawn")
        self.results = self.ctx.Queue()
        self.phases: list[Phase] = []
        self.times: dict[str, float] = {}
        self.drain_timed_out = False

    # -- the run -------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        """Run the workload; returns the raw figures report.build_result() turns into a report."""
        w = self.workload
        if w.producer == "pybroker-native":
            native_client()  # fail before creating topics or processes
        self.started_wall = time.time()
        self.create_topics()
        self.sample()
        try:
            if w.mode == "live":
                self.run_live()
            else:
                self.run_backlog()
        finally:
            self.shutdown()
        return self.raw()

    def run_live(self) -> None:
        w = self.workload
        consumers = self.new_phase("consume") if w.consumers.total else None
        if consumers:
            self.start_consumers(consumers, hold=False)
            self.wait_assigned(consumers)
        producers = self.new_phase("produce")
        self.start_producers(producers)
        self.wait_ready(producers)
        self.release(producers, w.warmup, w.duration)
        if consumers:
            # Consumers count on the producers' clock: one time line for both series.
            consumers.control[:] = producers.control[:]
            consumers.go.set()
        self.watch(producers, lambda: all(x.counters[FINISHED] for x in producers.workers),
                   consumers)
        self.times["produce_end"] = time.monotonic()
        self.sample()
        self.collect(producers)
        if consumers:
            self.drain(consumers, w.drain_timeout)
            self.collect(consumers)

    def run_backlog(self) -> None:
        w = self.workload
        producers = self.new_phase("produce")
        self.start_producers(producers)
        self.wait_ready(producers)
        self.release(producers, w.warmup, w.duration)
        self.watch(producers, lambda: all(x.counters[FINISHED] for x in producers.workers))
        self.sample()
        self.collect(producers)
        consumers = self.new_phase("consume")
        self.start_consumers(consumers, hold=True)
        self.wait_assigned(consumers)
        self.release(consumers, 0, FOREVER)
        self.drain(consumers, w.drain_timeout + w.warmup + w.duration)
        self.collect(consumers)

    # -- setup ---------------------------------------------------------------------------

    def create_topics(self) -> None:
        w = self.workload
        create_topics(self.bootstrap, self.topics, w.partitions, w.replication_factor)

    def new_phase(self, name: str) -> Phase:
        phase = Phase(name, control=self.ctx.Array("d", CONTROL_SLOTS, lock=False),
                      go=self.ctx.Event(), stop=self.ctx.Event())
        phase.control[:] = [FOREVER] * CONTROL_SLOTS
        self.phases.append(phase)
        return phase

    def spawn(self, phase: Phase, role: str, index: int, body: Any,
              spec: dict[str, Any], group: str | None = None) -> None:
        counters = self.ctx.Array("d", COUNTER_SLOTS, lock=False)
        spec = dict(spec, index=index, workload=self.workload.as_dict(), topics=self.topics,
                    bootstrap=self.bootstrap, record_bytes=self.record_bytes)
        process = self.ctx.Process(
            target=run_worker, name=f"bench-{role}-{index}", daemon=True,
            args=(role, body, spec, counters, phase.control, phase.go, phase.stop,
                  self.results))
        process.start()
        phase.workers.append(Worker(role, index, process, counters, group))

    def start_producers(self, phase: Phase) -> None:
        w = self.workload
        rate = None if w.rate is None else w.rate / w.producers
        for i in range(w.producers):
            self.spawn(phase, "producer", i, producer_worker.produce,
                       {"rate": rate, "flush_timeout": w.drain_timeout})

    def start_consumers(self, phase: Phase, hold: bool) -> None:
        c = self.workload.consumers
        for g in range(c.groups):
            group = f"bench-{self.run_id}-{phase.name}-g{g}"
            for i in range(c.per_group):
                self.spawn(phase, "consumer", g * c.per_group + i, consumer_worker.consume,
                           {"group": group, "hold": hold}, group=group)

    def wait_ready(self, phase: Phase) -> None:
        self.wait(phase, f"{phase.name}: starting {len(phase.workers)} processes",
                  lambda: all(x.counters[READY] for x in phase.workers))

    def wait_assigned(self, phase: Phase) -> None:
        # A group is ready when its members together hold every partition, each member
        # holds some (while members join, the first one briefly holds them all), and that
        # has not changed for STABLE seconds: a rebalance after go would stall the figures.
        wanted = self.workload.partitions * self.workload.topics
        groups = {x.group for x in phase.workers}
        stable_since: list[float] = []

        def settled(group: str | None) -> bool:
            members = [x.counters[ASSIGNED] for x in phase.workers if x.group == group]
            return sum(members) == wanted and (wanted < len(members) or min(members) > 0)

        def assigned() -> bool:
            if not all(settled(g) for g in groups):
                stable_since.clear()
                return False
            if not stable_since:
                stable_since.append(time.monotonic())
            return time.monotonic() - stable_since[0] >= STABLE
        self.wait(phase, f"{phase.name}: {len(groups)} groups joining", assigned)

    def wait(self, phase: Phase, what: str, condition: Any) -> None:
        deadline = time.monotonic() + SETUP_TIMEOUT
        while not condition():
            self.check_failures(phase)
            if time.monotonic() > deadline:
                raise RunError(f"{what}: not done after {SETUP_TIMEOUT:.0f}s")
            self.progress.update("setup", what)
            time.sleep(TICK)

    def release(self, phase: Phase, warmup: float, duration: float) -> None:
        t_start = time.monotonic() + 0.05
        phase.control[T_START] = t_start
        phase.control[T_MEASURE] = t_start + warmup
        phase.control[T_END] = t_start + warmup + duration
        self.times[f"{phase.name}_start"] = t_start
        self.times[f"{phase.name}_measure"] = t_start + warmup
        self.times[f"{phase.name}_end"] = t_start + warmup + duration
        phase.go.set()

    # -- while running ---------------------------------------------------------------------

    def sample(self) -> None:
        if self.probe:
            self.probe.sample()

    def watch(self, phase: Phase, done: Any, consumers: Phase | None = None) -> None:
        """Show progress and sample the broker until ``done()``; ``consumers``: a phase
        running alongside whose count is shown too."""
        history: list[tuple[float, int]] = []
        while not done():
            self.check_failures(phase)
            self.sample()
            now = time.monotonic()
            count = phase.total(DONE_COUNT)
            history.append((now, count))
            while len(history) > 1 and now - history[0][0] > 1.0:
                history.pop(0)
            span = now - history[0][0]
            rate = (count - history[0][1]) / span if span > 0 else 0.0
            elapsed = now - phase.control[T_START]
            total = phase.control[T_END] - phase.control[T_START]
            clock = f"{elapsed:5.1f}s" + (f"/{total:.0f}s" if total < FOREVER / 2 else "")
            stage = "warm-up" if now < phase.control[T_MEASURE] else phase.name
            if now < phase.control[T_START]:
                stage = "start"
            elif now >= phase.control[T_END]:
                stage = "flush" if phase.name == "produce" else "drain"
            sent = f"sent {phase.total(SENT):,} " if phase.name == "produce" else ""
            also = f" consumed {consumers.total(DONE_COUNT):,}" if consumers else ""
            self.progress.update(
                stage, f"{clock} {sent}{'acked' if phase.name == 'produce' else 'consumed'} "
                f"{count:,} ({rate:,.0f} msg/s, {rate * self.record_bytes / 1e6:.1f} MB/s)"
                f"{also} errors {phase.total(ERRORS)}{self.broker_cpu_text()}")
            time.sleep(TICK)
        self.progress.end_line()

    def broker_cpu_text(self) -> str:
        if not self.probe or len(self.probe.samples) < 2:
            return ""
        t0, c0 = self.probe.samples[-min(len(self.probe.samples), 11)]  # ~1 s ago
        t1, c1 = self.probe.samples[-1]
        return f" broker {100 * (c1 - c0) / CLOCK_TICKS / max(t1 - t0, 1e-9):.0f}% cpu"

    def drain(self, phase: Phase, timeout: float) -> None:
        """Let each group catch up with what producers had acknowledged, then stop it."""
        expected = self.acked()
        groups = {x.group for x in phase.workers}
        deadline = time.monotonic() + timeout

        def caught_up() -> bool:
            if time.monotonic() > deadline:
                return True
            return all(sum(x.counters[DONE_COUNT] for x in phase.workers if x.group == g)
                       >= expected for g in groups)
        self.watch(phase, caught_up)
        self.times[f"{phase.name}_drained"] = time.monotonic()
        self.drain_timed_out = time.monotonic() > deadline
        self.sample()
        # A moment for duplicates (re-deliveries) to show up before the count is final.
        time.sleep(0.2)
        phase.stop.set()

    def acked(self) -> int:
        return sum(w.result["total"] for p in self.phases if p.name == "produce"
                   for w in p.workers if w.result)

    def check_failures(self, phase: Phase) -> None:
        self.poll_results(0)
        for w in phase.workers:
            if not w.process.is_alive() and w.result is None and not w.counters[FINISHED]:
                raise RunError(f"{w.role} {w.index} exited with code {w.process.exitcode}")

    def poll_results(self, timeout: float) -> None:
        try:
            item = self.results.get(timeout=timeout)
        except queue.Empty:
            return
        kind, who, payload = item
        if kind == "error":
            raise RunError(f"{who} failed:\n{payload}")
        name = "produce" if kind == "producer" else "consume"
        phase = [p for p in self.phases if p.name == name][-1]  # one phase per role
        phase.workers[who].result = payload

    def collect(self, phase: Phase) -> None:
        deadline = time.monotonic() + SETUP_TIMEOUT
        while any(w.result is None for w in phase.workers):
            if time.monotonic() > deadline:
                missing = [f"{w.role} {w.index}" for w in phase.workers if w.result is None]
                raise RunError(f"no result from {missing} after {SETUP_TIMEOUT:.0f}s")
            self.poll_results(TICK)
        for w in phase.workers:
            w.process.join(10)

    def shutdown(self) -> None:
        for phase in self.phases:
            phase.stop.set()
            phase.control[T_END] = min(phase.control[T_END], time.monotonic())
        for phase in self.phases:
            for w in phase.workers:
                w.process.join(10)
                if w.process.is_alive():  # our own child, stuck in librdkafka
                    w.process.terminate()
                    w.process.join(5)
        self.progress.end_line()

    # -- figures -------------------------------------------------------------------------

    def raw(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "bootstrap": self.bootstrap,
            "run_id": self.run_id,
            "topics": self.topics,
            "started_wall": self.started_wall,
            "record_bytes": self.record_bytes,
            "times": self.times,
            "producers": [w.result for p in self.phases if p.name == "produce"
                          for w in p.workers],
            "consumers": [w.result for p in self.phases if p.name == "consume"
                          for w in p.workers],
            "probe": self.probe,
            "drain_timed_out": self.drain_timed_out,
        }


def create_topics(bootstrap: str, topics: list[str], partitions: int | list[int],
                  replication_factor: int = 1) -> None:
    """Create the topics (``partitions``: one count for all, or one per topic) and wait
    until every partition has a leader in the metadata."""
    from confluent_kafka.admin import AdminClient, NewTopic

    counts = partitions if isinstance(partitions, list) else [partitions] * len(topics)
    wanted = dict(zip(topics, counts, strict=True))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.list_topics(timeout=15)
    except Exception as e:
        raise RunError(f"cannot reach a broker at {bootstrap}: {e}") from e
    futures = admin.create_topics(
        [NewTopic(t, n, replication_factor) for t, n in wanted.items()],
        operation_timeout=30, request_timeout=30)
    for topic, future in futures.items():
        try:
            future.result(timeout=60)
        except Exception as e:
            raise RunError(f"creating topic {topic} on {bootstrap}: {e}") from e
    deadline = time.monotonic() + SETUP_TIMEOUT
    while True:  # wait until every partition has a leader in the metadata
        metadata = admin.list_topics(timeout=10)
        ready = [t for t, n in wanted.items() if t in metadata.topics
                 and metadata.topics[t].error is None
                 and len(metadata.topics[t].partitions) == n
                 and all(p.leader >= 0 for p in metadata.topics[t].partitions.values())]
        if len(ready) == len(wanted):
            return
        if time.monotonic() > deadline:
            raise RunError(f"topics {topics} not ready after {SETUP_TIMEOUT:.0f}s")
        time.sleep(0.2)


def available_backends() -> list[str]:
    return sorted(BACKENDS)
