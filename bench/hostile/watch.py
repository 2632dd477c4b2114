"""The broker as the host sees it: memory, CPU, descriptors, sockets and its log.

A thread samples VmRSS (``bench.driver.procstat.BrokerProbe``) and open descriptors
(/proc/PID/fd) every ``PERIOD`` seconds for the whole session, so the peak of any window
can be read back afterwards, even after the broker died. The rest is read when asked: CPU
seconds, descriptors, the descriptor limit
(/proc/PID/limits), sockets in CLOSE_WAIT on the broker's port from given client ports
(/proc/net/tcp and tcp6: connections the client closed and the broker has not), and the
size and new text of its log file. Everything is by pid (and port), so the broker may be
any program on this host.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from bench.driver.procstat import CLOCK_TICKS, BrokerProbe

PERIOD = 0.1
TCP_CLOSE_WAIT = "08"  # include/net/tcp_states.h


class BrokerWatch:
    """Thread-safe for one writer (the sampling thread) and readers of whole samples."""

    def __init__(self, pid: int, port: int, log_path: str | None = None) -> None:
        self.probe = BrokerProbe(pid)
        self.pid = pid
        self.port = port
        self.log_path = log_path
        self.samples: list[tuple[int, int, int]] = []  # (monotonic ns, VmRSS kB, fds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="broker-watch", daemon=True)

    def start(self) -> BrokerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(PERIOD):
            if not self.alive():
                continue
            try:
                rss = self.probe.memory_kb().get("VmRSS", 0)
            except OSError:  # it ended since
                continue
            self.samples.append((time.monotonic_ns(), rss, self.fd_count() or 0))

    def alive(self) -> bool:
        """Running (a zombie, an unreaped child that ended, is not)."""
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("State:"):
                        return line.split()[1] not in ("Z", "X")
        except OSError:
            pass
        return False

    def peak(self, t0_ns: int, t1_ns: int) -> dict[str, int | None]:
        """The largest VmRSS (kB) and descriptor count sampled in [t0, t1]."""
        inside = [(rss, fds) for t, rss, fds in self.samples if t0_ns <= t <= t1_ns]
        return {"rss_kb": max((r for r, _ in inside), default=None),
                "fds": max((f for _, f in inside), default=None)}

    def snapshot(self) -> dict[str, Any]:
        """Resident set (kB), CPU seconds so far, open descriptors and log size, now."""
        try:
            alive = {"rss_kb": self.probe.memory_kb().get("VmRSS"),
                     "cpu_s": self.probe.cpu_ticks() / CLOCK_TICKS, "fds": self.fd_count()}
        except OSError:
            alive = {"rss_kb": None, "cpu_s": None, "fds": None}
        return {**alive, "log_bytes": self.log_size()}

    def fd_count(self) -> int | None:
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None

    def fd_limit(self) -> int | None:
        """The broker's soft RLIMIT_NOFILE."""
        try:
            with open(f"/proc/{self.pid}/limits") as f:
                for line in f:
                    if line.startswith("Max open files"):
                        return int(line.split()[3])
        except (OSError, ValueError):
            pass
        return None

    def close_wait(self, peer_ports: set[int]) -> int:
        """Connections from these client ports that the client closed and the broker holds."""
        count = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    next(f)
                    for line in f:
                        _, local, remote, state = line.split()[:4]
                        count += (state == TCP_CLOSE_WAIT and _port(local) == self.port
                                  and _port(remote) in peer_ports)
            except OSError:
                pass
        return count

    def log_size(self) -> int | None:
        if self.log_path is None:
            return None
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return None

    def log_since(self, offset: int) -> str:
        """The log's text from byte ``offset`` (all of it if the file was rolled since)."""
        if self.log_path is None:
            return ""
        with open(self.log_path, "rb") as f:
            if os.fstat(f.fileno()).st_size < offset:
                offset = 0
            f.seek(offset)
            return f.read().decode(errors="replace")


def _port(address: str) -> int:
    """The port of a /proc/net/tcp address (hex "0100007F:1F90")."""
    return int(address.rsplit(":", 1)[1], 16)
