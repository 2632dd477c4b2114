"""Cluster mode: brokers coordinated through ZooKeeper (docs/REPLICATION.md).

- ``zk_store``: ``ClusterStore``, every ZooKeeper read and write, Kafka's znode layout
- ``zookeeper_server``: start a local ZooKeeper (Debian's package) for development and tests
- ``channel``: the pyzmq control channel between the controller and the brokers
- ``placement``: replica assignment, round-robin across brokers
- ``controller``: the ``Controller`` (election, leadership, failover, preferred leaders)
- ``metadata_cache``: what a broker knows of the cluster, for Metadata
- ``node``: a broker's membership of the cluster (``ClusterNode``)
- ``admin``: cluster-mode topic administration
"""
