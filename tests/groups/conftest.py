"""Fixtures of the consumer group tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.groups.helpers import Consumers


@pytest.fixture
def consumers(request: Any, tmp_path: Any) -> Iterator[Any]:
    """Start consumer processes against a broker: ``consumers(broker).start(...)``."""
    started: list[Consumers] = []

    def make(broker: Any) -> Consumers:
        group = Consumers(broker.bootstrap, str(tmp_path))
        started.append(group)
        return group

    yield make
    for group in started:
        group.stop_all()
