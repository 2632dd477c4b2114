"""pybroker of this checkout as a child process, for benchmarks that start their own.

The broker's log (its stderr) goes to ``<workdir>/broker.log``; its address is read from
the log's ``ready`` line, so it listens on a free loopback port. ``fd_limit`` starts it as
after ``ulimit -n``.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from types import TracebackType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READY = re.compile(r"ready: listening on (\S+):(\d+)")


def fd_limit_setter(nofile: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving the child ``ulimit -n nofile``: soft and hard, as a shell
    does (a JVM raises its soft limit to the hard one when it starts)."""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return apply


class LocalBroker:
    """``python3 -m pybroker serve`` on a free loopback port with a temporary data dir;
    ``settings`` are passed as ``--set key=value``."""

    def __init__(self, workdir: str, settings: Mapping[str, object] | None = None) -> None:
        self.data_dir = os.path.join(workdir, "data")
        self.settings = dict(settings or {})
        self.log_path = os.path.join(workdir, "broker.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.bootstrap = ""

    def start(self, timeout: float = 60.0, fd_limit: int | None = None) -> LocalBroker:
        env = dict(os.environ,
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pybroker", "serve", "--data-dir", self.data_dir,
                 "--listen", "127.0.0.1:0",
                 *(arg for k, v in self.settings.items() for arg in ("--set", f"{k}={v}"))],
                stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=ROOT,
                preexec_fn=fd_limit_setter(fd_limit) if fd_limit else None)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = READY.search(self.log_text())
            if match:
                self.bootstrap = f"{match.group(1)}:{match.group(2)}"
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"broker did not start:\n{self.log_text()[-3000:]}")

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stops the broker; a run that went well fails if the broker did not exit 0 (a
        clean shutdown is part of what a benchmark run checks)."""
        code = self.stop()
        if exc_type is None and code != 0:
            raise RuntimeError(f"broker exited {code}:\n{self.log_text()[-3000:]}")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code, self.proc = self.proc.returncode, None
        return code

    def log_text(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")
