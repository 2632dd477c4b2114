"""Admin clients are cached per broker within a test and dropped after it, so no client
outlives its broker (librdkafka would keep reconnecting to the closed port)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.admin.clients import admin


@pytest.fixture(autouse=True)
def _drop_admin_clients(broker_factory: object) -> Iterator[None]:
    # depends on broker_factory so that it is torn down first, before the brokers stop
    yield
    admin.cache_clear()
