"""Producer id blocks shared by the cluster's brokers, in ZooKeeper (Kafka's
``ProducerIdManager`` of the ZooKeeper era): ``/latest_producer_id_block`` holds the last
block handed out, ``{"version":1,"broker":id,"block_start":"s","block_end":"e"}``; a
broker takes the next one with a write conditional on the znode's version, retrying when
another broker took one meanwhile. Ids are never handed out twice, a crash only skips
the rest of a block.
"""

from __future__ import annotations

import json
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

PATH = "/latest_producer_id_block"


def allocate_block(zk: Any, broker_id: int, size: int) -> int:
    """Reserve the next ``size`` producer ids for ``broker_id``; returns the first.
    ``zk``: a connected kazoo client. Blocking."""
    while True:
        try:
            data, stat = zk.get(PATH)
        except NoNodeError:
            try:
                zk.create(PATH, _block(broker_id, 0, size), makepath=True)
                return 0
            except NodeExistsError:
                continue
        start = int(json.loads(data)["block_end"]) + 1 if data else 0
        try:
            zk.set(PATH, _block(broker_id, start, size), version=stat.version)
            return start
        except BadVersionError:
            continue


def _block(broker_id: int, start: int, size: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                       "block_end": str(start + size - 1)}).encode()
