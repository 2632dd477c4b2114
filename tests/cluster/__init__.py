"""Cluster mode tests: ZooKeeper access, the control channel, placement and real clusters."""
