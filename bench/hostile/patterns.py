"""The hostile and heavy client patterns of issue 19, each against any Kafka-protocol broker.

A pattern has three steps and only ``run`` is measured: ``setup`` (topics it needs, a
group to park in; the session lets the broker settle after it), ``run`` (the hostile
part, holding its connections ``duration`` seconds where it holds any) and ``cleanup``
(close everything, delete its topics). ``count`` is each pattern's one size parameter;
``details`` is what the pattern saw, flat and mostly numbers, so rounds can be set side by
side. ``connections`` is how many hostile connections it opened: the session divides the
broker's resident set growth by it where ``per_connection`` says that figure means
something (idle, declared sizes, pipelining, parked requests, descriptor exhaustion).
"""

from __future__ import annotations

import os
import resource
import selectors
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, ClassVar

from bench.hostile import wire
from bench.hostile.canary import Canary
from bench.hostile.watch import BrokerWatch
from pybroker._native.records import HEADER_SIZE, MAX_DECOMPRESSED_SIZE, encode_batch

CONNECT_TIMEOUT = 2.0
ADMIN_DEADLINE = 300.0  # a broker that stalls minutes on a topic request is a finding, not a hang
READY_DEADLINE = 180.0
COORDINATOR_NOT_READY = {"COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS",
                         "NOT_COORDINATOR"}
ZSTD = 4


class Context:
    """What every pattern works against: the broker, its watch and the canary."""

    def __init__(self, bootstrap: str, watch: BrokerWatch, canary: Canary, duration: float,
                 run_id: str) -> None:
        self.bootstrap = bootstrap
        self.watch = watch
        self.canary = canary
        self.duration = duration
        self.run_id = run_id

    def connect(self, timeout: float = 30.0, client_id: str | None = wire.CLIENT_ID
                ) -> wire.Connection:
        return wire.Connection(self.bootstrap, timeout, client_id)

    def topic_names(self, kind: str, n: int) -> list[str]:
        return [f"hostile-{kind}-{self.run_id}-{i}" for i in range(n)]

    def admin(self, api_key: int, body: dict) -> tuple[dict, float]:
        """One admin request on its own connection: the answer and its seconds."""
        started = time.monotonic()
        with self.connect(ADMIN_DEADLINE) as conn:
            answer = conn.request(api_key, body)
        return answer, time.monotonic() - started

    def create_topics(self, names: list[str], partitions: int = 1) -> tuple[dict[str, int], float]:
        answer, seconds = self.admin(wire.CREATE_TOPICS,
                                     wire.create_topics_body(names, partitions))
        return wire.count_errors(list(wire.topic_errors(answer).values())), seconds

    def delete_topics(self, names: list[str]) -> tuple[dict[str, int], float]:
        answer, seconds = self.admin(wire.DELETE_TOPICS, wire.delete_topics_body(names))
        return wire.count_errors(list(wire.topic_errors(answer).values())), seconds

    def join_group(self, conn: wire.Connection, group: str, session_timeout_ms: int) -> dict:
        """A first member's JoinGroup (v3: no member id round), as a client makes it:
        FindCoordinator first (Kafka creates __consumer_offsets on the first one, and
        answers COORDINATOR_NOT_AVAILABLE, then NOT_COORDINATOR while it loads), each
        retried while the coordinator is not ready."""
        started = time.monotonic()
        while True:
            found = conn.request(wire.FIND_COORDINATOR, {"key": group, "key_type": 0})
            joined = conn.request(wire.JOIN_GROUP, wire.join_group_body(
                group, "", session_timeout_ms), version=wire.JOIN_GROUP_PARKING_VERSION) \
                if found["error_code"] == 0 else found
            error = wire.error_name(joined["error_code"])
            if error == "NONE":
                return joined
            if error not in COORDINATOR_NOT_READY or time.monotonic() - started > READY_DEADLINE:
                raise RuntimeError(f"JoinGroup {group}: {error}")
            time.sleep(0.2)

    def wait_producible(self, topic: str, partitions: int) -> None:
        """Until one record goes to every partition: Kafka names a leader in Metadata a
        moment before the partition takes produces (NOT_LEADER_OR_FOLLOWER meanwhile)."""
        batch = encode_batch([b"ready"])
        body = wire.produce_body({(topic, p): batch for p in range(partitions)})
        started = time.monotonic()
        with self.connect(ADMIN_DEADLINE) as conn:
            while errors := [e for e in wire.produce_errors(conn.request(wire.PRODUCE, body))
                             if e]:
                if time.monotonic() - started > READY_DEADLINE:
                    raise TimeoutError(f"{topic} refuses produces: {wire.count_errors(errors)}")
                time.sleep(0.2)

    def wait_topics_ready(self, names: list[str], partitions: int,
                          deadline: float = READY_DEADLINE) -> float:
        """Seconds until Metadata names every topic with all its partitions led."""
        started = time.monotonic()
        with self.connect(ADMIN_DEADLINE) as conn:
            while True:
                topics = conn.request(wire.METADATA, wire.metadata_body(names))["topics"]
                if all(t["error_code"] == 0 and len(t["partitions"]) == partitions
                       and all(p["leader_id"] >= 0 for p in t["partitions"]) for t in topics):
                    return time.monotonic() - started
                if time.monotonic() - started > deadline:
                    raise TimeoutError(f"topics not ready after {deadline:.0f} s")
                time.sleep(0.2)


def open_sockets(bootstrap: str, n: int, first: bytes = b"") -> tuple[list[socket.socket], str]:
    """Up to ``n`` connections, each sent ``first``; stops at the first that fails.

    Returns the sockets and why it stopped ("" when all were opened).
    """
    host, port = bootstrap.rsplit(":", 1)
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT)
            socks.append(sock)
            if first:
                sock.sendall(first)
    except OSError as e:
        return socks, f"{type(e).__name__}: {e}"
    return socks, ""


def state(sock: socket.socket) -> str:
    """How the broker left a connection: "closed" (EOF or reset), "data" (an answer
    waits) or "quiet" (nothing yet)."""
    try:
        sock.setblocking(False)
        return "data" if sock.recv(1, socket.MSG_PEEK) else "closed"
    except BlockingIOError:
        return "quiet"
    except OSError:
        return "closed"


def closed_by_broker(socks: list[socket.socket]) -> int:
    return sum(state(sock) == "closed" for sock in socks)


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
    socks.clear()


def raise_fd_limit() -> int:
    """This process's descriptor limit raised to the hard limit (the soft one returned)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def fmt(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


class Pattern:
    name: ClassVar[str]
    default_count: ClassVar[int]
    per_connection: ClassVar[bool] = False

    def __init__(self, ctx: Context, count: int) -> None:
        self.ctx = ctx
        self.count = count
        self.connections = 0
        self.details: dict[str, Any] = {}
        self.socks: list[socket.socket] = []

    def setup(self) -> None:
        """Unmeasured preparation."""

    def run(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        close_all(self.socks)

    def hold(self) -> None:
        time.sleep(self.ctx.duration)

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        """The pattern's own figures in a few words, from (possibly median) details."""
        return ""


class HoldingPattern(Pattern):
    """Opens ``count`` connections that each send ``first()`` and then hold them."""

    per_connection = True

    def first(self) -> bytes:
        return b""

    def run(self) -> None:
        self.socks, stopped = open_sockets(self.ctx.bootstrap, self.count, self.first())
        self.connections = len(self.socks)
        self.details.update(opened=len(self.socks), stopped=stopped or None)
        self.hold()
        self.details["closed_by_broker"] = closed_by_broker(self.socks)

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        return f"{fmt(d.get('opened'), '.0f')} open, {fmt(d.get('closed_by_broker'), '.0f')} " \
               "closed by broker"


class DeclaredSize(HoldingPattern):
    """Connections that send only a 4-byte size prefix of 100 MB, then hold."""

    name = "declared-size"
    default_count = 20  # the finding used 50: about 6 GB on pybroker, too much to share
    DECLARED = 104857600  # Kafka's socket.request.max.bytes: a size the broker allows

    def first(self) -> bytes:
        return struct.pack(">i", self.DECLARED)


class Idle(HoldingPattern):
    """Connections that send nothing."""

    name = "idle"
    default_count = 5000

    def run(self) -> None:
        self.details["broker_fd_limit"] = self.ctx.watch.fd_limit()
        super().run()


class Pipeline(Pattern):
    """Connections that write one request as fast as the broker takes it and never read."""

    per_connection = True
    default_count = 4
    api_key: ClassVar[int]
    body: ClassVar[dict]
    CHUNK_FRAMES = 256

    def run(self) -> None:
        frames = [wire.frame(self.api_key, self.body, i) for i in range(self.CHUNK_FRAMES)]
        chunk, frame_size = memoryview(b"".join(frames)), len(frames[0])
        self.socks, stopped = open_sockets(self.ctx.bootstrap, self.count)
        self.connections = len(self.socks)
        selector = selectors.DefaultSelector()
        for sock in self.socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_WRITE, [sock, 0])  # where it is in chunk
        sent, deadline = 0, time.monotonic() + self.ctx.duration
        while time.monotonic() < deadline and selector.get_map():
            for key, _ in selector.select(0.1):
                sock, position = key.data
                try:
                    n = sock.send(chunk[position:])
                except BlockingIOError:
                    continue
                except OSError:  # closed by the broker: counted below
                    selector.unregister(sock)
                    continue
                sent += n
                key.data[1] = (position + n) % len(chunk)
        selector.close()
        self.details.update(opened=len(self.socks), stopped=stopped or None,
                            requests_sent=sent // frame_size, mb_sent=round(sent / 1e6, 1),
                            closed_by_broker=closed_by_broker(self.socks))

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        return f"{fmt(d.get('requests_sent'), '.0f')} requests written, " \
               f"{fmt(d.get('closed_by_broker'), '.0f')} closed by broker"


class PipelineApiVersions(Pipeline):
    name = "pipeline-apiversions"
    api_key = wire.API_VERSIONS
    body = wire.api_versions_body()


class PipelineMetadata(Pipeline):
    name = "pipeline-metadata"
    api_key = wire.METADATA
    body = wire.metadata_body(None)


class Bomb(Pattern):
    """Produce requests of one zstd batch per partition, each inflating to the cap.

    The batches are valid (their records fill MAX_DECOMPRESSED_SIZE, pybroker's cap on a
    batch's records once decompressed, to within a few records), so a broker that accepts
    them does all the work of decompressing and checking them: Kafka has no cap and gets
    the same batches.
    """

    PARTITIONS = 100
    default_count = 3  # Produce requests, one after the other
    value_size: ClassVar[int]  # zero bytes per record (capped: one record fills the cap)

    def setup(self) -> None:
        self.batch = self.build_batch()
        self.topic = self.ctx.topic_names(self.name, 1)[0]
        errors, _ = self.ctx.create_topics([self.topic], self.PARTITIONS)
        if "NONE" not in errors:
            raise RuntimeError(f"could not create {self.topic}: {errors}")
        self.ctx.wait_topics_ready([self.topic], self.PARTITIONS)
        self.ctx.wait_producible(self.topic, self.PARTITIONS)

    def build_batch(self) -> bytes:
        value = bytes(min(self.value_size, MAX_DECOMPRESSED_SIZE - 64))

        def inflated(n: int) -> int:  # the records section, as the broker decompresses it
            return len(encode_batch([value] * n)) - HEADER_SIZE

        n = max(1, MAX_DECOMPRESSED_SIZE // inflated(1))
        while (size := inflated(n)) > MAX_DECOMPRESSED_SIZE:
            n = n * MAX_DECOMPRESSED_SIZE // size
        batch = encode_batch([value] * n, compression=ZSTD)
        self.details.update(records_per_batch=n, inflated_bytes=size, batch_bytes=len(batch))
        return batch

    def run(self) -> None:
        body = wire.produce_body({(self.topic, p): self.batch for p in range(self.PARTITIONS)},
                                 timeout_ms=60000)
        seconds: list[float] = []
        errors: list[int] = []
        failures: dict[str, int] = {}
        conn: wire.Connection | None = None
        self.connections = 1
        for _ in range(self.count):
            started = time.monotonic()
            try:
                conn = conn or self.ctx.connect(ADMIN_DEADLINE)
                errors += wire.produce_errors(conn.request(wire.PRODUCE, body))
            except (TimeoutError, OSError) as e:
                failures[type(e).__name__] = failures.get(type(e).__name__, 0) + 1
                if conn is not None:
                    conn.close()
                conn = None
            seconds.append(round(time.monotonic() - started, 3))
        if conn is not None:
            conn.close()
        self.details.update(requests=self.count, batches_per_request=self.PARTITIONS,
                            request_s=seconds, max_request_s=max(seconds),
                            accepted_batches=errors.count(0),
                            partition_errors=wire.count_errors(errors),
                            request_failures=failures)

    def cleanup(self) -> None:
        self.ctx.delete_topics([self.topic])

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        return f"batch {fmt(d.get('batch_bytes'), '.0f')} B -> " \
               f"{fmt(d.get('inflated_bytes'), '.0f')} B, {fmt(d.get('accepted_batches'), '.0f')}" \
               f" accepted; slowest request {fmt(d.get('max_request_s'), '.2f')} s"


class BombZstd2k(Bomb):
    name = "bomb-zstd-2k"
    value_size = MAX_DECOMPRESSED_SIZE  # one record: about 2 KB compressed


class BombZstd131k(Bomb):
    name = "bomb-zstd-131k"
    value_size = 1280  # about 52,000 records: about 130 KB compressed


class TopicsPattern(Pattern):
    """``count`` one-partition topics of the pattern's own, deleted in cleanup."""

    def setup(self) -> None:
        self.topics = self.ctx.topic_names(self.name, self.count)
        self.connections = 1  # one admin connection at a time

    def cleanup(self) -> None:
        self.ctx.delete_topics(self.topics)

    def answered(self, errors: dict[str, int], seconds: float) -> None:
        self.details.update(answer_s=round(seconds, 3), errors=errors,
                            refused=self.count - errors.get("NONE", 0))

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        return f"answered in {fmt(d.get('answer_s'), '.2f')} s, " \
               f"{fmt(d.get('refused'), '.0f')} refused"


class CreateTopics(TopicsPattern):
    """One CreateTopics of all the topics."""

    name = "create-topics"
    default_count = 2000

    def run(self) -> None:
        self.answered(*self.ctx.create_topics(self.topics))


class AutoCreate(TopicsPattern):
    """One Metadata naming all the topics, unknown, with auto-creation allowed."""

    name = "auto-create"
    default_count = 1000

    def run(self) -> None:
        answer, seconds = self.ctx.admin(wire.METADATA, wire.metadata_body(self.topics, True))
        self.details.update(answer_s=round(seconds, 3), errors=wire.count_errors(
            [t["error_code"] for t in answer["topics"]]))
        # Kafka answers LEADER_NOT_AVAILABLE and creates them after: wait for that too.
        self.details["created_s"] = round(
            seconds + self.ctx.wait_topics_ready(self.topics, 1), 3)

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        return f"answered in {fmt(d.get('answer_s'), '.2f')} s, all created in " \
               f"{fmt(d.get('created_s'), '.2f')} s"


class DeleteTopics(TopicsPattern):
    """One DeleteTopics of all the topics (created, unmeasured, in setup)."""

    name = "delete-topics"
    default_count = 2000

    def setup(self) -> None:
        super().setup()
        self.deleted = False
        self.ctx.create_topics(self.topics)
        self.ctx.wait_topics_ready(self.topics, 1)

    def run(self) -> None:
        self.answered(*self.ctx.delete_topics(self.topics))
        self.deleted = True

    def cleanup(self) -> None:
        if not self.deleted:  # the run stopped half way
            super().cleanup()


class BigTopic(Pattern):
    """Create a topic of ``count`` partitions, wait until all are led, delete it."""

    name = "big-topic"
    default_count = 5000

    def setup(self) -> None:
        self.topic = self.ctx.topic_names("big", 1)[0]
        self.deleted = False

    def run(self) -> None:
        self.connections = 1
        errors, create_s = self.ctx.create_topics([self.topic], self.count)
        ready_s = self.ctx.wait_topics_ready([self.topic], self.count) if "NONE" in errors \
            else None
        delete_errors, delete_s = self.ctx.delete_topics([self.topic])
        self.deleted = True
        self.details.update(create_s=round(create_s, 3), create_errors=errors,
                            ready_s=None if ready_s is None else round(create_s + ready_s, 3),
                            delete_s=round(delete_s, 3), delete_errors=delete_errors)

    def cleanup(self) -> None:
        if not self.deleted:  # the run stopped half way
            self.ctx.delete_topics([self.topic])

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        return f"created in {fmt(d.get('create_s'), '.2f')} s (led in " \
               f"{fmt(d.get('ready_s'), '.2f')} s), deleted in {fmt(d.get('delete_s'), '.2f')} s"


class DisconnectLongPoll(Pattern):
    """Requests that park in the broker, from connections closed while they wait.

    Half are Fetches at the end of an empty partition (max_wait_ms 30000, min_bytes 1 MiB),
    half JoinGroups into a group whose one member (joined in setup, then silent) must
    rejoin first, so they park until its 30 s session ends. The figure is how long the
    broker keeps the closed sockets in CLOSE_WAIT, holding their descriptors.
    """

    name = "disconnect-long-poll"
    per_connection = True
    default_count = 100
    PARK_MS = 30000
    PARKED_BEFORE_CLOSE = 1.0
    RELEASE_TIMEOUT = 45.0

    def setup(self) -> None:
        self.topic = self.ctx.topic_names("lp", 1)[0]
        self.member: wire.Connection | None = None
        self.conns: list[wire.Connection] = []
        self.ctx.create_topics([self.topic])
        self.ctx.wait_topics_ready([self.topic], 1)
        self.group = self.topic
        self.member = self.ctx.connect(60.0)  # answered at once, or after Kafka's 3 s delay
        self.ctx.join_group(self.member, self.group, self.PARK_MS)

    def run(self) -> None:
        watch = self.ctx.watch
        fds_before = watch.fd_count()
        conns = self.conns
        for i in range(self.count):
            conn = self.ctx.connect(CONNECT_TIMEOUT)
            conns.append(conn)
            if i % 2 == 0:
                conn.send(wire.FETCH, wire.fetch_body(self.topic, 0, 0, self.PARK_MS, 1 << 20))
            else:
                conn.send(wire.JOIN_GROUP, wire.join_group_body(self.group, "", self.PARK_MS),
                          version=wire.JOIN_GROUP_PARKING_VERSION)
        self.connections = len(conns)
        time.sleep(self.PARKED_BEFORE_CLOSE)
        fds_parked = watch.fd_count()
        socks = [conn.sock for conn in conns]
        ports = {sock.getsockname()[1] for sock in socks}
        answered = sum(state(sock) != "quiet" for sock in socks)
        for conn in conns:
            conn.close()
        closed_at = time.monotonic()
        held, most = None, 0
        while time.monotonic() - closed_at < self.RELEASE_TIMEOUT:
            waiting = watch.close_wait(ports)
            most = max(most, waiting)
            if waiting == 0:
                held = round(time.monotonic() - closed_at, 2)
                break
            time.sleep(0.1)
        self.details.update(fetches=(self.count + 1) // 2, joins=self.count // 2,
                            answered_before_close=answered,
                            close_wait_max=most, close_wait_held_s=held,
                            release_timeout_s=self.RELEASE_TIMEOUT, fds_before=fds_before,
                            fds_parked=fds_parked, fds_after=watch.fd_count())

    def cleanup(self) -> None:
        for conn in [*self.conns, *filter(None, [self.member])]:
            conn.close()
        self.ctx.delete_topics([self.topic])

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        held = d.get("close_wait_held_s")
        return f"{fmt(d.get('close_wait_max'), '.0f')} in CLOSE_WAIT, held " + (
            f"{held:.1f} s" if held is not None
            else f"> {fmt(d.get('release_timeout_s'), '.0f')} s")


class FdExhaustion(Pattern):
    """Idle connections until the broker runs out of descriptors or stops accepting.

    ``count`` 0 means the broker's descriptor limit plus 256. Start the broker with a low
    ``ulimit -n`` (1024) for this one; the side-by-side runner does.
    """

    name = "fd-exhaustion"
    per_connection = True
    default_count = 0
    RECOVERY_TIMEOUT = 30.0
    OWN_RESERVE = 64

    def run(self) -> None:
        watch = self.ctx.watch
        limit = watch.fd_limit()
        own_room = raise_fd_limit() - len(os.listdir("/proc/self/fd")) - self.OWN_RESERVE
        target = min(self.count or (limit or 0) + 256, own_room)
        opening = time.monotonic_ns()
        self.socks, stopped = open_sockets(self.ctx.bootstrap, target)
        self.connections = len(self.socks)
        # The kernel completes connections the broker has not accepted yet (its backlog):
        # its count is read once it stops growing, as the most sampled (it may have died).
        _plateau(watch.fd_count)
        fds = watch.peak(opening, time.monotonic_ns())["fds"]
        cpu0, log0, t0 = watch.snapshot()["cpu_s"], watch.log_size(), time.monotonic()
        self.hold()
        cpu1, held = watch.snapshot()["cpu_s"], time.monotonic() - t0
        log_text = watch.log_since(log0) if log0 is not None else None
        close_all(self.socks)
        closed_at_ns = time.monotonic_ns()
        recovered = None
        while watch.alive() and time.monotonic_ns() - closed_at_ns < self.RECOVERY_TIMEOUT * 1e9:
            if self.ctx.canary.served_since(closed_at_ns) and _new_connection_served(
                    self.ctx.bootstrap):
                recovered = round((time.monotonic_ns() - closed_at_ns) / 1e9, 2)
                break
            time.sleep(0.2)
        self.details.update(
            broker_fd_limit=limit, opened=self.connections, stopped=stopped or None,
            broker_fds=fds,
            cpu_cores_at_limit=None if cpu0 is None or cpu1 is None
            else round((cpu1 - cpu0) / held, 2),
            log_mb_at_limit=None if log_text is None else round(len(log_text) / 1e6, 2),
            log_lines_at_limit=None if log_text is None else log_text.count("\n"),
            recovered_s=recovered)

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        recovered = d.get("recovered_s")
        return f"{fmt(d.get('broker_fds'), '.0f')} of {fmt(d.get('broker_fd_limit'), '.0f')} " \
               f"fds: {fmt(d.get('cpu_cores_at_limit'), '.2f')} cores, log " \
               f"+{fmt(d.get('log_mb_at_limit'), '.1f')} MB; served again " + (
                   f"after {recovered:.1f} s" if recovered is not None else "never")


def _plateau(read: Callable[[], int | None], timeout: float = 10.0) -> None:
    """Until ``read()`` has not changed for a second (or ``timeout`` passed)."""
    value, since, started = read(), time.monotonic(), time.monotonic()
    while time.monotonic() - since < 1.0 and time.monotonic() - started < timeout:
        time.sleep(0.2)
        if (now := read()) != value:
            value, since = now, time.monotonic()


def _new_connection_served(bootstrap: str) -> bool:
    try:
        with wire.Connection(bootstrap, CONNECT_TIMEOUT) as conn:
            return conn.request(wire.API_VERSIONS, wire.api_versions_body())["error_code"] == 0
    except OSError:  # refused, reset, timed out
        return False


class LogInjection(Pattern):
    """A client id and a group id carrying a newline and a forged log line.

    Sent in ApiVersions, FindCoordinator, a JoinGroup and its LeaveGroup, and a request
    whose body is cut short (which a broker may log with the client id). The figure is
    whether the forged line stands as a line of its own in the broker's log (``--log``).
    """

    name = "log-injection"
    default_count = 1

    def setup(self) -> None:
        self.marker = f"FORGED-{self.ctx.run_id}"
        self.forged_line = f"[2001-01-01 00:00:00,000] ERROR {self.marker} forged by a client"
        self.log_start = self.ctx.watch.log_size()

    def run(self) -> None:
        evil = "bench-hostile\n" + self.forged_line
        failures = 0
        for i in range(self.count):
            group = f"{evil} {i}"
            try:
                with self.ctx.connect(60.0, client_id=evil) as conn:
                    self.connections += 1
                    conn.request(wire.API_VERSIONS, wire.api_versions_body())
                    joined = self.ctx.join_group(conn, group, 10000)
                    conn.request(wire.LEAVE_GROUP, {"group_id": group, "members": [
                        {"member_id": joined["member_id"], "group_instance_id": None}]})
                    cut = wire.frame(wire.METADATA, wire.metadata_body(["x" * 40]), 1, evil)
                    conn.sock.sendall(struct.pack(">i", len(cut) - 24) + cut[4:-20])
            except (OSError, RuntimeError):  # refused, timed out, JoinGroup refused
                failures += 1
        time.sleep(1.0)  # let the log catch up
        self.details["request_failures"] = failures
        if self.log_start is None:
            self.details.update(forged_lines=None, marker_mentions=None)
            return
        text = self.ctx.watch.log_since(self.log_start)
        self.details.update(
            marker_mentions=text.count(self.marker),
            forged_lines=sum(line.startswith(self.forged_line) for line in text.splitlines()))

    @staticmethod
    def note(d: dict[str, Any]) -> str:
        if d.get("marker_mentions") is None:
            return "no --log given"
        return f"marker in log {fmt(d.get('marker_mentions'), '.0f')}x, as its own line " \
               f"{fmt(d.get('forged_lines'), '.0f')}x"


PATTERNS: dict[str, type[Pattern]] = {p.name: p for p in (
    DeclaredSize, Idle, PipelineApiVersions, PipelineMetadata, BombZstd2k, BombZstd131k,
    CreateTopics, AutoCreate, DeleteTopics, BigTopic, DisconnectLongPoll, LogInjection,
    FdExhaustion)}
# fd-exhaustion wants a broker started with a low descriptor limit: asked for by name only.
DEFAULT_PATTERNS = [name for name in PATTERNS if name != FdExhaustion.name]
