"""The single-node broker's figures against this machine's own limits, in one run.

    python3 -m bench.single_node [--seconds 5] [--out DIR] [--only produce,fetch]
                                 [--threads N] [--batch-kib 1024]

``--only`` runs the named figures (produce, fetch, latency, start; default all) and
``--threads`` sets the broker's ``num.network.threads`` (default: the broker's own).
``--batch-kib`` changes the batch size of produce and fetch (fetches ask for 4 batches), to
see where handing bulk transfers to network threads starts to pay.

Every figure is a ratio to a baseline measured by the same script in the same run,
because the machine is shared and noisy:

- produce ingest: 1 MiB batches over 4 connections (acks=1) versus raw loopback TCP
  between two processes carrying the same 1 MiB frames to a sink that discards them;
- fetch: a consumer that discards what it reads, data in page cache, versus a process
  sending the same volume from memory over loopback to the same discarding reader;
- one-record produce round trip (acks=1) p50 versus an asyncio (uvloop) echo round trip
  of a frame of the same size, with idle CPUs and with busy ones (see measure_latency);
- start to ready with an empty data dir, and idle resident memory.

Produce and fetch are also set against what this machine allows any broker (bench.limits,
same run): 4 connections received and written to growing files, and a page-cached file
sent by 4 threads with sendfile to receivers that copy it out.

The load generator is the same code for broker and baseline (blocking sockets, one
thread per connection; sendall and recv_into release the GIL), so the ratio measures
the broker, not the client. What a ratio cannot separate is a slow broker from a
starved one: the broker's event loop is one thread, the baselines' senders are four, and
on a loaded machine the scheduler shares CPUs per thread. So the run also reports how
long the broker's threads sat runnable waiting for a CPU (``broker_cpu_wait_fraction``:
seconds summed over its threads per second of the run, from /proc schedstat) and the
load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

from bench import limits
from bench.limits import start_process_server
from pybroker._native.records import encode_batch
from pybroker.net.protocol import codec

BATCH_BYTES = 1 << 20
RECORD_BYTES = 1024
CONNECTIONS = 4
PRODUCE, FETCH = 0, 1
FIGURES = ("produce", "fetch", "latency", "start")


# -- frames -------------------------------------------------------------------------------

def produce_frame(topic: str, partition: int, batch: bytes, acks: int = 1) -> bytes:
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": batch}]}]}
    return codec.encode_request(PRODUCE, 8, 1, body, "bench")


def fetch_frame(topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
    body = {"replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    return codec.encode_request(FETCH, 11, 1, body, "bench")


def one_mib_batch() -> bytes:
    count = BATCH_BYTES // (RECORD_BYTES + 16)
    return encode_batch([os.urandom(16) * (RECORD_BYTES // 16)] * count)


def recv_exact(sock: socket.socket, n: int, scratch: memoryview) -> None:
    while n:
        k = sock.recv_into(scratch, min(n, len(scratch)))
        if k == 0:
            raise ConnectionError("peer closed")
        n -= k


def recv_only_frame(sock: socket.socket, scratch: memoryview) -> int:
    """Reads the one frame the peer owes (nothing else may follow it), usually in one
    recv, as the echo baseline reads its reply; returns its size. recv_frame's two recvs
    (prefix, then body) would charge the broker a syscall the echo does not pay."""
    got = 0
    while got < 4 or got < 4 + struct.unpack_from(">i", scratch)[0]:
        k = sock.recv_into(scratch[got:])
        if k == 0:
            raise ConnectionError("peer closed")
        got += k
    return got - 4


def recv_frame(sock: socket.socket, scratch: memoryview) -> int:
    """Reads one size-prefixed frame into scratch (discarding it); returns its size."""
    recv_exact(sock, 4, scratch)
    size = struct.unpack_from(">i", scratch)[0]
    recv_exact(sock, size, scratch)
    return size


# -- the broker ---------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process, all its threads, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Broker:
    def __init__(self, settings: dict[str, object] | None = None,
                 port: int | None = None) -> None:
        """``port``: the PLAINTEXT listener's, when ``settings`` name the listeners."""
        self.data_dir = tempfile.mkdtemp(prefix="pybroker-bench-")
        self.port = port or free_port()
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "serve", "--data-dir", self.data_dir,
             "--listen", f"127.0.0.1:{self.port}",
             *(arg for k, v in (settings or {}).items() for arg in ("--set", f"{k}={v}"))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        self.start_seconds = time.monotonic() - started

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def cpu_wait_seconds(self) -> float:
        """Seconds the broker's threads were runnable but waiting for a CPU (schedstat).
        On a shared machine this is what separates a slow broker from a starved one."""
        total = 0
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1])
            except OSError:  # a thread that just ended
                pass
        return total / 1e9

    def create_topic(self, topic: str, partitions: int) -> None:
        create_topic(self.port, topic, partitions)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def create_topic(port: int, topic: str, partitions: int) -> None:
    """CreateTopics on the broker at 127.0.0.1:``port`` (any Kafka-protocol broker)."""
    body = {"topics": [{"name": topic, "num_partitions": partitions,
                        "replication_factor": 1, "assignments": [], "configs": [
                            {"name": "max.message.bytes", "value": str(2 * BATCH_BYTES)}]}],
            "timeout_ms": 30000, "validate_only": False}
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(codec.encode_request(19, 4, 1, body, "bench"))
        recv_frame(sock, memoryview(bytearray(1 << 16)))


# -- load: many connections, each a thread ------------------------------------------------

def _run_connections(port: int, seconds: float, work, wrap=None) -> tuple[int, float]:
    """Runs work(sock, stop_at) -> bytes on CONNECTIONS connections; (bytes, seconds).
    ``wrap(sock) -> sock``: e.g. a TLS client's (bench.tls)."""
    totals = [0] * CONNECTIONS
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNECTIONS)]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if wrap is not None:
        socks = [wrap(s) for s in socks]
    started = time.monotonic()
    stop_at = started + seconds

    def run(i: int) -> None:
        totals[i] = work(i, socks[i], stop_at)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    for s in socks:
        s.close()
    return sum(totals), elapsed


def produce_work(frames: list[bytes], expect_responses: bool, in_flight: int = 4):
    def work(i: int, sock: socket.socket, stop_at: float) -> int:
        frame = frames[i % len(frames)]
        scratch = memoryview(bytearray(1 << 16))
        sent = outstanding = 0
        while time.monotonic() < stop_at:
            sock.sendall(frame)
            sent += len(frame)
            if expect_responses:
                outstanding += 1
                if outstanding >= in_flight:
                    recv_frame(sock, scratch)
                    outstanding -= 1
        for _ in range(outstanding):
            recv_frame(sock, scratch)
        return sent
    return work


def _sink_server(listener: socket.socket) -> None:
    """Accepts connections and discards everything (the produce baseline's peer)."""
    def drain(conn: socket.socket) -> None:
        scratch = memoryview(bytearray(1 << 20))
        while conn.recv_into(scratch):
            pass
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def _source_server(listener: socket.socket) -> None:
    """Answers each 4-byte request with a 1 MiB frame from memory (fetch baseline)."""
    payload = struct.pack(">i", BATCH_BYTES * 4) + os.urandom(BATCH_BYTES * 4)

    def serve(conn: socket.socket) -> None:
        scratch = bytearray(4)
        try:
            while conn.recv_into(scratch) == 4:
                conn.sendall(payload)
        except OSError:
            pass
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def measure_produce(broker: Broker, seconds: float) -> dict:
    # The ceiling first: its files are gone when it ends (nothing left to write back),
    # while the broker's log stays dirty in the page cache long after its run.
    ceiling = limits.ingest_gbps(seconds, os.path.dirname(broker.data_dir))
    batch = one_mib_batch()
    broker.create_topic("ingest", CONNECTIONS)
    frames = [produce_frame("ingest", p, batch) for p in range(CONNECTIONS)]
    cpu0, wait0 = broker.cpu_seconds(), broker.cpu_wait_seconds()
    moved, elapsed = _run_connections(broker.port, seconds, produce_work(frames, True))
    broker_cpu = broker.cpu_seconds() - cpu0
    broker_wait = broker.cpu_wait_seconds() - wait0
    sink, port = start_process_server(_sink_server)
    try:
        base, base_elapsed = _run_connections(port, seconds, produce_work(frames, False))
    finally:
        sink.kill()
    return {"broker_mb_s": moved / elapsed / 1e6, "loopback_mb_s": base / base_elapsed / 1e6,
            "ceiling_mb_s": ceiling * 1e3,
            "broker_cpu_s_per_gb": broker_cpu / (moved / 1e9),
            "broker_cpu_wait_fraction": broker_wait / elapsed}


def fetch_work(topic: str, log_end: int, fetch_bytes: int, batch_bytes: int):
    def work(i: int, sock: socket.socket, stop_at: float) -> int:
        scratch = memoryview(bytearray(1 << 20))
        received, offset = 0, 0
        while time.monotonic() < stop_at:
            sock.sendall(fetch_frame(topic, i, offset, fetch_bytes))
            size = recv_frame(sock, scratch)
            received += size
            # A response is whole batches of batch_bytes (each the same number of
            # records) after a header far smaller than one: step past those received.
            offset += records_per_batch * max(1, size // batch_bytes)
            if offset >= log_end:
                offset = 0
        return received
    records_per_batch = BATCH_BYTES // (RECORD_BYTES + 16)
    return work


def baseline_fetch_work(i: int, sock: socket.socket, stop_at: float) -> int:
    scratch = memoryview(bytearray(1 << 20))
    received = 0
    while time.monotonic() < stop_at:
        sock.sendall(b"\0\0\0\0")
        received += recv_frame(sock, scratch)
    return received


def measure_fetch(broker: Broker, seconds: float, batches_per_partition: int = 64,
                  create_topic: bool = False) -> dict:
    # Fill each partition with 64 MiB (in page cache), then read it round and round.
    batch = one_mib_batch()
    if create_topic:
        broker.create_topic("ingest", CONNECTIONS)
    frames = [produce_frame("ingest", p, batch) for p in range(CONNECTIONS)]
    with socket.create_connection(("127.0.0.1", broker.port)) as sock:
        scratch = memoryview(bytearray(1 << 16))
        for _ in range(batches_per_partition):
            for frame in frames:
                sock.sendall(frame)
                recv_frame(sock, scratch)
    log_end = batches_per_partition * (BATCH_BYTES // (RECORD_BYTES + 16))
    cpu0, wait0 = broker.cpu_seconds(), broker.cpu_wait_seconds()
    moved, elapsed = _run_connections(broker.port, seconds,
                                      fetch_work("ingest", log_end, 4 * BATCH_BYTES,
                                                 len(batch)))
    broker_cpu = broker.cpu_seconds() - cpu0
    broker_wait = broker.cpu_wait_seconds() - wait0
    source, port = start_process_server(_source_server)
    try:
        base, base_elapsed = _run_connections(port, seconds, baseline_fetch_work)
    finally:
        source.kill()
    ceiling = limits.sendfile_connections_gbps(seconds, os.path.dirname(broker.data_dir))
    return {"broker_mb_s": moved / elapsed / 1e6, "loopback_mb_s": base / base_elapsed / 1e6,
            "ceiling_mb_s": ceiling * 1e3,
            "broker_cpu_s_per_gb": broker_cpu / (moved / 1e9),
            "broker_cpu_wait_fraction": broker_wait / elapsed}


def _echo_server(listener: socket.socket) -> None:
    import asyncio

    import uvloop

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    async def main():
        server = await asyncio.get_running_loop().create_server(Echo, sock=listener)
        await server.serve_forever()

    uvloop.run(main())


def round_trips(port: int, frame: bytes, count: int, response_frames: bool) -> list[float]:
    samples = []
    scratch = memoryview(bytearray(1 << 16))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            t0 = time.perf_counter_ns()
            sock.sendall(frame)
            if response_frames:
                recv_only_frame(sock, scratch)
            else:
                recv_exact(sock, len(frame), scratch)
            samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


def measure_latency(broker: Broker, count: int = 20000) -> dict:
    """Idle and busy CPUs: on this VM an idle vCPU halts and waking it costs tens of
    microseconds (the echo's p50 goes from ~8 to ~80 us), which would hide the broker's
    own time; so the figures are also taken with a lowest-priority spinner on every CPU,
    which keeps the vCPUs awake and yields to the broker and the echo at once."""
    broker.create_topic("latency", 1)
    frame = produce_frame("latency", 0, encode_batch([b"x" * 100]))
    echo, port = start_process_server(_echo_server)
    result = {}
    try:
        wait_port(port)
        for state in ("idle", "busy"):
            spinners = _spinners() if state == "busy" else []
            try:
                broker_us = round_trips(broker.port, frame, count, True)
                echo_us = round_trips(port, frame, count, False)
            finally:
                for spinner in spinners:
                    spinner.kill()
                    spinner.wait()
            prefix = "" if state == "idle" else "busy_"
            result.update({f"{prefix}broker_p50_us": statistics.median(broker_us),
                           f"{prefix}broker_p99_us": statistics.quantiles(broker_us, n=100)[98],
                           f"{prefix}echo_p50_us": statistics.median(echo_us)})
    finally:
        echo.kill()
    return result


def _spinners() -> list[subprocess.Popen]:
    spin = [sys.executable, "-c", "while True: pass"]
    procs = [subprocess.Popen(["nice", "-n", "19", *spin]) for _ in range(os.cpu_count() or 1)]
    time.sleep(0.2)
    return procs


def measure_start(runs: int = 5) -> dict:
    starts, rss = [], []
    for _ in range(runs):
        broker = Broker()
        time.sleep(1.0)
        starts.append(broker.start_seconds)
        rss.append(broker.rss_bytes())
        broker.stop()
    return {"start_s": statistics.median(starts), "idle_rss_mb": statistics.median(rss) / 2**20}


def machine() -> dict:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "python": platform.python_version(), "loadavg_1m": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    global BATCH_BYTES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", default=None, help="directory for result.json/result.md")
    parser.add_argument("--only", default=",".join(FIGURES),
                        help=f"comma-separated figures to run, of {', '.join(FIGURES)}")
    parser.add_argument("--threads", type=int, default=None,
                        help="the broker's num.network.threads (default: its own default)")
    parser.add_argument("--batch-kib", type=int, default=BATCH_BYTES >> 10,
                        help="produce batch size; fetches ask for 4 of them")
    args = parser.parse_args(argv)
    BATCH_BYTES = args.batch_kib << 10
    only = set(args.only.split(","))
    if not only <= set(FIGURES):
        parser.error(f"--only: unknown figures {sorted(only - set(FIGURES))}")
    settings = {} if args.threads is None else {"num.network.threads": args.threads}
    result = {"command": " ".join(["python3 -m bench.single_node", *(argv or sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": machine()}
    if args.threads is not None:
        result["num_network_threads"] = args.threads
    result["batch_bytes"] = BATCH_BYTES
    if "start" in only:
        result["start"] = measure_start()
    broker = Broker(settings)
    try:
        if "produce" in only:
            result["produce"] = measure_produce(broker, args.seconds)
            # Gigabytes of the produce run's log are still dirty: written back now, that
            # work is not charged to the next figures (writers over vm.dirty_ratio are
            # throttled, a one-record produce included).
            os.sync()
        if "fetch" in only:
            # The fetch figure reads what the produce run wrote: write it if it did not run.
            result["fetch"] = measure_fetch(broker, args.seconds,
                                            create_topic="produce" not in only)
        if "latency" in only:
            result["latency"] = measure_latency(broker)
    finally:
        broker.stop()
    lines = ["| figure | pybroker | baseline | ratio | target |", "|---|---|---|---|---|"]
    for name, value, base, ratio, target in _rows(result):
        lines.append(f"| {name} | {value} | {base} | "
                     f"{'' if ratio is None else f'{ratio:.2f}'} | {target} |")
    waits = [f"{result[k]['broker_cpu_wait_fraction']:.2f} s per second of the {k} run"
             for k in ("produce", "fetch") if k in result]
    if waits:
        lines.append("")
        lines.append(f"The broker's threads waited for a CPU {' and '.join(waits)} (load "
                     f"average {result['machine']['loadavg_1m']:.1f} on "
                     f"{result['machine']['cpus']} CPUs at the start).")
    table = "\n".join(lines)
    result["table"] = table
    print(json.dumps({k: v for k, v in result.items() if k != "table"}, indent=2))
    print(table)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "result.json"), "w") as fh:
            json.dump(result, fh, indent=2)
        with open(os.path.join(args.out, "result.md"), "w") as fh:
            fh.write(table + "\n")
    return 0


# figure, row name, broker value, baseline value, value format, target
_RATIO_ROWS = [
    ("produce", "produce 1 MiB batches, 4 conns", "broker_mb_s", "loopback_mb_s",
     "{:.0f} MB/s", ">= 0.50"),
    ("produce", "produce vs receive-and-write ceiling", "broker_mb_s", "ceiling_mb_s",
     "{:.0f} MB/s", ""),
    ("fetch", "fetch from page cache, 4 conns", "broker_mb_s", "loopback_mb_s",
     "{:.0f} MB/s", ">= 0.70"),
    ("fetch", "fetch vs 4-thread sendfile ceiling", "broker_mb_s", "ceiling_mb_s",
     "{:.0f} MB/s", ""),
    ("latency", "1-record produce acks=1, p50, idle CPUs", "broker_p50_us", "echo_p50_us",
     "{:.1f} us", "<= 2.0"),
    ("latency", "1-record produce acks=1, p50, busy CPUs", "busy_broker_p50_us",
     "busy_echo_p50_us", "{:.1f} us", "<= 2.0"),
]


def _rows(result: dict) -> list[tuple[str, str, str, float | None, str]]:
    rows: list[tuple[str, str, str, float | None, str]] = []
    for figure, name, ours, theirs, fmt, target in _RATIO_ROWS:
        if figure in result:
            r = result[figure]
            rows.append((name, fmt.format(r[ours]), fmt.format(r[theirs]),
                         r[ours] / r[theirs], target))
    if "start" in result:
        st = result["start"]
        rows.append(("start to ready (empty dir)", f"{st['start_s']:.3f} s", "", None,
                     "< 0.5 s"))
        rows.append(("idle resident memory", f"{st['idle_rss_mb']:.1f} MB", "", None,
                     "< 80 MB"))
    return rows


if __name__ == "__main__":
    sys.exit(main())
