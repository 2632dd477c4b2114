"""KIP-890 part 1, the server-side defence: before a partition leader writes the first
transactional batch of a producer's transaction, it asks the transaction coordinator
whether the partition is in that producer's open transaction (AddPartitionsToTxn with
``verify_only``), and refuses the batch when it is not. A batch that arrives after its
transaction was aborted (a producer that hung past its timeout, a late retry) would
otherwise open a transaction on the partition that no marker ever closes, holding the
last stable offset, and every read_committed consumer, back for good.

Only the first batch of a transaction on a partition is checked: once written, the
producer has an open transaction in the partition's producer state, which its marker
closes. As Kafka, coordinator errors a client could not act on become
NOT_ENOUGH_REPLICAS, which producers retry; a fenced producer (an older epoch than the
coordinator's) gets INVALID_PRODUCER_EPOCH, the error producers expect here (Kafka's
AddPartitionsToTxnManager maps PRODUCER_FENCED to it), and a partition not in the
transaction INVALID_TXN_STATE (Kafka's answer to transaction version 1 clients).
``transaction.partition.verification.enable=false`` turns the check off. A coordinator
on another broker is asked over the broker's connection to it (``ask_over``, the
``Peers`` the marker writer keeps).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pybroker.errors import ErrorCode, KafkaError
from pybroker.txn.state import TopicPartition

if TYPE_CHECKING:
    from pybroker.metadata import Endpoint
    from pybroker.repl.peer import Peers
    from pybroker.txn.coordinator import TxnCoordinator

# coordinator answers a producer retries: it is told NOT_ENOUGH_REPLICAS (Kafka's mapping)
_RETRIABLE = frozenset((ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.REQUEST_TIMED_OUT))

# ``ask_remote(coordinator, transactional_id, producer_id, producer_epoch, partition)``:
# AddPartitionsToTxn v4 verify_only to another broker, its answer for the partition
RemoteVerify = Callable[["Endpoint", str, int, int, TopicPartition], Awaitable[ErrorCode]]


ADD_PARTITIONS_TO_TXN, VERIFY_VERSION = 24, 4  # the batched version, with verify_only
VERIFY_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for its inter-broker requests


def ask_over(peers: Peers) -> RemoteVerify:
    """``ask_remote`` over the broker's connections to the others: AddPartitionsToTxn v4
    with ``verify_only`` to the coordinator, its answer for the partition (a connection
    that fails is COORDINATOR_NOT_AVAILABLE, which the producer retries)."""

    async def ask(coordinator: Endpoint, transactional_id: str, producer_id: int,
                  producer_epoch: int, partition: TopicPartition) -> ErrorCode:
        topic, index = partition
        body = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "verify_only": True,
            "topics": [{"name": topic, "partitions": [index]}]}]}
        try:
            response, _ = await peers.client(*coordinator).request(
                ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body, VERIFY_TIMEOUT_S)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        except (OSError, EOFError, KafkaError):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if response["error_code"]:
            return ErrorCode(response["error_code"])
        for result in response["results_by_transaction"]:
            for t in result["topic_results"]:
                for p in t["results_by_partition"]:
                    if (t["name"], p["partition_index"]) == partition:
                        return ErrorCode(p["partition_error_code"])
        return ErrorCode.UNKNOWN_SERVER_ERROR  # an answer that does not name it

    return ask


class PartitionVerifier:
    def __init__(self, broker_id: int, coordinator: TxnCoordinator,
                 find_coordinator: Callable[[str], Awaitable[Endpoint | None]],
                 ask_remote: RemoteVerify | None, enabled: bool = True) -> None:
        self._broker_id = broker_id
        self._coordinator = coordinator
        self._find_coordinator = find_coordinator
        self._ask_remote = ask_remote
        self.enabled = enabled

    async def verify(self, transactional_id: str | None, producer_id: int,
                     producer_epoch: int, partition: TopicPartition) -> ErrorCode:
        """NONE when the producer's open transaction has ``partition``, else the error
        the produce request gets for it."""
        if not transactional_id:
            return ErrorCode.INVALID_TXN_STATE  # a transactional batch needs its id
        coordinator = await self._find_coordinator(transactional_id)
        if coordinator is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif coordinator.broker_id == self._broker_id:
            error = self._coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, [partition])[partition]
        elif self._ask_remote is not None:
            error = await self._ask_remote(coordinator, transactional_id, producer_id,
                                           producer_epoch, partition)
        else:
            return ErrorCode.NONE  # no way to ask: as with verification off
        if error in _RETRIABLE:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        if error == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if error != ErrorCode.NONE:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE
