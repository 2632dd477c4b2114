"""Python's cyclic garbage collector and the broker's long-lived state.

A full collection walks every object the collector tracks. With thousands of partitions
(each a Partition, a Log, its segments, indexes and their files) one took 20-40 ms on
this project's machine: a stall of the event loop, so of every client. Creating topics in
bulk triggered several, because CPython collects its oldest generation each time that
generation has grown by a quarter (bench.hostile: create-topics, big-topic).

A topic's structures live until the topic is deleted, so once a slice of them is built
they are moved out of the collector's view (``gc.freeze``). Frozen objects are still
freed by reference counting; what freezing withholds is only cyclic garbage among them.
That is given back (``gc.unfreeze``) after a topic is deleted, and every
``THAW_INTERVAL_S`` for anything else that was frozen alongside (a connection open at
the time, since closed), so the next full collection reclaims it: one full walk per
deletion or interval instead of several per bulk creation.

Event loop only (no locking): the collector's generations are process-wide, and the
calls are cheap (``gc.freeze`` moves whole generation lists).
"""

from __future__ import annotations

import gc
import time

THAW_INTERVAL_S = 600.0

_frozen_since: float | None = None  # monotonic time of the first freeze since a thaw


def freeze_long_lived() -> None:
    """Everything the collector tracks now is long-lived (topics just loaded or
    created): keep it out of later collections."""
    global _frozen_since
    gc.freeze()
    if _frozen_since is None:
        _frozen_since = time.monotonic()


def thaw() -> None:
    """Give frozen objects back to the collector (a topic was deleted)."""
    global _frozen_since
    if _frozen_since is not None:
        gc.unfreeze()
        _frozen_since = None


def thaw_if_due() -> None:
    """Periodic: thaw what has been frozen for ``THAW_INTERVAL_S``."""
    if _frozen_since is not None and time.monotonic() - _frozen_since >= THAW_INTERVAL_S:
        thaw()
