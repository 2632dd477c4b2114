"""Micro-benchmark helpers: a same-run baseline to report ratios against (shared machine)."""

from __future__ import annotations

import time

import pytest


@pytest.fixture
def best_seconds():
    """best_seconds(fn, *args, rounds=200): the fastest of `rounds` calls, in seconds."""

    def measure(fn, *args, rounds=200):
        best = float("inf")
        for _ in range(rounds):
            t = time.perf_counter()
            fn(*args)
            best = min(best, time.perf_counter() - t)
        return best

    return measure
