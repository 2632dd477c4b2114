"""Shared pieces of the consumer group tests: topics, producing, consumer processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.client.connection import BrokerConnection
from pybroker.net.protocol import codec

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WAIT = 60.0  # generous: the box is shared; tests never assert on timing


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=WAIT)


def produce(bootstrap: str, topic: str, values: list[str],
            partition: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        if partition is None:
            producer.produce(topic, key=str(i).encode(), value=value.encode())
        else:
            producer.produce(topic, value=value.encode(), partition=partition)
        producer.poll(0)
    assert producer.flush(WAIT) == 0


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


class ConsumerProcess:
    """``consumer_proc.py`` in a subprocess; its events collected by a reader thread."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], log_dir: str,
                 name: str, **conf: Any) -> None:
        self.name = name
        cfg = {"bootstrap": bootstrap, "group": group, "topics": topics,
               "conf": {k.replace("_", "."): v for k, v in conf.items()}}
        env = dict(os.environ, PYTHONPATH=ROOT)
        self._stderr = open(os.path.join(log_dir, f"{name}.log"), "ab")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "consumer_proc.py"),
                                      json.dumps(cfg)], stdout=subprocess.PIPE,
                                     stderr=self._stderr, env=env)
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self._lock:
                self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def assignment(self) -> set[tuple[str, int]]:
        """Current partitions, replayed from the assign/revoke events."""
        owned: set[tuple[str, int]] = set()
        for e in self.snapshot():
            parts = {(t, p) for t, p in e.get("partitions", [])}
            if e["event"] == "assign":
                owned = owned | parts if e["incremental"] else parts
            elif e["event"] == "revoke":
                owned = owned - parts if e["incremental"] else set()
        return owned

    def messages(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["event"] == "msg"]

    def count(self, event: str) -> int:
        return sum(1 for e in self.snapshot() if e["event"] == event)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(WAIT)
        self._reader.join(WAIT)
        self._stderr.close()

    def alive(self) -> bool:
        return self.proc.poll() is None


class Consumers:
    """Consumer processes of one test, all stopped at the end."""

    def __init__(self, bootstrap: str, log_dir: str) -> None:
        self.bootstrap = bootstrap
        self.log_dir = log_dir
        self.started: list[ConsumerProcess] = []

    def start(self, group: str, topics: list[str], **conf: Any) -> ConsumerProcess:
        consumer = ConsumerProcess(self.bootstrap, group, topics, self.log_dir,
                                   f"consumer-{len(self.started)}", **conf)
        self.started.append(consumer)
        return consumer

    def stop_all(self) -> None:
        for consumer in self.started:
            if consumer.alive():
                consumer.kill(signal.SIGTERM)


class WireConnection(BrokerConnection):
    """The project's connection for exact requests in tests: a request names the fields
    the test is about, the rest take the spec's defaults (the library's own requests
    state every field)."""

    def send(self, api_key: int, api_version: int, body: dict,
             expect_response: bool = True) -> int:
        return super().send(api_key, api_version,
                            codec.with_defaults(api_key, api_version, body), expect_response)
