"""Client quotas: Kafka's ``ClientQuotaManager`` (produce and fetch byte rates),
``ClientRequestQuotaManager`` (request time) and ``ConnectionQuotas``' per-IP connection
rate, with Kafka's entities, precedence and throttle: enforced by delay, never by an
error; and ``ControllerMutationQuotaManager`` (KIP-599), the one that refuses.

Entities. A quota is set on an entity: a user, a client id, both, or an IP address
(``connection_creation_rate``, KIP-612), each name either a real one or the default
(``None``, Kafka's ``<default>``). An ``Entity`` is its sorted ``(type, name)`` pairs.
Keys: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes a second, whole numbers),
``request_percentage`` and ``controller_mutation_rate`` (decimals) on users and client
ids; ``connection_creation_rate`` on IPs. Validation and messages are Kafka 4.1's
(``check_alteration``, ``check_filter``).

Precedence (Kafka's ``DefaultQuotaCallback``): for a connection of user ``u`` (its
principal's name, ``ANONYMOUS`` unauthenticated) and client id ``c`` the quota of a key is
the first of these entities that sets that key:

    user=u,client-id=c  user=u,client-id=<default>  user=u
    user=<default>,client-id=c  user=<default>,client-id=<default>  user=<default>
    client-id=c  client-id=<default>

The rate is measured per *metric entity*: the user and client id of the connection for the
components the matching entity has (a quota on ``client-id=<default>`` gives each client id
its own rate; one on ``user=alice`` is shared by all of alice's clients), as Kafka's
metric tags are.

Measurement and throttle (Kafka's ``Rate`` over ``SampledStat``): ``quota.window.num``
samples of ``quota.window.size.seconds``; the rate is the sum of the live samples over the
time since the oldest, counted as at least ``num - 1`` whole windows. A client whose
recorded value takes the rate past its quota is throttled for
``(rate - quota) / quota * window`` (how long until it is back under), at most one sample
window (Kafka's bound). Kafka's measure lets a client much faster than its
quota send about ``num - 1`` windows' worth at once and then little until that sample ages
out: over a short interval the rate of such a client swings around the quota; with fewer
samples it stays close.

Enforcement, as Kafka 2.0+ (KIP-219): the response goes out at once carrying
``throttle_time_ms``, and the connection is muted for that long (``Connection.throttle``:
not read, nothing more answered), so the client's next request waits whether or not it
honours the field itself. Produce records the request size after the append; a throttled
Fetch answers empty (no partitions: its bytes are not counted and the consumer asks again
for the same offsets), as Kafka does; a consumer's fetch is bounded by what its quota
allows in ``num - 1`` windows (Kafka's ``getMaxValueInQuotaWindow``). Other connections
are not touched: no sleep, no lock.

Request time (``request_percentage``): the time a request's handler runs on the event
loop (its steps, not its waits: ``StepTimer``) counts as a percentage of one thread, so 50
is half the loop's time; over it, the response reports the throttle time where the API
has the field (Produce and Fetch report their byte-rate throttle) and the connection is
muted. Followers' fetches and transaction markers are exempt, as Kafka exempts them.

Connections (KIP-612): a new connection that takes its address over the
``connection_creation_rate`` of its IP (else of the default IP) is not counted and is
closed after its throttle time, unread (``record_connection``, which the server asks); one
that takes the broker over ``max.connection.creation.rate`` (client listeners together,
not the inter-broker one) stops the server accepting for the throttle time and is itself
left unread that long (``record_accepted``), as Kafka's acceptor waits.

Controller mutations (KIP-599, ``controller_mutation_rate``, partitions a second): the
partitions that CreateTopics, CreatePartitions and DeleteTopics create or delete, per
topic, count against a token bucket (Kafka's ``TokenBucket``) of ``rate ×
controller.quota.window.num × controller.quota.window.size.seconds`` tokens, refilled at
the rate. Each topic takes its partitions when the control plane is asked, and gives them
back when the control plane then refuses it (a topic that exists, a bad config): as Kafka
counts only the topics that passed its checks. A ``MutationQuota`` is one request's view
(Kafka's ``Strict`` and ``PermissiveControllerMutationQuota``): for the versions that know
the error (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) a topic asked for
while the bucket is below zero is answered THROTTLING_QUOTA_EXCEEDED and not acted on,
and the one that takes it below zero still goes through; older versions are always acted
on. Either way the response carries the time until the bucket is back at zero
(``-tokens / rate``) as ``throttle_time_ms`` and the connection is muted that long. As
Kafka 4.1, ``validate_only`` requests count too.

Cost: with no quota of a kind set its flag (``active`` for byte rates, ``requests_active``,
``connections_active``) is False and the produce and fetch handlers, the dispatcher and
the server test only that; with quotas, a request costs a dict lookup (the resolved quota
of its user and client id is cached until the next change) and an O(samples) sum. Rates
of entities idle for an hour are forgotten (``expire_idle``, Kafka's sensor expiry).

Not kept here: where quotas are stored (the control plane's ``alter_client_quotas`` and
``follow_client_quotas``: a file on one node, ZooKeeper in a cluster).

Not thread-safe: the event loop's.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pybroker.config import LONG_MAX
from pybroker.errors import (
    InvalidRequestError,
    ThrottlingQuotaExceededError,
    UnsupportedVersionError,
)
from pybroker.sanitizer import desanitize, sanitize

log = logging.getLogger("pybroker.quotas")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# key -> whether it takes whole numbers only (Kafka's LONG/INT keys)
CLIENT_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True,
               REQUEST_PERCENTAGE: False, CONTROLLER_MUTATION_RATE: False}
IP_KEYS = {CONNECTION_CREATION_RATE: True}
_INT_MAX = 2**31 - 1
# an entity's rate unrecorded this long is forgotten (Kafka's quota sensors' expiry)
INACTIVE_SECONDS = 3600.0
# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]  # sorted (entity type, name; None: default)


def entity_of(components: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of a request's components; a type named twice keeps its last name, as
    Kafka's map of them does."""
    return tuple(sorted(dict(components).items()))


def entity_text(entity: Entity) -> str:
    """Kafka's ``ClientQuotaEntity`` as its messages print it."""
    names = ", ".join(f"{t}={name}" for t, name in entity)
    return f"ClientQuotaEntity(entries={{{names}}})"


def check_alteration(entity: Entity, ops: Iterable[tuple[str, float, bool]]
                     ) -> dict[str, float | None]:
    """The changes ``ops`` (key, value, remove) make to ``entity``'s quotas, key -> new
    value or None (removed); InvalidRequestError with Kafka 4.1's message otherwise."""
    if not entity:
        raise InvalidRequestError("Invalid empty client quota entity")
    types = {t for t, _ in entity}
    for entity_type, name in entity:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidRequestError(f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise InvalidRequestError(
                f"Empty {'user' if entity_type == USER else entity_type} not supported")
    if IP in types:
        if len(types) > 1:
            raise InvalidRequestError("Invalid quota entity combination, IP entity should"
                                      "not be combined with User or ClientId")
        name = entity[0][1]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise InvalidRequestError(
                    f"{name} is not a valid IP or resolvable host.") from None
    valid = IP_KEYS if IP in types else CLIENT_KEYS
    changes: dict[str, float | None] = {}
    for key, value, remove in ops:
        if key in changes:
            raise InvalidRequestError(f"Ignoring duplicate entity {entity_text(entity)}")
        whole = valid.get(key)
        if whole is None:
            raise InvalidRequestError(f"Invalid configuration key {key}")
        if remove:
            changes[key] = None
            continue
        if whole and value > LONG_MAX:
            raise InvalidRequestError(f"Proposed value for {key} is too large for a LONG.")
        if not value > 0:  # NaN too, which Kafka 4.1 takes (and no rate is ever over)
            raise InvalidRequestError(f"Quota {key} must be greater than 0")
        if whole and value != math.floor(value):
            raise InvalidRequestError(f"{key} cannot be a fractional value.")
        changes[key] = value
    return changes


# Kafka's ZooKeeper paths of quota entities (under /config), as the cluster keeps them
_PATH_KINDS = {USER: "users", CLIENT_ID: "clients", IP: "ips"}
_PATH_TYPES = {kind: t for t, kind in _PATH_KINDS.items()}
_DEFAULT_NAME = "<default>"


def _path_name(name: str | None) -> str:
    # sanitized, so "<default>" as a real name cannot be the default
    return _DEFAULT_NAME if name is None else sanitize(name)


def _entity_name(text: str) -> str | None:
    return None if text == _DEFAULT_NAME else desanitize(text)


def entity_path(entity: Entity) -> str:
    """``users/alice/clients/app``, ``clients/<default>``, ``ips/10.0.0.1``, ..."""
    names = dict(entity)
    if USER in names and CLIENT_ID in names:
        return f"users/{_path_name(names[USER])}/clients/{_path_name(names[CLIENT_ID])}"
    (entity_type, name), = entity
    return f"{_PATH_KINDS[entity_type]}/{_path_name(name)}"


def entity_from_path(path: str) -> Entity:
    parts = path.split("/")
    return entity_of((_PATH_TYPES[kind], _entity_name(name))
                     for kind, name in zip(parts[::2], parts[1::2], strict=True))


def stored_values(entity: Entity, configs: Mapping[str, str | float]) -> dict[str, float]:
    """The quotas of a stored entity (numbers, or text as Kafka's znodes hold them); an
    entity or a value that does not pass today's checks is dropped with a warning, never
    stops the broker."""
    values: dict[str, float] = {}
    for key, text in configs.items():
        try:
            value = float(text)
            check_alteration(entity, [(key, value, False)])
        except (ValueError, TypeError, InvalidRequestError) as exc:
            log.warning("ignoring the stored client quota %s=%s of %s: %s", key, text,
                        entity_text(entity), exc)
            continue
        values[key] = value
    return values


def stored_text(values: Mapping[str, float]) -> dict[str, str]:
    """Quota values as text, whole numbers without a fraction."""
    return {k: str(int(v)) if math.isfinite(v) and v == int(v) else repr(v)
            for k, v in values.items()}


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Iterable[FilterComponent]) -> None:
    """DescribeClientQuotas' filter as Kafka 4.1 checks it."""
    seen: set[str] = set()
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise UnsupportedVersionError(f"Unsupported entity type {c.entity_type}")
        if c.entity_type in seen:
            raise InvalidRequestError(f"Entity type {c.entity_type} cannot appear more than "
                                      "once in the filter.")
        seen.add(c.entity_type)
        if c.match_type == MATCH_EXACT and c.match is None:
            raise InvalidRequestError(
                "Request specified MATCH_TYPE_EXACT, but set match string to null.")
        if c.match_type == MATCH_DEFAULT and c.match is not None:
            raise InvalidRequestError(
                "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
        if c.match_type == MATCH_SPECIFIED and c.match is not None:
            raise InvalidRequestError(
                "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise InvalidRequestError(f"Unknown match type {c.match_type}")
    if IP in seen and len(seen) > 1:
        raise InvalidRequestError(
            "Invalid entity filter component combination. IP filter component should not "
            "be used with user or clientId filter component.")


def matches(entity: Entity, components: Iterable[FilterComponent], strict: bool) -> bool:
    """Kafka's filter: EXACT names the name, DEFAULT the default, SPECIFIED only asks for
    the component (the default included); ``strict``: no other components."""
    names = dict(entity)
    wanted = 0
    for c in components:
        wanted += 1
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or wanted == len(names)


def precedence(user: str, client_id: str) -> tuple[Entity, ...]:
    """The entities whose quota applies to ``user`` with ``client_id``, first wins."""
    return (((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)),
            ((USER, user),),
            ((CLIENT_ID, client_id), (USER, None)), ((CLIENT_ID, None), (USER, None)),
            ((USER, None),),
            ((CLIENT_ID, client_id),), ((CLIENT_ID, None),))


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat`` of ``samples`` windows of ``window`` seconds
    (the module doc); times are ``time.monotonic()`` seconds."""

    __slots__ = ("_samples", "_window", "_starts", "_values", "_current", "last")

    def __init__(self, samples: int, window: float, now: float) -> None:
        self._samples, self._window = samples, window
        self.last = now  # when a value was last recorded
        self._starts = [now] * samples
        self._values = [0.0] * samples
        self._current = 0

    def record(self, value: float, now: float) -> None:
        self.last = now
        if now - self._starts[self._current] >= self._window:
            self._current = (self._current + 1) % self._samples
            self._starts[self._current] = now
            self._values[self._current] = 0.0
        self._values[self._current] += value

    def measure(self, now: float) -> tuple[float, float]:
        """(rate per second, the window it was measured over in seconds)."""
        expired = self._samples * self._window
        starts, values = self._starts, self._values
        total, oldest = 0.0, now
        for i in range(self._samples):
            if now - starts[i] >= expired:  # Kafka resets an expired sample to now
                starts[i], values[i] = now, 0.0
            total += values[i]
            oldest = min(oldest, starts[i])
        elapsed = now - oldest
        full = int(elapsed // self._window)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._window
        # One sample (quota.window.num=1) measures from its first value: Kafka divides by
        # zero there, and its rate is infinite; so is ours, never an error.
        return (total / elapsed if elapsed > 0 else math.inf), elapsed


class TokenBucket:
    """Kafka's ``TokenBucket`` stat: ``tokens`` left (below zero: over the quota), refilled
    at the quota's rate up to its burst; times are ``time.monotonic()`` seconds."""

    __slots__ = ("tokens", "last")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens = burst
        self.last = now

    def refill(self, rate: float, burst: float, now: float) -> float:
        self.tokens = min(burst, self.tokens + rate * (now - self.last))
        self.last = now
        return self.tokens


class MutationQuota:
    """One request's controller mutation quota (the module doc): ``record`` each topic's
    partitions before asking the control plane, ``refund`` them when it refused the
    topic, and answer ``throttle_ms()``. Without a quota (``bucket`` None) it counts
    nothing."""

    __slots__ = ("_quotas", "_metric", "_rate", "_bucket", "strict", "_throttle_ms",
                 "_throttled_at")

    def __init__(self, quotas: ClientQuotas, metric: tuple[str, str, str], rate: float,
                 bucket: TokenBucket | None, strict: bool) -> None:
        self._quotas, self._metric, self._rate = quotas, metric, rate
        self._bucket, self.strict = bucket, strict
        self._throttle_ms, self._throttled_at = 0, 0.0

    def record(self, partitions: int) -> None:
        """Take ``partitions`` from the bucket; strict, raise ThrottlingQuotaExceededError
        (nothing taken) when it is already below zero. Mutating nothing (a topic that
        exists, a partition count that does not grow) is never refused: the control plane
        answers it with its own error, as Kafka checks those before the quota."""
        bucket = self._bucket
        if bucket is None or partitions <= 0:
            return
        now = time.monotonic()
        burst = self._quotas.mutation_burst(self._rate)
        tokens = bucket.refill(self._rate, burst, now)
        if self.strict and tokens < 0:
            self._throttled(tokens, now)
            raise ThrottlingQuotaExceededError("The throttling quota has been exceeded.")
        bucket.tokens = min(burst, tokens - partitions)
        if not self.strict and bucket.tokens < 0:
            self._throttled(bucket.tokens, now)

    def refund(self, partitions: int) -> None:
        """Give back what ``record`` took for a topic the control plane refused."""
        if self._bucket is not None:
            now = time.monotonic()
            burst = self._quotas.mutation_burst(self._rate)
            self._bucket.refill(self._rate, burst, now)
            self._bucket.tokens = min(burst, self._bucket.tokens + partitions)

    def _throttled(self, tokens: float, now: float) -> None:
        throttle = round(-tokens / self._rate * 1000)
        self._throttle_ms, self._throttled_at = throttle, now
        totals = self._quotas.throttle_ms
        totals[self._metric] = totals.get(self._metric, 0) + throttle

    def throttle_ms(self) -> int:
        """What is left of the last throttle time earned (Kafka's ``throttleTime``)."""
        if not self._throttle_ms:
            return 0
        elapsed_ms = (time.monotonic() - self._throttled_at) * 1000
        return max(0, round(self._throttle_ms - elapsed_ms))


class StepTimer:
    """Awaiting it awaits ``coro`` and adds up in ``seconds`` the time its steps ran,
    not the time it waited between them (a long poll's wait, a write's I/O)."""

    __slots__ = ("_coro", "seconds")

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, clock = self._coro, time.perf_counter
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = clock()
            try:
                step = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as done:
                return done.value
            finally:
                self.seconds += clock() - started
            try:
                sent, thrown = (yield step), None
            except BaseException as exc:  # a cancellation goes to the coroutine
                sent, thrown = None, exc


# the quota of one key for one connection: (bound, the metric entity's (user, client id))
Resolved = tuple[float, tuple[str, str]] | None


class ClientQuotas:
    """The quotas set, resolved per connection, and the rates measured against them."""

    def __init__(self, samples: int = 11, window_seconds: float = 1.0,
                 controller_samples: int = 11, controller_window_seconds: float = 1.0
                 ) -> None:
        for key, value in (("quota.window.num", samples),
                           ("quota.window.size.seconds", window_seconds),
                           ("controller.quota.window.num", controller_samples),
                           ("controller.quota.window.size.seconds", controller_window_seconds)):
            if value < 1:  # Kafka's bound too
                raise ValueError(f"{key} must be at least 1, not {value}")
        self._configs: dict[Entity, dict[str, float]] = {}
        self._resolved: dict[tuple[str, str, str], Resolved] = {}
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}
        self.samples, self.window = samples, window_seconds
        self.controller_samples, self.controller_window = \
            controller_samples, controller_window_seconds
        self.active = False  # a user or client-id byte-rate quota is set
        self.requests_active = False  # a request_percentage quota is set
        self.connections_active = False  # a connection_creation_rate quota is set
        self._creation_rate: float | None = None  # max.connection.creation.rate, if any
        self.throttle_ms: dict[tuple[str, str, str], int] = {}  # (key, user, client): total

    # the quotas set -----------------------------------------------------------------

    def entities(self) -> dict[Entity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._configs.items()}

    def set(self, entity: Entity, values: Mapping[str, float]) -> None:
        """Make ``values`` the whole quota set of ``entity`` (empty: none)."""
        if values:
            self._configs[entity] = dict(values)
        else:
            self._configs.pop(entity, None)
        self._resolved.clear()
        self.active = any(PRODUCER_BYTE_RATE in v or CONSUMER_BYTE_RATE in v
                          for v in self._configs.values())
        self.requests_active = any(REQUEST_PERCENTAGE in v for v in self._configs.values())
        self.connections_active = any(CONNECTION_CREATION_RATE in v
                                      for v in self._configs.values())

    def altered(self, entity: Entity, changes: Mapping[str, float | None]
                ) -> dict[str, float]:
        """``entity``'s quota set after ``changes`` (as ``check_alteration`` gives them)."""
        values = dict(self._configs.get(entity, {}))
        for key, value in changes.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        return values

    def describe(self, components: list[FilterComponent], strict: bool
                 ) -> list[tuple[Entity, dict[str, float]]]:
        return [(entity, dict(sorted(values.items())))
                for entity, values in self._configs.items()
                if matches(entity, components, strict)]

    # enforcement --------------------------------------------------------------------

    def resolve(self, key: str, user: str, client_id: str) -> Resolved:
        cached = (key, user, client_id)
        try:
            return self._resolved[cached]
        except KeyError:
            pass
        found: Resolved = None
        for entity in precedence(user, client_id):
            bound = self._configs.get(entity, {}).get(key)
            if bound is not None:
                types = {t for t, _ in entity}
                found = (bound, (user if USER in types else "",
                                 client_id if CLIENT_ID in types else ""))
                break
        self._resolved[cached] = found
        return found

    def window_bound(self, key: str, principal: str, client_id: str | None) -> float | None:
        """What the connection's quota of ``key`` allows in the measured windows but the
        current one (Kafka's ``getMaxValueInQuotaWindow``, which bounds a fetch), or None
        without a quota."""
        resolved = self.resolve(key, principal.partition(":")[2], client_id or "")
        return None if resolved is None else resolved[0] * (self.samples - 1) * self.window

    def expire_idle(self) -> None:
        """Forget the rates of entities idle for ``INACTIVE_SECONDS`` (Kafka's inactive
        sensor expiry), and the resolved quotas cached for connections: a default quota
        on client ids measures each client id apart, and client ids come and go."""
        expired_before = time.monotonic() - INACTIVE_SECONDS
        for metric in [m for m, rate in self._rates.items() if rate.last < expired_before]:
            del self._rates[metric]
            self.throttle_ms.pop(metric, None)
        for metric in [m for m, bucket in self._buckets.items()
                       if bucket.last < expired_before]:
            del self._buckets[metric]
            self.throttle_ms.pop(metric, None)
        self._resolved.clear()

    def measured(self) -> list[tuple[str, str, str, float, int]]:
        """(key, user, client id, rate now, throttle ms so far) of each metric entity:
        Kafka's per-entity ``byte-rate``/``request-time`` and ``throttle-time``."""
        now = time.monotonic()
        return [(key, user, client, rate.measure(now)[0],
                 self.throttle_ms.get((key, user, client), 0))
                for (key, user, client), rate in self._rates.items()]

    def record(self, key: str, principal: str, client_id: str | None, value: float,
               unrecord_if_throttled: bool = False) -> int:
        """Count ``value`` for the connection's metric entity of ``key``; the throttle
        time in ms it earns (0: under its quota, or none applies). With
        ``unrecord_if_throttled`` (a throttled Fetch answers empty) a throttled value is
        taken back."""
        resolved = self.resolve(key, principal.partition(":")[2], client_id or "")
        if resolved is None:
            return 0
        bound, (user, client) = resolved
        return self._record((key, user, client), bound, value, unrecord_if_throttled)

    def mutation_burst(self, rate: float) -> float:
        """Tokens a full controller mutation bucket holds at ``rate`` (Kafka's burst)."""
        return rate * self.controller_samples * self.controller_window

    def mutation_quota(self, principal: str, client_id: str | None,
                       strict: bool) -> MutationQuota:
        """The controller mutation quota of one request of the connection (the module
        doc); ``strict``: its version knows THROTTLING_QUOTA_EXCEEDED."""
        resolved = self.resolve(CONTROLLER_MUTATION_RATE, principal.partition(":")[2],
                                client_id or "")
        if resolved is None:
            return MutationQuota(self, ("", "", ""), 1.0, None, strict)
        rate, (user, client) = resolved
        metric = (CONTROLLER_MUTATION_RATE, user, client)
        bucket = self._buckets.get(metric)
        if bucket is None:
            bucket = self._buckets[metric] = TokenBucket(self.mutation_burst(rate),
                                                         time.monotonic())
        return MutationQuota(self, metric, rate, bucket, strict)

    def record_connection(self, ip: str) -> int:
        """A new connection from ``ip``: the ms to hold it before closing it when that
        takes the address over its ``connection_creation_rate`` (then not counted, as
        Kafka's ``ConnectionQuotas``), else 0. The address's own quota, else the default
        IP's; each address is measured apart."""
        if not self.connections_active:
            return 0
        bound = self._configs.get(((IP, ip),), {}).get(CONNECTION_CREATION_RATE) or \
            self._configs.get(((IP, None),), {}).get(CONNECTION_CREATION_RATE)
        if bound is None:
            return 0
        return self._record((CONNECTION_CREATION_RATE, ip, ""), bound, 1.0, True)

    def set_connection_creation_rate(self, rate: int) -> None:
        """The broker's ``max.connection.creation.rate`` (KIP-612; Kafka's default, the
        largest int, is none)."""
        self._creation_rate = None if rate >= _INT_MAX else float(rate)

    def record_accepted(self) -> int:
        """A connection accepted on a client listener: the ms to stop accepting (and to
        leave it unread) when that takes the broker over ``max.connection.creation.rate``,
        as Kafka's acceptor waits; else 0."""
        if self._creation_rate is None:
            return 0
        return self._record((CONNECTION_CREATION_RATE, "", ""), max(self._creation_rate, 1e-9),
                            1.0, False)

    def _record(self, metric: tuple[str, str, str], bound: float, value: float,
                unrecord_if_throttled: bool) -> int:
        now = time.monotonic()
        rate = self._rates.get(metric)
        if rate is None:
            rate = self._rates[metric] = Rate(self.samples, self.window, now)
        rate.record(value, now)
        observed, window = rate.measure(now)
        if observed <= bound:
            return 0
        longest = round(self.window * 1000)
        throttle = min(round((observed - bound) / bound * window * 1000), longest) \
            if math.isfinite(observed) else longest
        if throttle <= 0:
            return 0
        if unrecord_if_throttled:
            rate.record(-value, now)
        self.throttle_ms[metric] = self.throttle_ms.get(metric, 0) + throttle
        return throttle
