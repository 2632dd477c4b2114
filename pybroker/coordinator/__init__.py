"""Consumer groups and committed offsets: the classic Kafka group coordinator.

``GroupCoordinator`` (coordinator.py) routes each request to one of its parts:
``Membership`` (membership.py: join, sync, heartbeat, leave, their timers), over the
``Group``/``Member`` state machine (group.py, member.py); ``CommittedOffsets``
(offsets.py: commit, fetch, delete, expire); ``OffsetsPartitions``
(offsets_partitions.py: the ``__consumer_offsets`` partitions led here, loaded and
unloaded as leadership moves). ``CoordinatorLog`` (offset_store.py) writes their records to
``__consumer_offsets`` in Kafka's layouts. The request handlers in
``pybroker/broker/handlers/groups.py`` translate wire dicts to the coordinator's methods.
"""

from pybroker.coordinator.config import CoordinatorConfig
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.group import Group, GroupState, OffsetAndMetadata
from pybroker.coordinator.membership import JoinResult, SyncResult
from pybroker.coordinator.offsets import OffsetCommit

__all__ = ["CoordinatorConfig", "Group", "GroupCoordinator", "GroupState", "JoinResult",
           "OffsetAndMetadata", "OffsetCommit", "SyncResult"]
