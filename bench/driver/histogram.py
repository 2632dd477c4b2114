"""Latency histograms: HdrHistogram (``hdrhistogram`` package) in microseconds.

Workers record into their own histogram and ship it encoded (HdrHistogram's compressed
base64 form) to the driver, which merges them; percentiles are read from the merge, never
averaged across workers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour: a stalled broker still lands inside the range
SIGNIFICANT_DIGITS = 3
_SUB_BUCKET_BITS = 11  # 3 significant digits -> 2048 sub-buckets, so 11 exact bits

PERCENTILES = (50.0, 99.0, 99.9)
CURVE = (0.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0)


def new() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_many(histogram: HdrHistogram, values_us: np.ndarray) -> None:
    """Record many values with one ``record_value`` per distinct histogram slot.

    ``record_value`` is Python code; calling it per message would cost more than consuming
    the message. Values are first rounded down to the histogram's own resolution (keep the
    top 11 bits), which lands each one in the slot it would have reached alone.
    """
    if values_us.size == 0:
        return
    values = np.clip(values_us.astype(np.int64), LOWEST_US, HIGHEST_US)
    bits = np.floor(np.log2(values)).astype(np.int64) + 1
    shift = np.maximum(bits - _SUB_BUCKET_BITS, 0)
    quantized = (values >> shift) << shift
    slots, counts = np.unique(quantized, return_counts=True)
    for value, count in zip(slots.tolist(), counts.tolist(), strict=True):
        histogram.record_value(value, count)


def encode(histogram: HdrHistogram) -> bytes:
    return histogram.encode()


def merge(encoded: list[bytes]) -> HdrHistogram:
    merged = new()
    for blob in encoded:
        if blob:
            merged.decode_and_add(blob)
    return merged


def summary(histogram: HdrHistogram) -> dict[str, Any]:
    """p50/p99/p99.9/max/mean in milliseconds, plus the percentile curve for the chart."""
    count = histogram.get_total_count()
    if count == 0:
        return {"count": 0, "p50": None, "p99": None, "p99.9": None, "max": None,
                "mean": None, "curve": []}
    out: dict[str, Any] = {"count": count}
    for p in PERCENTILES:
        out[f"p{p:g}"] = histogram.get_value_at_percentile(p) / 1000.0
    out["max"] = histogram.get_max_value() / 1000.0
    out["mean"] = round(histogram.get_mean_value() / 1000.0, 3)
    out["curve"] = [[p, histogram.get_value_at_percentile(p) / 1000.0] for p in CURVE[:-1]]
    out["curve"].append([100.0, out["max"]])
    return out
