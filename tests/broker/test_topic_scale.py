"""Creating and deleting many topics, or one very large one, in one request never stalls
the broker: another client is answered while the big request is still pending. Each
check is an ordering, never a timing: the bystander's answer comes between two states
that only exist while the big request is being worked on (some of the new topics have
their logs and some not; some of the deleted logs' descriptors are closed and some not).

Deleted data is freed at once: no descriptor or mapping of a deleted partition's files is
left once DeleteTopics is answered, and its directory goes ``file.delete.delay.ms`` later
without any retention run. A crash right after a deletion does not bring the topic back.
Real broker processes, raw protocol clients."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, produce_body

PRODUCE, METADATA, CREATE_TOPICS, DELETE_TOPICS = 0, 3, 19, 20
MISSING = -1


class Pending:
    """A request sent on a connection of its own, its answer read by a thread."""

    def __init__(self, bootstrap: str, api_key: int, version: int, body: dict) -> None:
        self._client = WireClient(bootstrap, timeout=300)
        self._client.send(api_key, version, body)
        self._answer: dict | None = None
        self._thread = threading.Thread(
            target=lambda: setattr(self, "_answer", self._client.receive(api_key, version)))
        self._thread.start()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def answer(self) -> dict:
        self._thread.join()
        self._client.close()
        assert self._answer is not None
        return self._answer


def create_body(names: list[str], partitions: int = 1) -> dict:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                        "assignments": [], "configs": []} for name in names],
            "timeout_ms": 60000, "validate_only": False}


def metadata_body(names: list[str], auto_create: bool = False) -> dict:
    return {"topics": [{"name": name} for name in names],
            "allow_auto_topic_creation": auto_create}


def partition_counts(client: WireClient, names: list[str]) -> list[int]:
    """Partitions each topic has (MISSING: unknown)."""
    answer = client.request(METADATA, 12, metadata_body(names))
    return [MISSING if t["error_code"] else len(t["partitions"]) for t in answer["topics"]]


def produce_one(client: WireClient, topic: str) -> None:
    answer = client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch([b"canary"])))
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE


def open_fds(broker: Any) -> int:
    return len(os.listdir(f"/proc/{broker.pid}/fd"))


def files_held(broker: Any, names: list[str]) -> list[str]:
    """Files in the partition directories of topics ``names`` the broker holds open or
    mapped. A partition directory itself is not counted: the deleter thread holds one
    open while it removes it, which can be before a large deletion is answered."""
    prefixes = tuple(os.path.join(os.path.realpath(broker.data_dir), f"{name}-")
                     for name in names)
    held = []
    for fd in os.listdir(f"/proc/{broker.pid}/fd"):
        try:
            held.append(os.readlink(f"/proc/{broker.pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    with open(f"/proc/{broker.pid}/maps") as maps:
        held += [line.split(None, 5)[-1].strip() for line in maps]
    return [path for path in held if os.path.dirname(path).startswith(prefixes)]


def topic_dirs(broker: Any, name: str) -> list[str]:
    """The directories of topic ``name``'s partitions, live or renamed for deletion."""
    return [d for d in os.listdir(broker.data_dir)
            if d.rpartition(".")[0].rpartition("-")[0] == name or d.rpartition("-")[0] == name]


def test_2000_topics_created_and_deleted_in_one_request_each(broker: Any) -> None:
    names = [f"{unique('many')}-{i}" for i in range(2000)]
    canary = unique("canary")
    with WireClient(broker.bootstrap) as client:
        client.request(CREATE_TOPICS, 7, create_body([canary]))
        creating = Pending(broker.bootstrap, CREATE_TOPICS, 7, create_body(names))
        served_meanwhile = 0
        while not creating.done:
            produce_one(client, canary)
            first, last = partition_counts(client, [names[0], names[-1]])
            if first == 1 and last == 0:  # all recorded at once, logs being created
                served_meanwhile += 1
        created = creating.answer()["topics"]
        assert [(t["name"], t["error_code"], t["num_partitions"]) for t in created] == [
            (name, ErrorCode.NONE, 1) for name in names]
        assert served_meanwhile > 0
        assert partition_counts(client, names) == [1] * len(names)

        before = open_fds(broker)  # one log descriptor per partition
        deleting = Pending(broker.bootstrap, DELETE_TOPICS, 5,
                           {"topic_names": names, "timeout_ms": 60000})
        served_meanwhile = _served_while_closing(broker, client, canary, deleting,
                                                 before, len(names))
        deleted = deleting.answer()["responses"]
        assert [(t["name"], t["error_code"]) for t in deleted] == [
            (name, ErrorCode.NONE) for name in names]
        assert served_meanwhile > 0
        assert partition_counts(client, names) == [MISSING] * len(names)
        assert files_held(broker, names) == []


def _served_while_closing(broker: Any, client: WireClient, canary: str, deleting: Pending,
                          before: int, logs: int) -> int:
    """How often ``client`` was answered between two looks at the broker's descriptors
    that both found the deleted logs' descriptors partly closed: only while ``deleting``
    is being worked on (it is answered once all are closed)."""
    def partly_closed() -> bool:  # (``deleting``'s own connection counts one more)
        return before + 1 - logs + 10 < open_fds(broker) < before - 1

    served = 0
    while not deleting.done:
        if partly_closed():
            produce_one(client, canary)
            if partly_closed():
                served += 1
    return served


def test_a_metadata_request_auto_creating_1000_topics(broker: Any) -> None:
    names = [f"{unique('auto')}-{i}" for i in range(1000)]
    canary = unique("canary")
    with WireClient(broker.bootstrap) as client:
        client.request(CREATE_TOPICS, 7, create_body([canary]))
        creating = Pending(broker.bootstrap, METADATA, 12, metadata_body(names, True))
        served_meanwhile = 0
        while not creating.done:
            produce_one(client, canary)
            first, last = partition_counts(client, [names[0], names[-1]])
            if first == 1 and last == 0:
                served_meanwhile += 1
        topics = creating.answer()["topics"]
        assert [(t["name"], t["error_code"], len(t["partitions"])) for t in topics] == [
            (name, ErrorCode.NONE, 1) for name in names]
        assert served_meanwhile > 0


def test_a_5000_partition_topic_deleted_while_others_are_served(broker_factory: Any) -> None:
    broker = broker_factory(log_segment_delete_delay_ms=500,
                            log_retention_check_interval_ms=3_600_000)
    big, canary = unique("huge"), unique("canary")
    with WireClient(broker.bootstrap) as client:
        client.request(CREATE_TOPICS, 7, create_body([canary]))
        assert client.request(CREATE_TOPICS, 7, create_body([big], 5000))["topics"][0][
            "error_code"] == ErrorCode.NONE
        produce_one(client, big)
        before = open_fds(broker)
        deleting = Pending(broker.bootstrap, DELETE_TOPICS, 5,
                           {"topic_names": [big], "timeout_ms": 60000})
        served_meanwhile = _served_while_closing(broker, client, canary, deleting, before,
                                                 5000)
        assert deleting.answer()["responses"][0]["error_code"] == ErrorCode.NONE
        assert served_meanwhile > 0
        # freed at once: nothing of the deleted files is open or mapped
        assert files_held(broker, [big]) == []
        assert partition_counts(client, [big]) == [MISSING]
        # the directories go after file.delete.delay.ms, no retention run needed
        deadline = time.monotonic() + 60
        while topic_dirs(broker, big) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert topic_dirs(broker, big) == []


def test_a_crash_right_after_a_deletion_does_not_bring_the_topic_back(
        broker_factory: Any) -> None:
    broker = broker_factory(log_segment_delete_delay_ms=2000)
    name = unique("gone")
    with WireClient(broker.bootstrap) as client:
        client.request(CREATE_TOPICS, 7, create_body([name], 200))
        produce_one(client, name)
        answer = client.request(DELETE_TOPICS, 5, {"topic_names": [name], "timeout_ms": 60000})
        assert answer["responses"][0]["error_code"] == ErrorCode.NONE
    broker.stop(signal.SIGKILL)
    # as if none of the renames had reached the disk before the crash
    for renamed in topic_dirs(broker, name):
        if renamed.endswith("-delete"):
            os.rename(os.path.join(broker.data_dir, renamed),
                      os.path.join(broker.data_dir, renamed.rpartition(".")[0]))
    assert len(topic_dirs(broker, name)) == 200
    broker.start()
    with WireClient(broker.bootstrap) as client:
        assert partition_counts(client, [name]) == [MISSING]
    deadline = time.monotonic() + 60
    while topic_dirs(broker, name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert topic_dirs(broker, name) == []
    assert "adopting" not in broker.log_text()
    assert f"deleting the log of {name}-0: its topic was deleted" in broker.log_text()
