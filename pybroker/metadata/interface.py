"""The one metadata interface: what handlers, the group coordinator and the broker ask of
the control plane, whichever stores it (the package docstring says which does).

Answers and errors are Kafka's: a method that refuses raises (or returns, where a request
names many topics) the ``KafkaError`` whose code the client gets.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Container
from typing import TYPE_CHECKING, NamedTuple, Protocol

from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import (
    CreatePartitionsRequestAssignment,
    MetadataRequestTopic,
    MetadataResponseTopic,
)

if TYPE_CHECKING:
    from pybroker.broker.dynamic_config import DynamicBrokerConfig
    from pybroker.broker.partition import Partition
    from pybroker.broker.quotas import ClientQuotas, Entity
    from pybroker.coordinator import CoordinatorConfig, GroupCoordinator
    from pybroker.errors import KafkaError
    from pybroker.security.credentials import CredentialStore
    from pybroker.security.store import AclStore
    from pybroker.txn.config import TxnConfig
    from pybroker.txn.coordinator import TxnCoordinator
    from pybroker.txn.markers import MarkerWrite

# ``fn(partition, is_leader)``, called on the loop when this broker starts or stops leading
LeadershipListener = Callable[["Partition", bool], None]
# a Metadata response's topic entry, and a topic a Metadata request names (by name, or
# from v10 by id with a null name)
TopicAnswer = MetadataResponseTopic
RequestedTopic = MetadataRequestTopic


# How long a FindCoordinator waits for the offsets topic it asked for; after that it answers
# COORDINATOR_NOT_AVAILABLE (the client asks again) while the creation goes on.
OFFSETS_TOPIC_CREATE_WAIT_S = 5.0


# A CreatePartitions request's placement of one new partition, as the client sent it.
PartitionAssignment = CreatePartitionsRequestAssignment


# ElectLeaders' election types (its ElectionType field; v0 asks for the preferred one)
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1


class ElectionResult(NamedTuple):
    """One partition's outcome of ElectLeaders: Kafka's error code (NONE: elected) and
    message, as the response carries them."""

    code: int
    message: str | None = None


# Kafka's answers (its controller's messages)
ELECTED = ElectionResult(ErrorCode.NONE)
ELECTION_NOT_NEEDED = ElectionResult(ErrorCode.ELECTION_NOT_NEEDED,
                                     "Leader election not needed for topic partition.")
PREFERRED_LEADER_NOT_AVAILABLE = ElectionResult(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                                "The preferred leader was not available.")
ELIGIBLE_LEADERS_NOT_AVAILABLE = ElectionResult(
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Eligible topic partition leaders are not available.")


def led_as_elected(election_type: int, leader: int, replicas: list[int],
                   live: Container[int]) -> bool:
    """Whether a partition led by ``leader`` is as an election of that type wants it: by
    its preferred (first) replica, or (unclean) by a live broker."""
    if election_type == PREFERRED_ELECTION:
        return leader == replicas[0]
    return leader in live


def no_such_partition(topic: str, partition: int, topic_exists: bool) -> ElectionResult:
    """ElectLeaders' answer for a partition that does not exist."""
    return ElectionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          f"No such partition as {topic}-{partition}" if topic_exists
                          else f"No such topic as {topic}")


class Endpoint(NamedTuple):
    broker_id: int
    host: str
    port: int


class CurrentLeader(NamedTuple):
    """KIP-951: the leader a client this broker refused should go to. ``endpoint`` is None
    when that leader is not a live broker."""

    leader_id: int
    leader_epoch: int
    endpoint: Endpoint | None


class NewTopic(NamedTuple):
    """A topic to create; -1 partitions or replication factor: the broker's default.
    ``assignment``: the request's manual placement, ``(partition, broker ids)`` pairs as
    given (checked by the implementation), None for the broker's own placement."""

    name: str
    partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str | None] | None = None
    assignment: list[tuple[int, list[int]]] | None = None


class CreatedTopic(NamedTuple):
    """A topic created (or, validating only, that would be: its id is then zero)."""

    topic_id: uuid.UUID
    partitions: int
    replication_factor: int
    overrides: dict[str, str]


class DeletedTopic(NamedTuple):
    name: str
    topic_id: uuid.UUID


class OngoingReassignment(NamedTuple):
    """A partition being reassigned (ListPartitionReassignments, KIP-455): ``replicas`` is
    the whole replica set while it moves, the target's first (Kafka's order), ``adding``
    and ``removing`` what it gains and loses."""

    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]


# One partition's reassignment as AlterPartitionReassignments asks it: (topic, partition,
# target replicas, or None to cancel the one in progress).
ReassignmentTarget = tuple[str, int, "list[int] | None"]


class Metadata(Protocol):
    """The control plane of one broker. Not thread-safe: the event loop thread only."""

    # lifecycle: the broker calls these in this order ---------------------------------

    async def join(self, cluster_id: str) -> str:
        """Before the logs load: the cluster id to use, ``cluster_id`` (this broker's) unless
        the control plane has its own."""
        ...

    async def follow_broker_configs(self, dynamic: DynamicBrokerConfig) -> None:
        """After ``join``, before the logs load: load the dynamic broker configs this
        broker follows (the cluster default and its own) into ``dynamic``, and from now
        on apply there the changes other brokers make."""
        ...

    def leads_every_partition(self) -> bool:
        """Whether every partition this broker has is led here from the moment it exists
        (the topic manager then gives a new partition its log and leadership at once and
        treats what survived recovery as committed); otherwise the controller creates
        this broker's replicas and tells it their roles."""
        ...

    def producer_id_source(self) -> Callable[[int], int] | None:
        """``source(size)``: the first id of a new block of producer ids for this broker
        (blocking, for a worker thread), or None: the broker's own file allocates them."""
        ...

    def acl_store(self) -> AclStore:
        """Where this broker's ACLs are kept (after ``join``): its own file, or the
        cluster's store that every broker sees."""
        ...

    def credential_store(self) -> CredentialStore:
        """Where the users' SCRAM credentials are kept (after ``join``): the broker's
        file, or the cluster's store that every broker sees."""
        ...

    def group_coordinator(self, config: CoordinatorConfig) -> GroupCoordinator:
        """The group coordinator of this broker, wired to this control plane (which
        offsets partitions it leads, where its writes go); where it leads every one from
        the start, their loads begun (they run in slices on the loop); not started.
        Called on the event loop."""
        ...

    def transaction_coordinator(self, config: TxnConfig,
                                new_producer_id: Callable[[], Awaitable[int]],
                                write_markers: MarkerWrite) -> TxnCoordinator:
        """The transaction coordinator of this broker, wired as ``group_coordinator``'s
        (which ``__transaction_state`` partitions it leads, where its writes go); not
        started. ``new_producer_id``: a fresh producer id; ``write_markers``: how a
        transaction's markers reach its partitions."""
        ...

    async def start(self) -> None:
        """Once the listener is bound (``broker.advertised`` is final)."""
        ...

    async def controlled_shutdown(self) -> None:
        """The first step of shutdown, while the listeners still serve: leadership this
        broker can give up goes to other replicas (a cluster's controlled shutdown), so
        clients move to them before it stops."""
        ...

    async def stop(self) -> None:
        """At shutdown, after in-flight requests are answered, before the logs close."""
        ...

    # brokers -------------------------------------------------------------------------

    @property
    def controller_id(self) -> int: ...

    def is_active_controller(self) -> bool:
        """Whether this broker is the cluster's controller now (a single node always is)."""
        ...

    def offline_partition_count(self) -> int:
        """Partitions without a live leader, as the controller sees them; 0 on a broker
        that is not the active controller (Kafka's OfflinePartitionsCount)."""
        ...

    def log_dir_failed(self, partitions: list[Partition]) -> None:
        """These partitions of this broker went offline with their log directory (on the
        loop, once per directory): a cluster member tells the controller, which moves
        their leadership to other replicas."""
        ...

    def live_brokers(self) -> list[Endpoint]:
        """Sorted by id; empty while this broker knows of none yet (Metadata answers
        with itself then, so clients ask again)."""
        ...

    def endpoint(self, broker_id: int, listener: str) -> Endpoint | None:
        """Live broker ``broker_id``'s advertised address on the listener named
        ``listener`` (Kafka answers a client with the endpoints of the listener it
        connected on); None when it is not live or has no such listener. The other
        methods' endpoints are on the inter-broker listener."""
        ...

    def rack(self, broker_id: int) -> str | None:
        """Live broker ``broker_id``'s ``broker.rack`` (None: it has none, or is not
        live)."""
        ...

    def leader_of(self, topic: str, partition: int) -> Endpoint | None: ...

    def current_leader(self, topic: str, partition: int) -> CurrentLeader | None:
        """Who leads the partition now, for a Produce or Fetch this broker refused with
        NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (KIP-951's hints; Kafka's
        ``getCurrentLeader``): this broker's replica knows best, else the metadata. None
        when no leader is known, or where this broker leads every partition (there is
        no other to name)."""
        ...

    def on_leadership_change(self, fn: LeadershipListener) -> None:
        """Call ``fn`` whenever this broker becomes the leader or a follower of a
        partition (never, where every partition is led from the start)."""
        ...

    async def coordinator_for_group(self, group_id: str) -> Endpoint | None:
        """The broker coordinating ``group_id`` (FindCoordinator), creating
        ``__consumer_offsets`` on first use where the control plane creates topics; None:
        COORDINATOR_NOT_AVAILABLE, the client asks again."""
        ...

    async def coordinator_for_transaction(self, transactional_id: str) -> Endpoint | None:
        """The broker coordinating ``transactional_id`` (FindCoordinator key type 1),
        creating ``__transaction_state`` on first use; None: COORDINATOR_NOT_AVAILABLE."""
        ...

    # topics --------------------------------------------------------------------------

    def partition_exists(self, topic: str, index: int) -> bool: ...

    def partition_count(self, topic: str) -> int:
        """The topic's partitions, 0 when there is no such topic."""
        ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, None if there is none."""
        ...

    def describe_all_topics(self) -> list[TopicAnswer]:
        """Metadata's answer for every topic (a request naming none)."""
        ...

    async def describe_topics(self, requested: list[RequestedTopic], allow_auto_create: bool,
                              api_version: int) -> list[TopicAnswer]:
        """Metadata's answer for the topics a request names (``name`` or, v10+,
        ``topic_id``), creating unknown ones with the defaults when ``allow_auto_create``
        and ``auto.create.topics.enable`` allow it."""
        ...

    async def create_topics(self, topics: list[NewTopic], validate_only: bool = False
                            ) -> list[CreatedTopic | KafkaError]:
        """The one way topics are created (CreateTopics, auto-creation, the offsets
        topic): each checked, its error returned in its place. Distinct names."""
        ...

    async def delete_topics(self, targets: list[tuple[str | None, uuid.UUID]]
                            ) -> list[DeletedTopic | KafkaError]:
        """Delete topics named by name, or by id when the name is None (one of the two;
        named twice: checked by the caller); each one's outcome in its place."""
        ...

    async def create_partitions(self, name: str, count: int,
                                assignments: list[PartitionAssignment] | None,
                                validate_only: bool) -> None:
        """Grow ``name`` to ``count`` partitions (CreatePartitions), or raise why not."""
        ...

    async def topic_configs(self, name: str) -> dict[str, str]:
        """A topic's config overrides, whether or not this broker holds a replica of it
        (any broker answers DescribeConfigs and AlterConfigs, as Kafka's);
        UnknownTopicOrPartitionError when there is no such topic."""
        ...

    async def alter_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        """Replace a topic's config overrides (validated by the caller) everywhere: kept
        durably before this returns, applied here at once, by the others as they learn."""
        ...

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None,
                            timeout_s: float) -> dict[tuple[str, int], ElectionResult]:
        """ElectLeaders: PREFERRED_ELECTION gives each partition its first replica as
        leader when that one is live and in the ISR; UNCLEAN_ELECTION gives a partition
        without a live leader the first live replica in assignment order (an ISR member
        if one is live, else any, with an ISR of itself, whatever
        ``unclean.leader.election.enable`` says). ``partitions`` None: every partition of
        every topic. Each partition's outcome, answered once this broker's metadata shows
        the leaders elected (REQUEST_TIMED_OUT for those it does not within
        ``timeout_s``). Raises KafkaError when no election could be made (no controller
        answered within ``timeout_s``, or it failed)."""
        ...

    # partition reassignment (KIP-455) ----------------------------------------------------

    async def alter_partition_reassignments(self, targets: list[ReassignmentTarget]
                                            ) -> list[KafkaError | None]:
        """Move each partition to its target replicas, or cancel (None) the move in
        progress, as AlterPartitionReassignments asks; each one's refusal (Kafka's:
        :func:`check_reassignment`, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS)
        or None in its place. Accepted is durable and under way, not finished: the
        replicas catch up, leadership moves, then the old replicas go."""
        ...

    async def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None
                                           ) -> list[OngoingReassignment]:
        """The reassignments in progress, of the partitions named (None: all); a
        partition that does not exist or is not moving is left out, as Kafka does."""
        ...

    # dynamic broker configs ------------------------------------------------------------

    async def alter_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        """Replace the whole dynamic config of ``entity`` (``DEFAULT_ENTITY`` or this
        broker's id; checked by the caller with ``DynamicBrokerConfig.checked``): durable
        when this returns, applied here, and on the brokers it concerns soon after."""
        ...


    # client quotas ---------------------------------------------------------------------

    async def follow_client_quotas(self, quotas: ClientQuotas) -> None:
        """Before the listener opens: load the client quotas kept into ``quotas``, and
        from now on apply there the changes other brokers make."""
        ...

    async def alter_client_quotas(self, changes: dict[Entity, dict[str, float]]) -> None:
        """Make each entity's quotas (checked by the caller; empty: none) what
        ``changes`` says: durable when this returns, applied here, and on every broker
        soon after."""
        ...


def check_reassignment(replicas: list[int], registered: set[int]) -> None:
    """Kafka's check of a reassignment's target replicas (its controller's
    ``validateManualPartitionAssignment``, same messages): none empty, every broker
    registered, none named twice; raises InvalidReplicaAssignmentError."""
    from pybroker.errors import InvalidReplicaAssignmentError

    if not replicas:
        raise InvalidReplicaAssignmentError(
            "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker in sorted(replicas):
        if broker not in registered:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered.")
        if broker == previous:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {broker} more than "
                "once.")
        previous = broker


def missing_topic(name: str | None, topic_id: uuid.UUID, code: int) -> TopicAnswer:
    """Metadata's answer for a topic it does not describe."""
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}
