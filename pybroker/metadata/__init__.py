"""The metadata plane: the one interface (:class:`Metadata`) through which handlers, the
group coordinator and the broker's start-up ask about topics, partitions, configs,
leadership, coordinator placement and brokers, and through which topics are created,
deleted, grown and reconfigured.

Two implementations, chosen once at start-up by :func:`metadata_for`:

- :class:`~pybroker.metadata.single_node.SingleNodeMetadata` (no ``zookeeper.connect``):
  the embedded control plane of one broker, which is every broker, the controller and
  the leader of every partition; the ``TopicManager`` is its store.
- :class:`~pybroker.metadata.zk_cluster.ZkClusterMetadata` (``zookeeper.connect`` set):
  a member of a cluster whose state lives in ZooKeeper and whose controller talks to the
  brokers over the pyzmq control channel (``pybroker/cluster/``, docs/REPLICATION.md).

These two modules (with ``pybroker/cluster/`` behind the second) are the only code that
knows which mode the broker runs in; everything else asks the interface. As Kafka's
``MetadataSupport`` (ZkSupport / RaftSupport behind one interface): a handler never tests
a flag. The group coordinator they build is told by them which offsets partitions it
leads (all, at once; or as leadership moves) and given their ``InternalTopic``: where
``__consumer_offsets`` is and which of its partitions may be written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.metadata.interface import (
    CreatedTopic,
    CurrentLeader,
    DeletedTopic,
    Endpoint,
    LeadershipListener,
    Metadata,
    NewTopic,
    PartitionAssignment,
    RequestedTopic,
    TopicAnswer,
    missing_topic,
)

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker

__all__ = ["CreatedTopic", "CurrentLeader", "DeletedTopic", "Endpoint", "LeadershipListener", "Metadata",
           "NewTopic", "PartitionAssignment", "RequestedTopic", "TopicAnswer", "metadata_for",
           "missing_topic"]


def metadata_for(broker: Broker) -> Metadata:
    """The control plane ``broker``'s settings ask for (the ZooKeeper one imports kazoo and
    pyzmq, so a single node never loads them)."""
    if broker.config["zookeeper.connect"]:
        from pybroker.metadata.zk_cluster import ZkClusterMetadata

        return ZkClusterMetadata(broker)
    from pybroker.metadata.single_node import SingleNodeMetadata

    return SingleNodeMetadata(broker)
