"""What the CLI (``pybroker group``) and the web console (``pybroker.console``) ask a
Kafka cluster through confluent-kafka's ``AdminClient``: committed offsets, watermarks,
a group's lag per partition and an offset reset's plan. Neither prints: the callers
render the results, a terminal table or an HTML page, and say what failed their own way.

Any Kafka-protocol cluster will do; nothing here knows pybroker's internals. Calls block
up to ``timeout`` seconds per request, so they run on the caller's thread (the CLI's
main thread, one of the console's HTTP threads), never on a broker's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Partition = tuple[str, int]


def error_text(error: Any) -> str:
    """A confluent-kafka ``KafkaError``, or an exception carrying one, as NAME: text."""
    err = _kafka_error(error)
    if hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(err)


def error_name(error: Any) -> str | None:
    """The error name (``ELECTION_NOT_NEEDED``) of a confluent-kafka ``KafkaError``, or
    of an exception carrying one; None for anything else."""
    err = _kafka_error(error)
    return err.name() if hasattr(err, "name") else None


def _kafka_error(error: Any) -> Any:
    return error.args[0] if isinstance(error, Exception) and error.args else error


def state_name(state: Any) -> str:
    """A ``ConsumerGroupState`` as Kafka's tools spell it (``PreparingRebalance``)."""
    names = {"PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance"}
    name = getattr(state, "name", str(state))
    return names.get(name, name.title().replace("_", ""))


def committed_offsets(admin: Any, group: str, timeout: float) -> dict[Partition, int]:
    """The group's committed offset of every partition it has one for."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                request_timeout=timeout)
    result = futures[group].result(timeout=timeout)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []}


def list_offsets(admin: Any, partitions: list[Partition], spec: Any,
                 timeout: float) -> tuple[dict[Partition, int], dict[Partition, str]]:
    """ListOffsets of ``partitions`` at ``spec`` (``OffsetSpec.earliest()``, ``latest()``
    or ``for_timestamp(ms)``): the offsets found, and the error of each partition that
    failed."""
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}, {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                 request_timeout=timeout)
    found: dict[Partition, int] = {}
    failed: dict[Partition, str] = {}
    for tp, future in futures.items():
        try:
            found[(tp.topic, tp.partition)] = future.result(timeout=timeout).offset
        except Exception as exc:
            failed[(tp.topic, tp.partition)] = error_text(exc)
    return found, failed


@dataclass
class LagRow:
    """A partition of a group: committed offset (None: none), log end offset (None: not
    known) and the member it is assigned to (a confluent-kafka ``MemberDescription``)."""

    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: Any = None

    @property
    def lag(self) -> int | None:
        if self.end is None or self.committed is None:
            return None
        return self.end - self.committed


@dataclass
class GroupLag:
    group_id: str
    state: str
    assignor: str
    members: list[Any]
    rows: list[LagRow]
    # partitions whose log end offset could not be read, with the error
    errors: dict[Partition, str] = field(default_factory=dict)


def describe_group_lag(admin: Any, group_id: str, timeout: float) -> GroupLag | None:
    """The group's members and its lag per partition (committed or assigned), or None if
    there is no such group (Kafka describes an unknown group as Dead with no offsets).
    Raises the client's ``KafkaException`` when the group cannot be described."""
    from confluent_kafka.admin import OffsetSpec

    futures = admin.describe_consumer_groups([group_id], request_timeout=timeout)
    description = futures[group_id].result(timeout=timeout)
    committed = committed_offsets(admin, group_id, timeout)
    state = state_name(description.state)
    if state == "Dead" and not committed:
        return None
    owner: dict[Partition, Any] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions:
            owner[(tp.topic, tp.partition)] = member
    partitions = sorted(set(committed) | set(owner))
    ends, errors = list_offsets(admin, partitions, OffsetSpec.latest(), timeout)
    rows = []
    for key in partitions:
        offset = committed.get(key, -1)
        rows.append(LagRow(key[0], key[1], offset if offset >= 0 else None, ends.get(key),
                           owner.get(key)))
    return GroupLag(group_id, state, description.partition_assignor or "-",
                    list(description.members), rows, errors)


def reset_refusal(admin: Any, group: str, timeout: float) -> str | None:
    """Why the group's offsets cannot be reset now (it has members: they would overwrite
    the reset with their next commit), or None."""
    from confluent_kafka import ConsumerGroupState

    description = admin.describe_consumer_groups([group], request_timeout=timeout)[group] \
        .result(timeout=timeout)
    if description.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.UNKNOWN) \
            and description.members:
        return (f"offsets can only be reset while the group is empty (it is "
                f"{state_name(description.state)} with {len(description.members)} members)")
    return None


def reset_plan(admin: Any, partitions: list[Partition], to: str | int,
               timeout: float) -> tuple[dict[Partition, int], dict[Partition, str]]:
    """The new offset of each partition: ``to`` is ``"earliest"``, ``"latest"`` or an
    offset, clamped into the partition's [earliest, latest] as Kafka's tool does. Also
    the partitions whose bounds could not be read, with the error."""
    from confluent_kafka.admin import OffsetSpec

    earliest, failed = list_offsets(admin, partitions, OffsetSpec.earliest(), timeout)
    latest, failed_latest = list_offsets(admin, partitions, OffsetSpec.latest(), timeout)
    failed.update(failed_latest)
    plan: dict[Partition, int] = {}
    for key in partitions:
        if key not in earliest or key not in latest:
            continue
        if to == "earliest":
            plan[key] = earliest[key]
        elif to == "latest":
            plan[key] = latest[key]
        else:
            plan[key] = min(max(int(to), earliest[key]), latest[key])
    return plan, failed


def apply_reset(admin: Any, group: str, plan: dict[Partition, int],
                timeout: float) -> dict[Partition | None, str]:
    """Commit ``plan`` as the group's offsets; the errors, per partition (None: the whole
    request failed). Empty when every offset was committed."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, offset) for (t, p), offset in plan.items()])
    future = admin.alter_consumer_group_offsets([request], request_timeout=timeout)[group]
    try:
        result = future.result(timeout=timeout)
    except Exception as exc:
        return {None: error_text(exc)}
    return {(tp.topic, tp.partition): str(tp.error)
            for tp in result.topic_partitions or [] if tp.error is not None}
