"""The collector policy (pybroker.broker.collector): long-lived state frozen out of the
cyclic collector's walks, and cyclic garbage among it reclaimed once thawed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from pybroker.broker import collector


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    collector.thaw()
    gc.unfreeze()
    yield
    collector.thaw()
    gc.unfreeze()


def test_frozen_objects_are_left_out_of_collections_until_thawed() -> None:
    first, second = Node(), Node()
    first.other, second.other = second, first  # a cycle, garbage once dropped
    gone = weakref.ref(first)
    collector.freeze_long_lived()
    assert gc.get_freeze_count() > 0
    del first, second
    gc.collect()
    assert gone() is not None  # frozen: not reclaimed
    collector.thaw()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


def test_acyclic_frozen_objects_are_still_freed_by_reference_counting() -> None:
    node = Node()
    gone = weakref.ref(node)
    collector.freeze_long_lived()
    del node
    assert gone() is None


def test_thaw_if_due_thaws_only_after_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    collector.freeze_long_lived()
    collector.thaw_if_due()
    assert gc.get_freeze_count() > 0
    monkeypatch.setattr(collector, "THAW_INTERVAL_S", 0.0)
    collector.thaw_if_due()
    assert gc.get_freeze_count() == 0
