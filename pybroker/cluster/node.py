"""A broker's membership of a cluster: everything cluster mode adds to one broker process.

Start order (the listener is already bound, so the registration names a port that
answers): connect to ZooKeeper and agree on the cluster id (before the logs load, so
``meta.properties`` gets ZooKeeper's), then open the control channel, register in
``/brokers/ids`` (the znode's creation id is this registration's broker epoch), and enter
the controller election. Stop: leave the election, stop the fetchers, close the channel,
close the ZooKeeper session, which removes the registration at once (the controller
moves leadership away; a SIGKILLed broker's goes when its session times out). Before
that, while the broker still serves, its controlled shutdown has handed its leaderships
to other in-sync replicas (``cluster.controlled_shutdown``), so the session's end takes
nothing offline that another replica could lead.

A session ZooKeeper expired (a broker paused or cut off longer than
zookeeper.session.timeout.ms) loses the registration with it: when kazoo reconnects
with a new session, the broker registers again, with a new broker epoch, and the
controller sends it the state it must follow, requests for its old epoch being refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pybroker.broker.quotas import entity_from_path, entity_path, stored_text, stored_values
from pybroker.cluster import admin
from pybroker.cluster.controlled_shutdown import (
    CONTROLLED_SHUTDOWN,
    controlled_shutdown,
    serve_controlled_shutdown,
)
from pybroker.cluster.metadata_cache import MetadataCache
from pybroker.cluster.zk_store import QUOTA_KINDS
from pybroker.config import parse_address
from pybroker.net.listeners import listeners_from

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker
    from pybroker.broker.dynamic_config import DynamicBrokerConfig
    from pybroker.broker.quotas import ClientQuotas, Entity
    from pybroker.cluster.channel import ControlServer
    from pybroker.cluster.controller import Controller

log = logging.getLogger("pybroker.cluster")

# The requests other brokers hand to this broker's controller over the control channel.
CONTROLLER_REQUESTS: dict[int, Callable[[Controller | None, Any], Awaitable[Any]]] = {
    admin.ELECT_LEADERS: admin.serve_elect_leaders,
    CONTROLLED_SHUTDOWN: serve_controlled_shutdown,
}


class ClusterNode:
    def __init__(self, broker: Broker) -> None:
        from pybroker.cluster.zk_store import ClusterStore
        from pybroker.repl.fetcher import ReplicaFetcherManager
        from pybroker.repl.replica_manager import ReplicaManager

        self.broker = broker
        config = broker.config
        self.config = config
        self.store = ClusterStore(config["zookeeper.connect"],
                                  config["zookeeper.session.timeout.ms"],
                                  config["zookeeper.connection.timeout.ms"])
        self.metadata = MetadataCache(broker.broker_id)
        self.fetchers = ReplicaFetcherManager(broker, config)
        self.replicas = ReplicaManager(broker, self.store, self.fetchers, self.metadata)
        self.controller: Controller | None = None
        self.control: ControlServer | None = None
        self.control_address = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_lost = False
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()

    async def connect(self, proposed_cluster_id: str) -> str:
        """Connect to ZooKeeper; returns the cluster id (``proposed`` if it had none)."""
        self._loop = asyncio.get_running_loop()
        log.info("connecting to ZooKeeper at %s", self.config["zookeeper.connect"])
        await asyncio.to_thread(self.store.start)
        self.store.add_state_listener(self._on_session_state)
        return await asyncio.to_thread(self.store.cluster_id, proposed_cluster_id)

    async def start(self) -> None:
        from pybroker.cluster.channel import ControlClient, ControlServer
        from pybroker.cluster.controller import Controller

        self.metadata.inter_broker_listener = self.broker.inter_broker_listener
        listen_host = self.broker.advertised[0]
        host, port = (parse_address(self.config["control.listener"])
                      if self.config["control.listener"] else (listen_host, 0))
        self.control = ControlServer(host, port, self._serve_control)
        bound = self.control.start()
        # a wildcard bind is published as the advertised host: other hosts must reach it
        published = listen_host if bound[0] in ("", "0.0.0.0", "::") else bound[0]
        self.control_address = f"{published}:{bound[1]}"
        self.replicas.start()
        await self._register()
        loop = asyncio.get_running_loop()
        def configs_changed(names: list[str]) -> None:  # kazoo's thread
            loop.call_soon_threadsafe(self._spawn, self._apply_configs(names))

        self.store.watch_config_changes(configs_changed)
        self.controller = Controller(
            self.broker.broker_id, self.store, self.config,
            lambda info: ControlClient(info.broker_id, info.control))
        await self.controller.start()

    async def _serve_control(self, api_key: int, api_version: int, body: dict) -> dict:
        """The control channel's requests: the controller's, for this broker's replicas,
        and those other brokers hand to the controller here (``CONTROLLER_REQUESTS``)."""
        serve = CONTROLLER_REQUESTS.get(api_key)
        if serve is not None:
            return dict(await serve(self.controller, body))
        return await self.replicas.handle(api_key, api_version, body)

    async def controlled_shutdown(self) -> None:
        """The first step of this broker's shutdown, while it still serves: no ISR
        shrinks from now on (its followers stop fetching because it stops), and with
        ``controlled.shutdown.enable`` its leaderships go to other in-sync replicas."""
        self.replicas.begin_shutdown()
        if self.control is not None and self.config["controlled.shutdown.enable"]:
            await controlled_shutdown(self)

    def producer_id_block(self, size: int) -> int:
        """The first id of a new block of producer ids (blocking: a worker thread's)."""
        from pybroker.cluster.producer_id_blocks import allocate_block

        return allocate_block(self.store.client, self.broker.broker_id, size)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def follow_broker_configs(self, dynamic: DynamicBrokerConfig) -> None:
        """Load the dynamic configs of this broker and of the cluster's default from
        ZooKeeper, then apply each change of their znodes on the loop."""
        loop = asyncio.get_running_loop()
        for entity in dynamic.entities:
            dynamic.load(entity, await asyncio.to_thread(self.store.broker_configs, entity))

            def changed(configs: dict[str, str], entity: str = entity) -> None:  # kazoo's
                loop.call_soon_threadsafe(dynamic.load, entity, configs)
            await asyncio.to_thread(self.store.watch_broker_configs, entity, changed)

    async def follow_client_quotas(self, quotas: ClientQuotas) -> None:
        """Load the client quotas from ZooKeeper, then apply each change announced in
        ``/config/changes`` on the loop."""
        loop = asyncio.get_running_loop()
        for path, configs in (await asyncio.to_thread(self.store.client_quotas)).items():
            entity = entity_from_path(path)
            quotas.set(entity, stored_values(entity, configs))

        def changed(paths: list[str]) -> None:  # kazoo's thread
            loop.call_soon_threadsafe(self._spawn, self._apply_quotas(quotas, paths))
        await asyncio.to_thread(self.store.watch_config_changes, changed, QUOTA_KINDS)

    async def _apply_quotas(self, quotas: ClientQuotas, paths: list[str]) -> None:
        for path in paths:
            try:
                entity = entity_from_path(path)
            except (KeyError, ValueError):
                log.warning("ignoring the change of an unknown quota entity %s", path)
                continue
            configs = await asyncio.to_thread(self.store.client_quota, path)
            quotas.set(entity, stored_values(entity, configs))

    async def write_client_quota(self, entity: Entity, values: dict[str, float]) -> None:
        await asyncio.to_thread(self.store.set_client_quota, entity_path(entity),
                                stored_text(values))

    async def write_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        await asyncio.to_thread(self.store.set_broker_configs, entity, configs)

    async def read_topic_configs(self, name: str) -> dict[str, str]:
        return await asyncio.to_thread(self.store.topic_configs, name)

    async def write_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        """Write a topic's new overrides to ZooKeeper, with the change notification every
        broker holding the topic applies."""
        await asyncio.to_thread(self.store.set_topic_configs, name, overrides)

    async def _apply_configs(self, names: list[str]) -> None:
        topics = self.broker.topics
        for name in names:
            topic = topics.get(name)
            if topic is None:
                continue
            try:
                overrides = await asyncio.to_thread(self.store.topic_configs, name)
                if overrides != topic.overrides:
                    topics.alter_configs(name, overrides)
                    log.info("topic %s: configs now %s", name, overrides)
            except Exception:
                log.exception("applying the configs of topic %s", name)

    async def _register(self) -> None:
        broker = self.broker
        host, port = broker.advertised
        protocols = {listener.name: listener.security_protocol
                     for listener in listeners_from(self.config).bind}
        endpoints = [(name, protocols[name], *address)
                     for name, address in broker.listener_endpoints.items()]
        epoch = await asyncio.to_thread(self.store.register_broker, broker.broker_id,
                                        host, port, self.control_address, endpoints,
                                        self.config["broker.rack"])
        self.replicas.broker_epoch = epoch
        log.info("registered as broker %d (%s:%d, control %s), broker epoch %d",
                 self.broker.broker_id, host, port, self.control_address, epoch)

    def _on_session_state(self, state: str) -> None:
        """kazoo's thread: a lost session is registered again once reconnected."""
        if state == "LOST":
            self._session_lost = True
            log.warning("ZooKeeper session lost: this broker's registration is gone")
        elif state == "CONNECTED" and self._session_lost and not self._stopping:
            self._session_lost = False
            loop = self._loop
            if loop is not None:
                loop.call_soon_threadsafe(lambda: loop.create_task(self._register_again()))

    async def _register_again(self) -> None:
        try:
            await self._register()
        except Exception:
            log.exception("registering again after a lost ZooKeeper session failed")

    async def stop(self) -> None:
        self._stopping = True
        await _quietly(self.fetchers.close(), "replica fetchers")
        if self.controller is not None:
            await _quietly(self.controller.stop(), "controller")
        await _quietly(self.replicas.stop(), "replica manager")
        if self.control is not None:
            await _quietly(self.control.close(), "control channel")
        await _quietly(asyncio.to_thread(self.store.stop), "ZooKeeper session")


STOP_STEP_TIMEOUT_S = 5.0  # a stuck step (an unreachable ZooKeeper) must not hang shutdown


async def _quietly(awaitable: Any, what: str) -> None:
    try:
        async with asyncio.timeout(STOP_STEP_TIMEOUT_S):
            await awaitable
    except TimeoutError:
        log.error("stopping the %s took over %.0f s; going on", what, STOP_STEP_TIMEOUT_S)
    except Exception:
        log.exception("stopping the %s failed", what)
