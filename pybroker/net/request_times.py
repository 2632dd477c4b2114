"""How long requests take, per API: a Prometheus histogram with fixed buckets.

What is timed: from the moment the connection takes a request off its queue to hand it to
the dispatcher until its response is entirely in the socket (the last ``sendmsg`` or
sendfile/splice of it returned; a request answered with nothing, acks=0, until the handler
returned). For a client that waits for each answer that is from the request's arrival
(the frame is handed over in the callback that received it); a pipelined request's wait
behind earlier requests of its own connection is not included, unlike Kafka's
TotalTimeMs, which starts when the frame was read. A request that closes the connection
is not counted.

Cost on the hot path: ``observe`` is a ``bisect`` over ``BOUNDS`` (C, 5 comparisons), one
increment of a preallocated list's slot and one float addition; nothing is allocated but
the float sum. The connection takes the time anyway (its fairness slices), so the
request's start is one more ``time.monotonic()`` only where the worker takes a request.

Not thread-safe: the event loop thread only (the metrics snapshot reads it there too).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

# Upper bounds in seconds (Prometheus's ``le``), from a one-record produce on loopback
# (tens of microseconds) to a long-polling fetch (fetch.max.wait.ms, 500 ms by default)
# and a parked JoinGroup (a rebalance, up to minutes); the last bucket is +Inf.
BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Kafka's API keys are below this; a request naming another is refused before it is timed.
API_KEYS = 128
_WIDTH = len(BOUNDS) + 1


class RequestTimes:
    """Per API key: counts per bucket (not cumulative) and the sum of the times."""

    __slots__ = ("_counts", "_sums")

    def __init__(self) -> None:
        self._counts = [0] * (API_KEYS * _WIDTH)
        self._sums = [0.0] * API_KEYS

    def observe(self, api_key: int, seconds: float) -> None:
        if 0 <= api_key < API_KEYS:
            self._counts[api_key * _WIDTH + bisect_left(BOUNDS, seconds)] += 1
            self._sums[api_key] += seconds

    def histograms(self) -> list[tuple[int, list[int], float]]:
        """``(api_key, cumulative counts per bound and +Inf, sum)`` of each API timed."""
        out = []
        for key in range(API_KEYS):
            counts = self._counts[key * _WIDTH:(key + 1) * _WIDTH]
            if not any(counts):
                continue
            cumulative, total = [], 0
            for count in counts:
                total += count
                cumulative.append(total)
            out.append((key, cumulative, self._sums[key]))
        return out


def api_key_of(frame: Any) -> int:
    """A request frame's API key (the header's first field, a big-endian int16), as the
    frame claims it (the dispatcher checks it). ``frame``: a bytearray, or a large
    frame's ``FrameBuffer`` (read through a view, released at once: a buffer with views
    cannot go back to the pool)."""
    if len(frame) < 2:
        return -1
    if isinstance(frame, bytearray):
        return (frame[0] << 8) | frame[1]
    with memoryview(frame) as view:
        return (view[0] << 8) | view[1]
