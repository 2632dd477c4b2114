"""Consumer groups and committed offsets: the classic Kafka group coordinator.

``GroupCoordinator`` (the protocol and its timers) over ``Group``/``Member`` (state) and
``OffsetStore`` (persistence in ``__consumer_offsets``). The request handlers in
``pybroker/broker/handlers/groups.py`` translate wire dicts to its methods.
"""

from pybroker.coordinator.group import Group, GroupState, OffsetAndMetadata
from pybroker.coordinator.group_coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    JoinResult,
    OffsetCommit,
    SyncResult,
)

__all__ = ["CoordinatorConfig", "Group", "GroupCoordinator", "GroupState", "JoinResult",
           "OffsetAndMetadata", "OffsetCommit", "SyncResult"]
