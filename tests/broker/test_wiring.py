"""The broker's components are its own attributes, built by ``Broker.start``: nothing can be
attached to a broker from elsewhere, and the control plane is the one the settings ask for."""

from __future__ import annotations

import pytest

from pybroker.broker.broker import Broker
from pybroker.config import BrokerConfig
from pybroker.metadata.single_node import SingleNodeMetadata


def test_nothing_can_be_attached_to_a_broker(tmp_path):
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path)}))
    assert isinstance(broker.metadata, SingleNodeMetadata)  # no zookeeper.connect
    assert broker.validation_pool is None  # built by start()
    with pytest.raises(AttributeError):
        setattr(broker, "group_coordinator_of_a_handler", object())  # noqa: B010
