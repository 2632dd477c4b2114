"""The controller: one broker of the cluster decides partition leadership for all of them.

Kafka's classic (ZooKeeper) controller, docs/REPLICATION.md. Every broker runs a
:class:`Controller`; the one that creates ``/controller`` is active until its ZooKeeper
session ends or another controller's epoch fences it.

Events, one queue, one task, in order (Kafka's ControllerEventManager): election (epoch
+ 1, read everything, repair, send the whole state to every broker, resume
reassignments), broker change, topic change, topic data change (new partitions, moved
replicas), deletion, ISR change notification, legacy reassignment request, leader
election (ElectLeaders, or the periodic preferred-leader check), controlled shutdown,
resignation.
ZooKeeper's watch callbacks run on kazoo's thread: they only queue an event on the loop
(``call_soon_threadsafe``); every store call runs in a worker thread
(``asyncio.to_thread``) so ZooKeeper never stalls the broker's loop.

Decisions (each logged at INFO with partition, old -> new leader, leader epoch, ISR):
- new partition: leader = first live replica of the assignment, ISR = live replicas,
  leader epoch 0 (none live: no state yet, retried when brokers change);
- broker gone: a partition it led gets the first replica in assignment order that is
  live and in the ISR; the dead broker leaves every ISR; leader epoch + 1. No live ISR
  member: leader -1 and the ISR is left as it is (so it keeps its last member, as
  Kafka's does; brokers that died together all stay, any of them may lead when back),
  unless ``unclean.leader.election.enable`` (topic config over the broker's) lets the
  first live replica lead with an ISR of itself. A broker that registered again (new
  broker epoch) is first handled as gone, then as back, as Kafka's "bounced" brokers:
  its unflushed tail may be lost, so it must not stay leader;
- broker back: LeaderAndIsr for every partition it hosts, then UpdateMetadata to all; an
  offline partition whose ISR holds it gets it as leader;
- leader election (:meth:`Controller.elect_leaders`: ElectLeaders from any broker, and
  every ``leader.imbalance.check.interval.seconds`` with ``auto.leader.rebalance.enable``
  a preferred election of every partition): preferred, the first replica leads when it is
  live, in the ISR and not the leader, ISR unchanged; unclean, a partition without a live
  leader gets one as on a broker's death, the first live replica with an ISR of itself
  when no ISR member is live, whatever ``unclean.leader.election.enable`` says. Epoch + 1;
- log directory failure (Kafka's ``/log_dir_event_notification``): the broker is sent
  LeaderAndIsr for every partition it hosts; every LeaderAndIsr answer's
  KAFKA_STORAGE_ERROR partitions are that broker's offline replicas (until it registers
  again), which are neither leaders nor ISR members: each gets a leader elsewhere as if
  the broker had gone, for those partitions only, and is not a preferred leader;
- reassignment (KIP-455, Kafka's ``onPartitionReassignment``; the request is written
  into the topic znode by any broker, ``cluster/reassignment.py``, or taken from the
  legacy ``/admin/reassign_partitions``): the whole replica set RS = TRS + ORS to every
  replica with epoch + 1 (the new ones create their logs and fetch as followers); once
  the ISR holds all of TRS (an ISR change notification, or at election), RS = TRS is
  written to the znode, a leader from TRS if the leader is not in it, the ISR without
  the removed replicas (epoch + 1), and StopReplica with delete to the removed ones. A
  cancellation (ORS written back) is a reassignment to ORS: the replicas it had added
  are stopped and deleted.
- controlled shutdown (:meth:`Controller.controlled_shutdown`: ControlledShutdown from a
  stopping broker, Kafka's ``KafkaController.doControlledShutdown``): the broker is
  shutting down until it is gone, and no election picks it as leader meanwhile (Kafka's
  ``shuttingDownBrokerIds``). Of its partitions with more than one replica, those it leads
  get the first replica in assignment order that is live, in the ISR and not shutting
  down (ControlledShutdownLeaderSelector), those it follows lose it from their ISR (and it
  gets StopReplica without delete for them); the shutting-down brokers leave both ISRs,
  leader epoch + 1. A partition no other ISR member can lead stays with it: the answer
  names those (``remaining_partitions``), and the broker asks again.

Writes: ``set_partition_state`` conditional on the state's znode version and on
``/controller_epoch``'s version from this controller's election. BadVersionError (a
leader changed its ISR meanwhile): re-read, decide again. ControllerMovedError: resign at
once and go back to watching ``/controller``.

Requests: each live broker has a :class:`_Sender` (one ControlClient), which sends its
requests one at a time in order, each retried after ``controller.socket.timeout.ms``
while the broker is live (Kafka's RequestSendThread); a broker that leaves has its
queue dropped. Every request carries this controller's id and epoch and the target's
broker epoch. LeaderAndIsr goes before the UpdateMetadata that publishes the same change
(Kafka's ControllerBrokerRequestBatch): a broker's own Metadata never names it leader of a
partition it has not taken yet, so a client sent there by it is not refused.

Contract addition (not in docs/REPLICATION.md's list, added by zk_store.py): new
partitions of an existing topic are seen through ``store.watch_topic(name, fn(TopicAssignment
| None))``, a data watch on ``/brokers/topics/<t>`` set once per topic name.

After a ControllerMovedError this controller resigns but cannot delete ``/controller``
(the contract has no such call): it runs again for the election only once ``/controller``
is gone. A successor's election replaced ``/controller`` anyway, so this matters only
when the epoch was moved by hand.

Not thread-safe: runs on the broker's event loop; only the watch callbacks come from
kazoo's thread, and they only hop to the loop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pybroker.cluster.metadata_cache import DELETED_LEADER
from pybroker.cluster.reassignment import ReplicaAssignment
from pybroker.cluster.zk_store import (
    REASSIGN_PARTITIONS,
    BadVersionError,
    BrokerInfo,
    ControllerMovedError,
    PartitionState,
    TopicAssignment,
)
from pybroker.config import parse_bool
from pybroker.errors import ErrorCode, UnknownTopicOrPartitionError
from pybroker.metadata.interface import (
    ELECTED,
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    PREFERRED_ELECTION,
    PREFERRED_LEADER_NOT_AVAILABLE,
    ElectionResult,
    led_as_elected,
    no_such_partition,
)
from pybroker.net.listeners import PLAINTEXT, PROTOCOL_IDS
from pybroker.net.protocol.typed import (
    LeaderAndIsrRequest,
    LeaderAndIsrRequestPartitionState,
    StopReplicaRequest,
    UpdateMetadataRequest,
    UpdateMetadataRequestBroker,
    UpdateMetadataRequestPartitionState,
    UpdateMetadataRequestTopicState,
)

# What the controller sends brokers over the control channel.
ControlRequest = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest
log = logging.getLogger("pybroker.controller")

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
VERSIONS = {LEADER_AND_ISR: 5, STOP_REPLICA: 3, UPDATE_METADATA: 7}
NO_LEADER = -1
EPOCH_DURING_DELETE = -2  # StopReplica's leader epoch for a deleted partition (Kafka's)
INCREMENTAL, FULL = 1, 2  # LeaderAndIsr's Type: FULL names every partition the broker hosts
BAD_VERSION_RETRIES = 10
# Store writes of one event are started this many at a time (kazoo pipelines them on its
# session; the default executor's threads bound how many really wait at once).
WRITE_CONCURRENCY = 32
# A resigned controller's pause before it hands back the ISR change notifications its
# watch still consumes (so the active controller's watch most likely takes the next copy).
ISR_HAND_BACK_S = 1.0
RETAKE_S = 1.0  # pause before a failed take-over (election won) is tried again

TP = tuple[str, int]
Decide = Callable[[TP, PartitionState], Awaitable[tuple[int, list[int]] | None]]


class _Sender:
    """One broker's requests: one at a time, in order, each sent again after the timeout
    until answered; :meth:`close` drops whatever is left."""

    def __init__(self, info: BrokerInfo, client: Any, timeout_s: float,
                 on_answer: Callable[[int, int, dict], None]) -> None:
        """``on_answer(broker, api key, answer)`` for each request answered."""
        self.info = info
        self.client = client
        self.timeout_s = timeout_s
        self._on_answer = on_answer
        self._queue: asyncio.Queue[tuple[int, ControlRequest]] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def put(self, api_key: int, body: ControlRequest) -> None:
        self._queue.put_nowait((api_key, body))

    def close(self) -> None:
        self._task.cancel()
        self.client.close()

    async def _run(self) -> None:
        broker = self.info.broker_id
        while True:
            api_key, body = await self._queue.get()
            version = VERSIONS[api_key]
            answer: dict | None = None
            while answer is None:
                try:
                    answer = await self.client.request(api_key, version, body, self.timeout_s)
                except TimeoutError:
                    log.warning("broker %d did not answer %s within %.0f ms: sending it again",
                                broker, _NAMES[api_key], self.timeout_s * 1000)
                except ConnectionError:
                    return
                except Exception:  # our bug (a body that does not encode): drop it, go on
                    log.exception("%s to broker %d failed", _NAMES[api_key], broker)
                    answer = {}
            code = answer.get("error_code", 0)
            if code:
                log.warning("broker %d answered %s with %s", broker, _NAMES[api_key],
                            _error_name(code))
            self._on_answer(broker, api_key, answer)


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("handing ISR change notifications back failed: %s", task.exception())


_NAMES = {LEADER_AND_ISR: "LeaderAndIsr", STOP_REPLICA: "StopReplica",
          UPDATE_METADATA: "UpdateMetadata"}


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class Controller:
    def __init__(self, broker_id: int, store: Any, config: Any,
                 clients: Callable[[BrokerInfo], Any]) -> None:
        self.broker_id = broker_id
        self.store = store
        self.config = config
        self._new_client = clients
        self._timeout_s = config["controller.socket.timeout.ms"] / 1000
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[tuple[Callable[..., Awaitable[Any]], tuple,
                                          asyncio.Future | None]] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._stopped = False
        self._active = False
        self._epoch = -1
        self._epoch_version = -1  # /controller_epoch's znode version from our election
        # the state of an active controller
        self._live: dict[int, BrokerInfo] = {}
        self._senders: dict[int, _Sender] = {}
        self._topics: dict[str, TopicAssignment] = {}
        self._states: dict[TP, PartitionState] = {}
        self._shutting_down: set[int] = set()  # live brokers in controlled shutdown
        # what the watches said last, kept while inactive too
        self._pending_deletions: list[str] = []
        self._legacy_targets: dict[TP, list[int]] = {}  # /admin/reassign_partitions
        self._watched_topics: set[str] = set()
        self._watching_isr_changes = False
        # broker -> its replicas in a failed log directory (until it registers again)
        self._offline_replicas: dict[int, set[TP]] = {}

    # lifecycle ---------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._active

    def offline_partition_count(self) -> int:
        """Partitions whose leader is not a live broker (none, or one that went away and
        has no successor yet); 0 while not active (its state is the active one's)."""
        if not self._active:
            return 0
        live = self._live
        return sum(state.leader not in live for state in self._states.values())

    @property
    def epoch(self) -> int:
        """The controller epoch of this controller's last election (-1: never won)."""
        return self._epoch

    async def start(self) -> None:
        """Enter the election and watch what the controller acts on."""
        loop = self._loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._run()))
        store = self.store
        await asyncio.to_thread(store.add_state_listener, self._session_changed)
        await asyncio.to_thread(store.watch_controller, self._zk_event(self._controller_changed))
        await asyncio.to_thread(store.watch_brokers, self._zk_event(self._brokers_changed))
        await asyncio.to_thread(store.watch_topics, self._zk_event(self._topics_changed))
        await asyncio.to_thread(store.watch_topic_deletions,
                                self._zk_event(self._deletions_changed))
        await asyncio.to_thread(store.watch_legacy_reassignment,
                                self._zk_event(self._legacy_reassignment_changed))
        self._post(self._elect)
        if self.config["auto.leader.rebalance.enable"]:
            self._tasks.append(loop.create_task(self._preferred_ticks()))

    async def stop(self) -> None:
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        while not self._events.empty():  # nobody will run them: callers waiting get None
            _fn, _args, done = self._events.get_nowait()
            if done is not None and not done.done():
                done.set_result(None)
        self._resign("stopping")

    async def elect_leaders(self, election_type: int, partitions: Iterable[TP] | None = None
                            ) -> dict[TP, ElectionResult] | None:
        """Elect leaders (``pybroker.metadata.interface``'s election types) of every
        partition or of those named; each one's outcome, as ElectLeaders answers it. None
        when this controller is not active (the caller asks the active one)."""
        if self._stopped or self._loop is None:
            return None
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        result: dict[TP, ElectionResult] | None = await self._call(
            self._elect_leaders, election_type, wanted)
        return result

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[int, list[TP]] | None:
        """A stopping broker's ControlledShutdown (the module docstring says what moves):
        (error code, the partitions it still leads). STALE_BROKER_EPOCH when
        ``broker_epoch`` (-1: unknown) is older than its live registration's,
        BROKER_NOT_AVAILABLE when it is not live; None when this controller is not active."""
        if self._stopped or self._loop is None:
            return None
        result: tuple[int, list[TP]] | None = await self._call(
            self._controlled_shutdown, broker_id, broker_epoch)
        return result

    # events ------------------------------------------------------------------------------

    def _post(self, fn: Callable[..., Awaitable[Any]], *args: Any,
              done: asyncio.Future | None = None) -> None:
        self._events.put_nowait((fn, args, done))

    async def _call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        if self._loop is None:
            raise RuntimeError("the controller is not started")
        done = self._loop.create_future()
        self._post(fn, *args, done=done)
        return await done

    def _zk_event(self, handler: Callable[..., Awaitable[Any]]) -> Callable[..., None]:
        """A watch callback (kazoo's thread) that queues ``handler(*args)`` on the loop."""
        def callback(*args: Any) -> None:
            loop = self._loop
            if self._stopped or loop is None:
                return
            try:
                loop.call_soon_threadsafe(self._post, handler, *args)
            except RuntimeError:  # the loop is closed: the broker is gone
                pass
        return callback

    def _session_changed(self, state: str) -> None:
        """kazoo's thread: a lost session took /controller with it."""
        if state == "LOST":
            self._zk_event(self._session_lost)()
        elif state == "CONNECTED":
            self._zk_event(self._check_controller)()

    async def _run(self) -> None:
        while True:
            fn, args, done = await self._events.get()
            result = None
            try:
                result = await fn(*args)
            except ControllerMovedError as e:
                self._resign(f"another controller has a newer epoch ({e})")
                self._post(self._check_controller)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller event %s failed", fn.__name__)
            if done is not None and not done.done():
                done.set_result(result)

    async def _preferred_ticks(self) -> None:
        interval = self.config["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval)
            if self._active:
                self._post(self._rebalance_leaders)

    # election and resignation ------------------------------------------------------------

    async def _controller_changed(self, controller_id: int | None) -> None:
        if controller_id is None:  # deleted (an operator moving the role): all run again
            self._resign("/controller was deleted")
            await self._elect()
        elif controller_id != self.broker_id and self._active:
            self._resign(f"/controller now names broker {controller_id}")

    async def _check_controller(self) -> None:
        if not self._active and await asyncio.to_thread(self.store.controller_id) is None:
            await self._elect()

    async def _session_lost(self) -> None:
        self._resign("the ZooKeeper session was lost")

    async def _elect(self) -> None:
        if self._active or self._stopped:
            return
        if not await asyncio.to_thread(self.store.try_become_controller, self.broker_id):
            return
        self._epoch, self._epoch_version = await asyncio.to_thread(
            self.store.increment_controller_epoch)
        self._active = True
        log.info("broker %d is the active controller, epoch %d", self.broker_id, self._epoch)
        if not self._watching_isr_changes:  # see _isr_changed: only once elected
            self._watching_isr_changes = True
            await asyncio.to_thread(self.store.watch_isr_changes,
                                    self._zk_event(self._isr_changed))
            await asyncio.to_thread(self.store.watch_log_dir_failures,
                                    self._zk_event(self._log_dirs_failed))
        await self._take_over()

    async def _take_over(self) -> None:
        """Read everything, repair, send; a failure (ZooKeeper unreachable for a while)
        is tried again while this controller holds the role, as nobody else can take it."""
        if not self._active:
            return
        try:
            await self._on_elected()
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("taking over as controller failed; trying again in %.0f s",
                          RETAKE_S)
            if self._loop is not None:
                self._loop.call_later(RETAKE_S, self._post, self._take_over)

    def _resign(self, why: str) -> None:
        for sender in self._senders.values():
            sender.close()
        self._senders.clear()
        if self._active:
            log.log(logging.INFO if self._stopped else logging.WARNING,
                    "broker %d resigns as controller (epoch %d): %s", self.broker_id,
                    self._epoch, why)
        self._active = False
        self._live = {}
        self._topics = {}
        self._states = {}
        self._shutting_down = set()

    async def _on_elected(self) -> None:
        store = self.store
        for broker in list(self._senders):
            self._close(broker)
        self._live = await asyncio.to_thread(store.brokers)
        names = await asyncio.to_thread(store.topic_names)
        self._topics = await asyncio.to_thread(store.topics, names)
        self._states = {}
        for name in self._topics:
            await self._read_states(name)
            await self._watch_topic(name)
        for info in self._live.values():
            self._open(info)
        created = await self._initialize(self._all_partitions())
        await self._apply(self._all_partitions(), self._decide_failover)
        await self._apply([*self._outside_replica_set(), *self._moves_to_restart()],
                          self._decide_replica_set)
        for broker in self._live:
            self._send_leader_and_isr({broker: self._hosted_by(broker)}, created, FULL)
        self._send_update_metadata(None)
        if self._pending_deletions:
            await self._delete_topics(list(self._pending_deletions))
        await self._complete_reassignments(self._all_partitions())
        if self._legacy_targets:
            await self._start_legacy_reassignments(self._legacy_targets)

    # brokers -----------------------------------------------------------------------------

    def _open(self, info: BrokerInfo) -> None:
        try:
            client = self._new_client(info)
        except Exception as e:  # a registration without a usable control address
            log.error("no control channel to broker %d (%r): %s", info.broker_id, info.control, e)
            return
        self._senders[info.broker_id] = _Sender(info, client, self._timeout_s, self._answered)

    def _close(self, broker: int) -> None:
        sender = self._senders.pop(broker, None)
        if sender is not None:
            sender.close()

    async def _brokers_changed(self, brokers: dict[int, BrokerInfo]) -> None:
        if not self._active:
            return
        old = self._live
        bounced = {b for b in brokers if b in old and brokers[b].epoch != old[b].epoch}
        gone = {b for b in old if b not in brokers} | bounced
        back = {b for b in brokers if b not in old} | bounced
        if not gone and not back:
            self._live = dict(brokers)
            return
        log.info("brokers changed: live %s, gone %s, new %s", sorted(brokers), sorted(gone),
                 sorted(back))
        for broker in gone:
            self._close(broker)
            self._offline_replicas.pop(broker, None)  # a restart tries its log dirs again
            self._shutting_down.discard(broker)
        # first as Kafka's onBrokerFailure (bounced brokers count as dead), then startup
        self._live = {b: info for b, info in brokers.items() if b not in bounced}
        changed = await self._apply(self._needing_failover(), self._decide_failover)
        self._live = dict(brokers)
        changed |= await self._apply(self._needing_failover(), self._decide_failover)
        created = await self._initialize(self._all_partitions())
        for broker in sorted(back):
            self._open(brokers[broker])
        targets = self._to_replicas(changed | created)
        for broker in back:  # all it hosts (FULL: whatever else it has is stray)
            targets.pop(broker, None)
            self._send_leader_and_isr({broker: self._hosted_by(broker)}, created, FULL)
        self._send_leader_and_isr(targets, created)
        self._send_update_metadata(None)

    def _needing_failover(self, partitions: Iterable[TP] | None = None) -> list[TP]:
        live, states = self._live, self._states
        chosen = states if partitions is None else partitions
        return [tp for tp in chosen
                if states[tp].leader not in live or any(b not in live for b in states[tp].isr)]

    # topics ------------------------------------------------------------------------------

    async def _topics_changed(self, names: list[str]) -> None:
        if not self._active:
            return
        present = set(names)
        for name in [n for n in self._topics if n not in present]:
            self._forget_topic(name)
        new = [n for n in names if n not in self._topics]
        if not new:
            return
        found = await asyncio.to_thread(self.store.topics, new)
        await self._add_partitions(found)

    async def _topic_changed(self, name: str, assignment: TopicAssignment | None) -> None:
        """A topic's assignment changed: new partitions (CreatePartitions)."""
        known = self._topics.get(name)
        if not self._active or assignment is None or known is None:
            return  # deletions and creations go through the topics watch
        if assignment.topic_id != known.topic_id:
            return
        added = {p: r for p, r in assignment.partitions.items() if p not in known.partitions}
        moved = {p: ReplicaAssignment.of(known, p) for p in assignment.partitions
                 if p in known.partitions
                 and ReplicaAssignment.of(known, p) != ReplicaAssignment.of(assignment, p)}
        self._topics[name] = assignment
        if added:
            log.info("topic %s has new partitions %s", name, sorted(added))
            await self._add_partitions({name: assignment})
        for p, previous in sorted(moved.items()):
            await self._reassignment_changed((name, p), previous)

    async def _add_partitions(self, topics: dict[str, TopicAssignment]) -> None:
        """Start the partitions of ``topics`` that have no state: LeaderAndIsr (is_new) to
        their replicas, UpdateMetadata to everyone."""
        self._topics.update(topics)
        for name in topics:
            await self._read_states(name)
            await self._watch_topic(name)
        wanted = [(n, p) for n, t in topics.items() for p in t.partitions]
        created = await self._initialize(wanted)
        self._send_leader_and_isr(self._to_replicas(created), created)
        self._send_update_metadata([tp for tp in wanted if tp in self._states])

    async def _read_states(self, name: str) -> None:
        states = await asyncio.to_thread(self.store.partition_states, name)
        topic = self._topics[name]
        for p, state in states.items():
            if p in topic.partitions:
                self._states[(name, p)] = state

    async def _watch_topic(self, name: str) -> None:
        if name in self._watched_topics:
            return  # the watch outlives the topic: a topic created again is seen by it
        self._watched_topics.add(name)
        handler = self._zk_event(self._topic_changed)
        await asyncio.to_thread(self.store.watch_topic, name,
                                lambda assignment: handler(name, assignment))

    def _forget_topic(self, name: str) -> None:
        topic = self._topics.pop(name, None)
        if topic is not None:
            for p in topic.partitions:
                self._states.pop((name, p), None)

    async def _deletions_changed(self, names: list[str]) -> None:
        self._pending_deletions = list(names)
        if self._active and names:
            await self._delete_topics(names)

    async def _delete_topics(self, names: list[str]) -> None:
        """StopReplica (delete) to the replicas, the znodes removed, then UpdateMetadata
        marking the partitions deleted (leader -2)."""
        for name in names:
            topic = self._topics.get(name) or await asyncio.to_thread(self.store.topic, name)
            if topic is not None:
                per_broker: dict[int, list[int]] = collections.defaultdict(list)
                for p, replicas in topic.partitions.items():
                    for r in replicas:
                        per_broker[r].append(p)
                for broker, partitions in per_broker.items():
                    self._send_stop_replica(broker, [(name, p) for p in partitions],
                                            delete=True, leader_epoch=EPOCH_DURING_DELETE)
            await asyncio.to_thread(self.store.delete_topic, name)
            log.info("topic %s deleted", name)
            if topic is not None:
                self._forget_topic(name)
                self._send_update_metadata([], deleted=[topic])

    async def _isr_changed(self, partitions: list[tuple[str, int]]) -> None:
        """Notifications are consumed by whoever reads them first (the store deletes them),
        so the watch is set only once this controller has been elected (brokers that never
        were controller never take them), and a controller that resigned hands what it
        still takes back after a pause, for the active one to take: the store has no way to
        end a watch."""
        if not self._active:
            self._hand_back_later(self.store.notify_isr_change, partitions)
            return
        fresh: list[TP] = []
        for name in sorted({t for t, _ in partitions}):
            if name not in self._topics:
                continue
            states = await asyncio.to_thread(self.store.partition_states, name)
            for t, p in partitions:
                if t == name and p in states:
                    self._states[(t, p)] = states[p]
                    fresh.append((t, p))
        # an ISR grown just before a broker died may name it: the broker change went by
        # with the older ISR in this cache
        changed = await self._apply(self._needing_failover(fresh), self._decide_failover)
        self._send_leader_and_isr(self._to_replicas(changed), set())
        if fresh:
            self._send_update_metadata(fresh)
        await self._complete_reassignments(fresh)

    # log directory failures --------------------------------------------------------------

    async def _log_dirs_failed(self, brokers: list[int]) -> None:
        """Each broker answers LeaderAndIsr for all it hosts; ``_answered`` takes its
        offline replicas from the answer. Notifications consumed while not active are
        handed back, as ISR changes are."""
        if not self._active:
            for broker in brokers:
                self._hand_back_later(self.store.notify_log_dir_failure, broker)
            return
        for broker in brokers:
            log.info("broker %d reports a failed log directory", broker)
            self._send_leader_and_isr({broker: self._hosted_by(broker)}, set())

    def _answered(self, broker: int, api_key: int, answer: dict) -> None:
        """A broker's answer (its sender's task): KAFKA_STORAGE_ERROR in a LeaderAndIsr
        answer names replicas in a failed log directory."""
        if api_key != LEADER_AND_ISR:
            return
        names = {t.topic_id: name for name, t in self._topics.items()}
        offline = [(names[t["topic_id"]], p["partition_index"])
                   for t in answer.get("topics", []) if t["topic_id"] in names
                   for p in t["partition_errors"]
                   if p["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR]
        known = self._offline_replicas.get(broker, set())
        if any(tp not in known for tp in offline):
            self._post(self._replicas_offline, broker, offline)

    async def _replicas_offline(self, broker: int, partitions: list[TP]) -> None:
        if not self._active or broker not in self._live:
            return
        self._offline_replicas.setdefault(broker, set()).update(partitions)
        log.info("broker %d: replicas offline (failed log directory): %s", broker,
                 ", ".join(f"{t}-{p}" for t, p in sorted(partitions)))
        changed = await self._apply(partitions, self._decide_failover)
        self._send_leader_and_isr(self._to_replicas(changed), set())
        self._send_update_metadata(partitions)

    def _serving(self, tp: TP) -> dict[int, BrokerInfo]:
        """The live brokers whose replica of ``tp`` is not in a failed log directory."""
        offline = [b for b, tps in self._offline_replicas.items() if tp in tps]
        if not offline:
            return self._live
        return {b: info for b, info in self._live.items() if b not in offline}

    def _hand_back_later(self, notify: Callable[..., None], *args: Any) -> None:
        """A notification this controller consumed while not active goes back after a
        pause (``notify(*args)`` writes it again), for the active one to take."""
        if not self._stopped and self._loop is not None:
            self._loop.call_later(ISR_HAND_BACK_S, self._hand_back, notify, *args)

    def _hand_back(self, notify: Callable[..., None], *args: Any) -> None:
        if self._stopped or self._active or self._loop is None:
            return
        task = self._loop.create_task(asyncio.to_thread(notify, *args))
        task.add_done_callback(_log_failure)

    # decisions ---------------------------------------------------------------------------

    def _all_partitions(self) -> list[TP]:
        return [(n, p) for n, t in self._topics.items() for p in t.partitions]

    def _replicas(self, tp: TP) -> list[int]:
        return self._topics[tp[0]].partitions[tp[1]]

    async def _initialize(self, partitions: Iterable[TP]) -> set[TP]:
        """Create the states of partitions that have none; returns those created."""
        missing = [tp for tp in partitions if tp not in self._states]
        created: set[TP] = set()

        async def create(tp: TP) -> None:
            live = [r for r in self._replicas(tp) if self._may_lead(tp, r)]
            if not live:
                log.warning("partition %s-%d: no live replica of %s, no leader yet", *tp,
                            self._replicas(tp))
                return
            try:
                state = await asyncio.to_thread(
                    self.store.create_partition_state, tp[0], tp[1], live[0], 0, live,
                    self._epoch, self._epoch_version)
            except BadVersionError:  # created meanwhile (by a leader or our predecessor)
                found = await asyncio.to_thread(self.store.partition_state, tp[0], tp[1])
                if found is not None:
                    self._states[tp] = found
                return
            except UnknownTopicOrPartitionError:
                return  # deleted meanwhile
            self._states[tp] = state
            created.add(tp)
            log.info("partition %s-%d: new, leader %d, leader epoch 0, ISR %s", *tp, live[0],
                     live)

        await self._each(missing, create)
        return created

    async def _apply(self, partitions: Iterable[TP], decide: Decide) -> set[TP]:
        """Write what ``decide`` wants for each partition; returns the partitions changed."""
        changed: set[TP] = set()

        async def change(tp: TP) -> None:
            state = self._states[tp]
            for _ in range(BAD_VERSION_RETRIES):
                target = await decide(tp, state)
                if target is None:
                    return
                leader, isr = target
                try:
                    new = await asyncio.to_thread(
                        self.store.set_partition_state, tp[0], tp[1], leader,
                        state.leader_epoch + 1, isr, self._epoch, state.zk_version,
                        self._epoch_version)
                except BadVersionError:
                    found = await asyncio.to_thread(self.store.partition_state, tp[0], tp[1])
                    if found is None:
                        return
                    state = self._states[tp] = found
                    continue
                log.info("partition %s-%d: leader %d -> %d, leader epoch %d, ISR %s -> %s (%s)",
                         *tp, state.leader, leader, new.leader_epoch, state.isr, isr,
                         decide.__name__.removeprefix("_decide_"))
                self._states[tp] = new
                changed.add(tp)
                return
            log.warning("partition %s-%d: state kept changing under the controller; left as "
                        "it is", *tp)

        await self._each([tp for tp in partitions if tp in self._states], change)
        return changed

    async def _each(self, items: list[TP], fn: Callable[[TP], Awaitable[None]]) -> None:
        """``fn`` over ``items``, WRITE_CONCURRENCY at a time; a ControllerMovedError from
        any of them is raised once all have ended."""
        for start in range(0, len(items), WRITE_CONCURRENCY):
            results = await asyncio.gather(*(fn(tp) for tp in items[start:start + WRITE_CONCURRENCY]),
                                           return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            for error in errors:
                if isinstance(error, ControllerMovedError):
                    raise error
            if errors:
                raise errors[0]

    async def _decide_failover(self, tp: TP, state: PartitionState, force_unclean: bool = False
                               ) -> tuple[int, list[int]] | None:
        live = self._serving(tp)
        isr_live = [b for b in state.isr if b in live]
        if state.leader in live:
            return (state.leader, isr_live) if isr_live != state.isr else None
        replicas = self._replicas(tp)
        clean = [r for r in replicas if self._may_lead(tp, r) and r in state.isr]
        if clean:
            return clean[0], isr_live
        live_replicas = [r for r in replicas if self._may_lead(tp, r)]
        if live_replicas and (force_unclean or await self._unclean_allowed(tp[0])):
            log.warning("partition %s-%d: unclean election of %d, no ISR member of %s is live",
                        *tp, live_replicas[0], state.isr)
            return live_replicas[0], [live_replicas[0]]
        if state.leader == NO_LEADER:
            return None
        return NO_LEADER, state.isr  # offline: the ISR is kept (see the module docstring)

    async def _decide_preferred(self, tp: TP, state: PartitionState) -> tuple[int, list[int]] | None:
        preferred = self._replicas(tp)[0]
        if state.leader != preferred and self._may_lead(tp, preferred) and \
                preferred in state.isr:
            return preferred, state.isr
        return None

    async def _decide_unclean(self, tp: TP, state: PartitionState) -> tuple[int, list[int]] | None:
        if state.leader in self._serving(tp):
            return None
        return await self._decide_failover(tp, state, force_unclean=True)

    async def _decide_controlled_shutdown(self, tp: TP, state: PartitionState
                                          ) -> tuple[int, list[int]] | None:
        """Kafka's ControlledShutdownLeaderSelector: the shutting-down brokers leave the
        ISR, and one that leads hands over to the first replica able to lead and in the
        ISR; None when there is none (it keeps leading) or nothing to change."""
        isr = [b for b in state.isr if b not in self._shutting_down]
        if state.leader in self._shutting_down:
            leader = next((r for r in self._replicas(tp)
                           if self._may_lead(tp, r) and r in state.isr), None)
            return None if leader is None else (leader, isr)
        if state.leader not in self._serving(tp) or not isr or isr == state.isr:
            return None  # offline (its ISR is kept), or nothing to remove
        return state.leader, isr

    def _may_lead(self, tp: TP, broker: int) -> bool:
        """Whether ``broker`` may be elected leader of ``tp``: serving it (live, its
        replica not in a failed log directory) and not shutting down."""
        return broker in self._serving(tp) and broker not in self._shutting_down

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int
                                   ) -> tuple[int, list[TP]] | None:
        if not self._active:
            return None
        info = self._live.get(broker_id)
        if info is None:
            log.warning("controlled shutdown of broker %d refused: not live", broker_id)
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        # newer than ours: the registration is being written (this cache trails ZooKeeper)
        if -1 < broker_epoch < info.epoch:
            log.warning("controlled shutdown of broker %d refused: broker epoch %d, live "
                        "registration's %d", broker_id, broker_epoch, info.epoch)
            return ErrorCode.STALE_BROKER_EPOCH, []
        self._shutting_down.add(broker_id)
        replicated = [tp for tp in self._hosted_by(broker_id) if len(self._replicas(tp)) > 1]
        led = {tp for tp in replicated if self._states[tp].leader == broker_id}
        followed = [tp for tp in replicated
                    if tp not in led and broker_id in self._states[tp].isr]
        changed = await self._apply(sorted(led) + followed, self._decide_controlled_shutdown)
        targets = self._to_replicas(changed)
        # it leaves the partitions it followed: the others are told, it is stopped
        stopped = [tp for tp in followed if tp in changed]
        targets[broker_id] = [tp for tp in targets.get(broker_id, []) if tp not in stopped]
        self._send_leader_and_isr(targets, set())
        self._send_stop_replica(broker_id, stopped)
        if changed:
            self._send_update_metadata(sorted(changed))
        remaining = sorted(tp for tp in led if self._states[tp].leader == broker_id)
        log.info("controlled shutdown of broker %d: %d leaderships moved, left %d ISRs, "
                 "still leads %s", broker_id, len(led) - len(remaining), len(stopped),
                 [f"{t}-{p}" for t, p in remaining])
        return ErrorCode.NONE, remaining

    async def _unclean_allowed(self, topic: str) -> bool:
        configs = await asyncio.to_thread(self.store.topic_configs, topic)
        value = configs.get("unclean.leader.election.enable")
        if value is not None:
            return parse_bool(value)
        return bool(self.config["unclean.leader.election.enable"])

    async def _elect_leaders(self, election_type: int, partitions: list[TP] | None
                             ) -> dict[TP, ElectionResult] | None:
        if not self._active:
            return None
        wanted = self._all_partitions() if partitions is None else partitions
        results: dict[TP, ElectionResult] = {}
        needed: list[TP] = []
        for tp in wanted:
            topic = self._topics.get(tp[0])
            if topic is None or tp[1] not in topic.partitions:
                results[tp] = no_such_partition(*tp, topic_exists=topic is not None)
            elif self._has_elected_leader(election_type, tp):
                results[tp] = ELECTION_NOT_NEEDED
            else:
                needed.append(tp)
        preferred = election_type == PREFERRED_ELECTION
        changed = await self._apply(needed, self._decide_preferred if preferred
                                    else self._decide_unclean)
        if changed:
            self._send_leader_and_isr(self._to_replicas(changed), set())
            self._send_update_metadata(sorted(changed))
        failed = PREFERRED_LEADER_NOT_AVAILABLE if preferred else ELIGIBLE_LEADERS_NOT_AVAILABLE
        for tp in needed:
            results[tp] = ELECTED if self._has_elected_leader(election_type, tp) else failed
        return results

    def _has_elected_leader(self, election_type: int, tp: TP) -> bool:
        state = self._states.get(tp)
        return state is not None and led_as_elected(election_type, state.leader,
                                                    self._replicas(tp), self._live)

    # partition reassignment (KIP-455) ----------------------------------------------------

    async def _rebalance_leaders(self) -> None:
        """The periodic preferred election (``auto.leader.rebalance.enable``), of the
        partitions not being moved, as Kafka's ``checkAndTriggerAutoLeaderRebalance``: a
        move's first replica is a target one, and leadership goes where the move says
        once it completes."""
        await self._elect_leaders(PREFERRED_ELECTION, [
            tp for tp in self._all_partitions() if not self._assignment(tp).reassigning])

    def _assignment(self, tp: TP) -> ReplicaAssignment:
        return ReplicaAssignment.of(self._topics[tp[0]], tp[1])

    def _caught_up(self, tp: TP) -> bool:
        state = self._states.get(tp)
        return state is not None and all(r in state.isr for r in self._assignment(tp).target)

    async def _reassignment_changed(self, tp: TP, previous: ReplicaAssignment) -> None:
        """A partition's replicas changed in its topic's znode (a reassignment asked,
        replaced or cancelled; the controller's own completions are already in the
        cache). Replicas of the previous set that the new one lacks go at once (a
        replaced or cancelled move's additions); then, as Kafka's
        ``onPartitionReassignment``: a move whose target is not all in the ISR yet gives
        every replica the whole set with a new leader epoch (the new ones start
        fetching), otherwise it completes."""
        if tp not in self._states:
            return  # no state yet: it starts with its new replicas like a new partition
        current = self._assignment(tp)
        legacy = self._legacy_targets.get(tp)
        if legacy is not None and current.target != legacy:
            # the latest request wins: an API move or cancellation replaces the legacy one
            await self._legacy_reassignment_done(tp, None)
        unneeded = [r for r in previous.replicas if r not in current.replicas]
        log.info("partition %s-%d: replicas %s -> %s (adding %s, removing %s)", *tp,
                 previous.replicas, current.replicas, current.adding, current.removing)
        if current.reassigning and not self._caught_up(tp):
            await self._apply([tp], self._decide_replica_set)
            self._send_leader_and_isr(self._to_replicas([tp]), set())
            self._stop_replicas(tp, unneeded)
            self._send_update_metadata([tp])
        else:
            await self._complete_reassignment(tp, unneeded)

    async def _complete_reassignments(self, partitions: Iterable[TP]) -> None:
        """Complete the moves of ``partitions`` whose target replicas are all in the ISR
        (an ISR change; a new controller resuming what its predecessor left)."""
        for tp in sorted(partitions):
            if tp[0] in self._topics and tp[1] in self._topics[tp[0]].partitions and \
                    self._assignment(tp).reassigning and self._caught_up(tp):
                await self._complete_reassignment(tp, [])

    async def _complete_reassignment(self, tp: TP, unneeded: list[int]) -> None:
        """Kafka's steps B2-B8, the znode first: RS = TRS with nothing adding or removing
        written (on the version that holds this move: a newer request written meanwhile
        wins, and its watch event follows); then a leader from TRS (when the leader is not
        in it or not live) and the ISR without the removed replicas, leader epoch + 1, to
        every replica left; StopReplica with delete to the removed ones; the partition's
        entry of the legacy request dropped; UpdateMetadata to everyone. Kafka writes the
        znode last, but there only the controller writes it; here a cancellation written
        by another broker between the steps would revert to replicas already deleted. A
        controller that dies after the write leaves the leader or ISR outside the
        replicas, which its successor repairs (:meth:`_outside_replica_set`)."""
        moving = self._assignment(tp)
        done = moving.completed()
        if moving != done and not await self._write_assignment(tp, moving, done):
            return
        removed = list(dict.fromkeys([*unneeded, *moving.removing]))
        name, index = tp
        self._topics[name] = done.in_topic(self._topics[name], index)
        await self._apply([tp], self._decide_replica_set)
        self._send_leader_and_isr(self._to_replicas([tp]), set())
        self._stop_replicas(tp, removed)
        await self._legacy_reassignment_done(tp, done.replicas)
        self._send_update_metadata([tp])
        log.info("partition %s-%d: reassignment to %s complete (removed %s)", *tp,
                 done.replicas, removed)

    async def _decide_replica_set(self, tp: TP, state: PartitionState
                                  ) -> tuple[int, list[int]]:
        """Leader and ISR within the partition's replica set (just changed): the leader
        kept if it is in the set and live, else the first live replica of the set in the
        ISR (Kafka's reassignment election; live: not in a failed log directory either,
        nor shutting down);
        the ISR without replicas outside the set.
        Always a new leader epoch, which tells the replicas their new set."""
        replicas = self._replicas(tp)
        isr = [b for b in state.isr if b in replicas]
        leader = state.leader
        if leader not in replicas or not self._may_lead(tp, leader):
            candidates = [r for r in replicas if r in isr and self._may_lead(tp, r)]
            leader = candidates[0] if candidates else NO_LEADER
        return leader, isr or state.isr

    def _stop_replicas(self, tp: TP, brokers: list[int]) -> None:
        """StopReplica with delete: the replica's log goes (a broker not live keeps its
        copy, as in Kafka's ZooKeeper mode)."""
        for broker in brokers:
            self._send_stop_replica(broker, [tp], delete=True)

    async def _write_assignment(self, tp: TP, expected: ReplicaAssignment,
                                new: ReplicaAssignment) -> bool:
        """The partition's entry of its topic znode from ``expected`` to ``new``, behind
        the controller epoch; False, nothing written, when it is no longer ``expected``
        (a newer request: its watch event follows)."""
        name, index = tp
        for _ in range(BAD_VERSION_RETRIES):
            found = await asyncio.to_thread(self.store.versioned_topic, name)
            if found is None or index not in found[0].partitions or \
                    ReplicaAssignment.of(found[0], index) != expected:
                return False
            topic, version = found
            try:
                await asyncio.to_thread(self.store.write_topic, new.in_topic(topic, index),
                                        version, self._epoch_version)
                return True
            except BadVersionError:
                continue
        log.warning("partition %s-%d: topic znode kept changing; not written", *tp)
        return False

    def _moves_to_restart(self) -> list[TP]:
        """Moves not caught up, for a new controller to start again with a new leader
        epoch (Kafka's ``initializePartitionReassignments``): its predecessor may have
        died before telling the leader the whole replica set, and a leader learns a new
        set only with a new epoch."""
        return [tp for tp in self._states
                if self._assignment(tp).reassigning and not self._caught_up(tp)]

    def _outside_replica_set(self) -> list[TP]:
        """Partitions whose leader or ISR names a broker outside their replicas (a
        controller died between a completed move's znode write and its LeaderAndIsr)."""
        return [tp for tp, state in self._states.items()
                if any(b not in self._replicas(tp) for b in [*state.isr, state.leader]
                       if b != NO_LEADER)]

    async def _legacy_reassignment_changed(self, targets: dict[TP, list[int]]) -> None:
        self._legacy_targets = dict(targets)
        if self._active and targets:
            await self._start_legacy_reassignments(targets)

    async def _start_legacy_reassignments(self, targets: dict[TP, list[int]]) -> None:
        """``/admin/reassign_partitions``: each entry becomes the topic znode's
        reassignment (the same path as the API's from there on) unless it is under way
        already; entries naming no partition or unusable replicas, or already where they
        ask to be, are dropped from it (Kafka's controller drops them too)."""
        dropped: list[TP] = []
        for tp, replicas in sorted(targets.items()):
            topic = self._topics.get(tp[0])
            if topic is None or tp[1] not in topic.partitions or not replicas or \
                    len(set(replicas)) != len(replicas) or \
                    any(r not in self._live for r in replicas
                        if r not in self._assignment(tp).origin):
                log.warning("%s: cannot reassign %s-%d to %s; dropped", REASSIGN_PARTITIONS,
                            *tp, replicas)
                dropped.append(tp)
                continue
            current = self._assignment(tp)
            wanted = current.reassign_to(replicas)
            if not wanted.reassigning and not current.reassigning:
                dropped.append(tp)  # there already
            elif wanted != current:
                await self._write_assignment(tp, current, wanted)
        for tp in dropped:
            await self._legacy_reassignment_done(tp, None)

    async def _legacy_reassignment_done(self, tp: TP, replicas: list[int] | None) -> None:
        """Drop the partition's entry from ``/admin/reassign_partitions`` (if it asks for
        ``replicas``, or whatever it asks with None); the znode goes with its last entry."""
        if tp not in self._legacy_targets:
            return
        for _ in range(BAD_VERSION_RETRIES):
            found = await asyncio.to_thread(self.store.legacy_reassignment)
            if found is None:
                return
            targets, version = found
            if tp not in targets or (replicas is not None and targets[tp] != replicas):
                return
            del targets[tp]
            try:
                await asyncio.to_thread(self.store.set_legacy_reassignment, targets, version)
                self._legacy_targets = targets
                return
            except BadVersionError:
                continue

    # requests ----------------------------------------------------------------------------

    def _hosted_by(self, broker: int) -> list[TP]:
        return [tp for tp in self._states if broker in self._replicas(tp)]

    def _to_replicas(self, partitions: Iterable[TP]) -> dict[int, list[TP]]:
        targets: dict[int, list[TP]] = collections.defaultdict(list)
        for tp in partitions:
            for r in self._replicas(tp):
                if r in self._live:
                    targets[r].append(tp)
        return targets

    def _send(self, broker: int, api_key: int, body: ControlRequest) -> None:
        """``body`` to ``broker`` if live, addressed to its current registration."""
        sender = self._senders.get(broker)
        if sender is None:
            return  # not live: it gets the whole state when it registers
        request = body.copy()  # one body may go to several brokers
        request["broker_epoch"] = sender.info.epoch
        sender.put(api_key, request)

    def _send_stop_replica(self, broker: int, partitions: list[TP], delete: bool = False,
                           leader_epoch: int | None = None) -> None:
        """``broker`` stops fetching ``partitions`` (with ``delete``, deletes them too),
        each at its leader epoch, or ``leader_epoch`` (a deleted topic's -2)."""
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        for topic, index in sorted(partitions):
            by_topic[topic].append(index)
        if not by_topic:
            return
        request: StopReplicaRequest = {
            "controller_id": self.broker_id, "controller_epoch": self._epoch,
            "topic_states": [{"topic_name": name, "partition_states": [
                {"partition_index": p, "delete_partition": delete,
                 "leader_epoch": self._leader_epoch((name, p)) if leader_epoch is None
                 else leader_epoch} for p in indexes]}
                for name, indexes in by_topic.items()]}
        self._send(broker, STOP_REPLICA, request)

    def _leader_epoch(self, tp: TP) -> int:
        state = self._states.get(tp)
        return EPOCH_DURING_DELETE if state is None else state.leader_epoch

    def _send_leader_and_isr(self, targets: dict[int, list[TP]], new: set[TP],
                             kind: int = INCREMENTAL) -> None:
        for broker, partitions in targets.items():
            if not partitions and kind != FULL:
                continue
            by_topic: dict[str, list[LeaderAndIsrRequestPartitionState]] = \
                collections.defaultdict(list)
            leaders: set[int] = set()
            for tp in sorted(partitions):
                state = self._states[tp]
                leaders.add(state.leader)
                by_topic[tp[0]].append({
                    "partition_index": tp[1], "controller_epoch": state.controller_epoch,
                    "leader": state.leader, "leader_epoch": state.leader_epoch,
                    "isr": state.isr, "partition_epoch": state.zk_version,
                    "replicas": self._replicas(tp),
                    "adding_replicas": list(self._topics[tp[0]].adding.get(tp[1], ())),
                    "removing_replicas": list(self._topics[tp[0]].removing.get(tp[1], ())),
                    "is_new": tp in new})
            request: LeaderAndIsrRequest = {
                "controller_id": self.broker_id, "controller_epoch": self._epoch, "type": kind,
                "topic_states": [{"topic_name": name, "topic_id": self._topics[name].topic_id,
                                  "partition_states": states}
                                 for name, states in by_topic.items()],
                "live_leaders": [{"broker_id": b, "host_name": self._live[b].host,
                                  "port": self._live[b].port}
                                 for b in sorted(leaders) if b in self._live]}
            self._send(broker, LEADER_AND_ISR, request)

    def _send_update_metadata(self, partitions: Iterable[TP] | None,
                              deleted: Iterable[TopicAssignment] = ()) -> None:
        """UpdateMetadata to every live broker: the live brokers and the partitions named
        (None: all), ``deleted`` topics' partitions marked with leader -2."""
        by_topic: dict[str, list[UpdateMetadataRequestPartitionState]] = \
            collections.defaultdict(list)
        chosen = self._all_partitions() if partitions is None else partitions
        for tp in sorted(chosen):
            state = self._states.get(tp)
            if state is None or tp[0] not in self._topics:
                continue
            replicas = self._replicas(tp)
            by_topic[tp[0]].append({
                "partition_index": tp[1], "controller_epoch": state.controller_epoch,
                "leader": state.leader, "leader_epoch": state.leader_epoch, "isr": state.isr,
                "zk_version": state.zk_version, "replicas": replicas,
                "offline_replicas": [r for r in replicas if r not in self._serving(tp)]})
        topic_states: list[UpdateMetadataRequestTopicState] = [
            {"topic_name": name, "topic_id": self._topics[name].topic_id,
             "partition_states": states} for name, states in by_topic.items()]
        for topic in deleted:
            topic_states.append({"topic_name": topic.name, "topic_id": topic.topic_id,
                                 "partition_states": [
                {"partition_index": p, "controller_epoch": self._epoch,
                 "leader": DELETED_LEADER, "leader_epoch": EPOCH_DURING_DELETE, "isr": [],
                 "zk_version": 0, "replicas": replicas, "offline_replicas": []}
                for p, replicas in sorted(topic.partitions.items())]})
        live_brokers: list[UpdateMetadataRequestBroker] = [
            {"id": b, "rack": info.rack, "endpoints": [
                {"port": port, "host": host, "listener": name,
                 "security_protocol": PROTOCOL_IDS.get(protocol, 0)}
                for name, protocol, host, port in info.endpoints
            ] or [{"port": info.port, "host": info.host, "listener": PLAINTEXT,
                   "security_protocol": 0}]}
            for b, info in sorted(self._live.items())]
        request: UpdateMetadataRequest = {
            "controller_id": self.broker_id, "controller_epoch": self._epoch,
            "topic_states": topic_states, "live_brokers": live_brokers}
        for broker in list(self._senders):
            self._send(broker, UPDATE_METADATA, request)
