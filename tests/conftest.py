"""Shared fixtures: real broker processes on free loopback ports.

``broker`` (one per test) and ``module_broker`` (one per test module, for suites whose
tests do not disturb each other) start ``python3 -m pybroker serve`` with a temporary data
dir, wait for its ``ready`` line, and stop it with SIGTERM afterwards, failing the test if
it did not exit 0. ``broker_factory(**settings)`` starts more, with broker settings
(Kafka key names; dots may be written as underscores), e.g.
``broker_factory(num_partitions=3, auto_create_topics_enable=False)``; ``nofile=N`` starts
it with that RLIMIT_NOFILE.

A started broker exposes ``.bootstrap`` ("127.0.0.1:PORT"), ``.port``, ``.pid``,
``.data_dir``, ``.log_text()``, ``.stats()`` (the zero-copy/request counters, fresh),
``.stop(sig=SIGTERM) -> exit code`` and ``.restart(sig=SIGTERM)`` (same port and data).
The native extensions must be built (``pip install -e .`` or ``make build``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY = re.compile(r"ready: listening on (\S+):(\d+)")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
# Test brokers answer a new group's first member at once, so a test's group forms without
# Kafka's 3 s gathering wait; a test of that wait passes None to keep the broker's default.
TEST_SETTINGS = {"group.initial.rebalance.delay.ms": 0}


def _require_native() -> None:
    """Fail fast with a clear message instead of a broker that dies on import."""
    try:
        for module in ("records", "wire", "zerocopy"):
            importlib.import_module(f"pybroker._native.{module}")
    except ImportError as exc:
        pytest.fail(f"native extensions are not built ({exc}): run `pip install -e .` "
                    "or `make build` first", pytrace=False)


class BrokerProcess:
    # Called with the bootstrap address of every broker that stops, for helpers that keep
    # a client per broker (tests/admin/clients.py).
    stop_listeners: list[Callable[[str], None]] = []

    def __init__(self, data_dir: str, settings: dict[str, Any] | None = None,
                 log_path: str | None = None, extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None, nofile: int | None = None) -> None:
        self.data_dir = data_dir
        given = {k.replace("_", "."): v for k, v in (settings or {}).items()}
        self.settings = {k: v for k, v in {**TEST_SETTINGS, **given}.items() if v is not None}
        self.log_path = log_path or os.path.join(data_dir, "..", "broker.log")
        self.extra_args = extra_args or []
        self.env = env or {}
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) of the broker process
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> BrokerProcess:
        cmd = [sys.executable, "-m", "pybroker", "serve", "--data-dir", self.data_dir,
               "--listen", f"127.0.0.1:{self.port}"]
        for key, value in self.settings.items():
            value = str(value).lower() if isinstance(value, bool) else value
            cmd += ["--set", f"{key}={value}"]
        cmd += self.extra_args
        with open(self.log_path, "ab") as log:
            log.write(f"--- {' '.join(cmd)}\n".encode())
            offset = log.tell()
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   **self.env)
        nofile = self.nofile

        def limit_files() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path, "ab"), env=env, cwd=ROOT,
                                     preexec_fn=limit_files)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                match = READY.search(log.read().decode(errors="replace"))
            if match:
                self.port = int(match.group(2))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()[-4000:]}")
            time.sleep(0.02)
        self.proc.kill()
        raise RuntimeError(f"broker not ready in {START_TIMEOUT}s:\n{self.log_text()[-4000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Send ``sig`` and wait for the exit; returns the exit code (None if not running)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            code = self.proc.returncode
        else:
            self.proc.send_signal(sig)
            try:
                code = self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
        self.proc = None
        for listener in self.stop_listeners:
            listener(self.bootstrap)
        return code

    def restart(self, sig: int = signal.SIGTERM) -> BrokerProcess:
        code = self.stop(sig)
        if sig == signal.SIGTERM and code != 0:
            raise RuntimeError(f"broker exited with {code} on SIGTERM:\n{self.log_text()[-4000:]}")
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        with open(self.log_path, "rb") as log:
            return log.read().decode(errors="replace")

    def stats(self, timeout: float = 30.0) -> dict[str, Any]:
        """Counters written by the broker on SIGUSR1 (zero-copy bytes, requests, ...)."""
        path = os.path.join(self.data_dir, "broker-stats.json")
        before = _read_stats(path).get("seq", -1)
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stats = _read_stats(path)
            if stats.get("seq", -1) > before:
                return stats
            time.sleep(0.01)
        raise RuntimeError("broker did not write its stats")


def _read_stats(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


@pytest.fixture(scope="session")
def _broker_root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="pybroker-test-") as root:
        yield root


def _factory(root: str) -> tuple[Callable[..., BrokerProcess], list[BrokerProcess]]:
    started: list[BrokerProcess] = []

    def make(*, nofile: int | None = None, **settings: Any) -> BrokerProcess:
        _require_native()
        base = tempfile.mkdtemp(dir=root)
        broker = BrokerProcess(os.path.join(base, "data"), settings,
                               os.path.join(base, "broker.log"), nofile=nofile)
        started.append(broker)
        return broker.start()

    return make, started


def _stop_all(started: list[BrokerProcess]) -> None:
    failures = []
    for broker in started:
        if broker.alive():
            code = broker.stop()
            if code != 0:
                failures.append(f"broker on {broker.bootstrap} exited {code} on SIGTERM:\n"
                                f"{broker.log_text()[-3000:]}")
    if failures:
        pytest.fail("\n".join(failures))


@pytest.fixture
def broker_factory(_broker_root: str) -> Iterator[Callable[..., BrokerProcess]]:
    make, started = _factory(_broker_root)
    yield make
    _stop_all(started)


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker_factory(_broker_root: str) -> Iterator[Callable[..., BrokerProcess]]:
    make, started = _factory(_broker_root)
    yield make
    _stop_all(started)


@pytest.fixture(scope="module")
def module_broker(module_broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return module_broker_factory()
