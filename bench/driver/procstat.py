"""The broker's CPU time and memory, read from /proc/PID while a run goes on.

CPU: utime + stime of /proc/PID/stat (fields 14 and 15, clock ticks of all the process's
threads; child processes are not included). Memory: VmHWM (the kernel's peak resident set
since the process started) and the largest VmRSS sampled during the run. The host's
busy share: all CPUs' ticks from /proc/stat, any process.
"""

from __future__ import annotations

import os
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def host_cpu_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all cpus since boot, from the first line of /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


class BrokerProbe:
    def __init__(self, pid: int):
        self.pid = pid
        if not os.path.exists(f"/proc/{pid}/stat"):
            raise ProcessLookupError(f"--broker-pid {pid}: no such process on this host")
        self.samples: list[tuple[float, int]] = []  # (monotonic time, cpu ticks)
        self.max_rss_kb = 0
        self.alive = True

    def cpu_ticks(self) -> int:
        with open(f"/proc/{self.pid}/stat") as f:
            stat = f.read()
        # The command name (field 2) may hold spaces and parentheses: split after it.
        fields = stat[stat.rindex(")") + 2:].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)

    def memory_kb(self) -> dict[str, int]:
        out = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
        return out

    def sample(self) -> int | None:
        """Record (now, cpu ticks) and the resident set; None once the broker is gone."""
        if not self.alive:
            return None
        try:
            ticks = self.cpu_ticks()
            rss = self.memory_kb().get("VmRSS", 0)
        except (FileNotFoundError, ProcessLookupError):
            self.alive = False
            return None
        self.samples.append((time.monotonic(), ticks))
        self.max_rss_kb = max(self.max_rss_kb, rss)
        return ticks

    def cpu_seconds(self, start: float, end: float) -> float | None:
        """CPU seconds between the samples nearest to two monotonic times."""
        if not self.samples:
            return None
        first = min(self.samples, key=lambda s: abs(s[0] - start))
        last = min(self.samples, key=lambda s: abs(s[0] - end))
        return (last[1] - first[1]) / CLOCK_TICKS

    def cpu_series(self, t_base: float, step: float = 1.0) -> list[list[float]]:
        """[seconds since t_base, CPU in cores] over windows of about ``step`` seconds.

        Samples come every ~0.1 s but ticks are 10 ms, so shorter windows are mostly noise.
        """
        out: list[list[float]] = []
        if not self.samples:
            return out
        t0, c0 = self.samples[0]
        for t1, c1 in self.samples[1:]:
            if t1 - t0 >= step:
                out.append([round(t1 - t_base, 2), round((c1 - c0) / CLOCK_TICKS / (t1 - t0), 3)])
                t0, c0 = t1, c1
        return out

    def peak_kb(self) -> dict[str, int | None]:
        try:
            hwm = self.memory_kb().get("VmHWM")
        except (FileNotFoundError, ProcessLookupError):
            hwm = None
        return {"vm_hwm_kb": hwm, "max_sampled_rss_kb": self.max_rss_kb or None}
