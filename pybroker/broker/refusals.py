"""One log line per client and API for the requests the broker refuses.

A refusal is a request the broker does not serve: an unknown API key, a version outside
what is served, a body that does not parse (each closes the connection), or a whole-request
error answer. A client that keeps sending the same refused request (a retry loop, a newer
client probing) would otherwise fill the log; the operator needs the first line, with the
client id and the reason, to know which client to look at.

A client is its client id and its host (not its port: a reconnecting client keeps its host
and id). The clients and APIs already reported are kept in an LRU of ``capacity`` entries,
so the memory is bounded whatever the clients send; a pair pushed out by many newer ones is
reported again when it comes back.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

log = logging.getLogger("pybroker.broker")

CAPACITY = 4096


class RefusalLog:
    __slots__ = ("capacity", "_reported")

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._reported: OrderedDict[tuple[str | None, str, int], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._reported)

    def refused(self, client_id: str | None, peer: str, api_key: int, api: str,
                reason: str) -> None:
        """Log the refusal at INFO unless this client was told about this API before."""
        key = (client_id, peer.rpartition(":")[0] or peer, api_key)
        if key in self._reported:
            self._reported.move_to_end(key)
            return
        self._reported[key] = None
        if len(self._reported) > self.capacity:
            self._reported.popitem(last=False)
        log.info("refused %s from client %r at %s: %s (logged once per client and API)",
                 api, client_id, peer, reason)
