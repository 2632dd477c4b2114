"""Named listeners, with Kafka's keys: what the broker binds and what it tells clients.

``listeners=NAME://HOST:PORT,...`` names every socket the broker accepts on;
``listener.security.protocol.map`` (``NAME:PROTOCOL,...``, Kafka's default maps each
security protocol's name to itself) says what each one speaks; ``advertised.listeners``
(same form) is what clients are told to connect to, per listener name; the
inter-broker listener (``inter.broker.listener.name``, else the listener named after
``security.inter.broker.protocol``) is the one brokers use between themselves.

Kafka's rule for answers: a client is told every broker's endpoint *for the listener it
connected on* (Metadata, DescribeCluster, FindCoordinator, KIP-951 leader hints), so a
client on the SSL port never learns a plaintext address.

pybroker's differences, each for one reason:
- ``listen``/``--listen`` (``HOST:PORT``) is one PLAINTEXT listener named PLAINTEXT, as
  is a bare ``HOST:PORT`` entry anywhere a listener is expected: the settings of a single
  node before listeners existed keep working.
- A listener ``advertised.listeners`` does not name is advertised at its bound address
  (Kafka leaves it unpublished); a wildcard host is advertised as 127.0.0.1.
- A single node whose inter-broker listener is missing uses its first listener (it has
  no peer to talk to); in a cluster that is an error at start, as in Kafka.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pybroker.config import parse_address

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
# Kafka's SecurityProtocol ids (UpdateMetadata's endpoints carry them)
PROTOCOL_IDS = {PLAINTEXT: 0, SSL: 1, SASL_PLAINTEXT: 2, SASL_SSL: 3}
PROTOCOL_NAMES = {v: k for k, v in PROTOCOL_IDS.items()}
_WILDCARDS = ("", "0.0.0.0", "::")


class Listener(NamedTuple):
    name: str
    security_protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.security_protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)


# what a connection made without a listener (a test's) is on
DEFAULT_LISTENER = Listener(PLAINTEXT, PLAINTEXT, "", 0)


class Listeners(NamedTuple):
    """The listeners to bind, in configured order (the first is the one the start-up
    ``ready`` line names), and the inter-broker listener's name."""

    bind: list[Listener]
    inter_broker: str


def parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in PROTOCOL_IDS:
            raise ValueError(f"listener.security.protocol.map: not NAME:PROTOCOL with one of "
                             f"{', '.join(PROTOCOL_IDS)}: {item!r}")
        out[name.strip().upper()] = protocol
    return out


def parse_listener_list(text: str, protocols: dict[str, str], key: str) -> list[Listener]:
    """``NAME://HOST:PORT,...`` (a bare ``HOST:PORT`` is the PLAINTEXT listener)."""
    out: list[Listener] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name = item.split("://", 1)[0].upper() if "://" in item else PLAINTEXT
        if name not in protocols:
            raise ValueError(f"{key}: listener {name} has no security protocol in "
                             f"listener.security.protocol.map")
        if any(existing.name == name for existing in out):
            raise ValueError(f"{key}: listener {name} is named twice")
        out.append(Listener(name, protocols[name], *parse_address(item)))
    return out


def listeners_from(config: Any) -> Listeners:
    """The listeners of a broker's settings (``config``: a ``BrokerConfig``)."""
    protocols = parse_protocol_map(config["listener.security.protocol.map"])
    key = "listeners" if config["listeners"] else "listen"
    bind = parse_listener_list(config[key], protocols, key)
    if not bind:
        raise ValueError(f"{key}: no listener")
    names = [listener.name for listener in bind]
    inter_broker = config["inter.broker.listener.name"]
    if inter_broker and config.is_set("security.inter.broker.protocol"):
        raise ValueError("only one of inter.broker.listener.name and "
                         "security.inter.broker.protocol may be set")
    inter_broker = (inter_broker or config["security.inter.broker.protocol"]).upper()
    if inter_broker not in names:
        if config["zookeeper.connect"]:
            raise ValueError(f"the inter-broker listener {inter_broker} is not one of the "
                             f"listeners ({', '.join(names)})")
        inter_broker = names[0]
    return Listeners(bind, inter_broker)


def advertised_endpoints(config: Any, bound: dict[str, tuple[str, int]]
                         ) -> dict[str, tuple[str, int]]:
    """Listener name -> the (host, port) clients are told, from ``advertised.listeners``
    and the addresses ``bound`` (port 0 resolved)."""
    out = {name: ("127.0.0.1" if host in _WILDCARDS else host, port)
           for name, (host, port) in bound.items()}
    text = config["advertised.listeners"]
    if text:
        protocols = parse_protocol_map(config["listener.security.protocol.map"])
        for listener in parse_listener_list(text, protocols, "advertised.listeners"):
            if listener.name not in bound:
                raise ValueError(f"advertised.listeners: {listener.name} is not a listener")
            if listener.host in _WILDCARDS:
                raise ValueError(f"advertised.listeners: {listener.name} advertises the "
                                 f"wildcard address {listener.host!r}")
            out[listener.name] = (listener.host, listener.port)
    return out
