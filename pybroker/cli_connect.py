"""How the client commands reach a broker, and how they fail when they cannot.

Every client command (``topic``, ``group``, ``txn``, ``produce``, ``consume``, ``cluster
info|health``) takes the same options (``add_client_options``): ``--bootstrap``,
``--timeout SECONDS`` (default 10), ``-v/--verbose`` and ``--command-config FILE`` (Kafka's
tools' option: client properties, e.g. SASL and TLS, see ``command_config``), and builds
its librdkafka clients through one ``BrokerClients``, so they are configured alike:

- librdkafka's own log lines (one per failed connection attempt, several a second) are off
  (``log_level`` 0) unless ``-v``;
- its ``error_cb`` notes the last connection failure and when every broker went down;
- connection setup (TCP, then ApiVersions) is bounded by ``--timeout``.

A command's first request is ``BrokerClients.metadata``. It fails fast: when librdkafka
reports every broker down (a refused connection, an unknown host) and no answer comes in
``_DOWN_GRACE_S`` (time for the other addresses of a host, ``localhost`` being ``::1`` and
127.0.0.1), or when no answer comes within the timeout (a listener that never answers),
it raises ``CommandError``: ``pybroker: cannot reach broker HOST:PORT: connection
refused``, exit status 1. librdkafka serves ``error_cb`` only from ``poll``, never from a
blocking call such as ``list_topics``, so until a broker is up the metadata request is
asked in short calls with a ``poll`` between them. Once a broker has answered, a lost
connection is not fatal by itself (librdkafka reconnects; ``consume --follow`` outlives a
broker restart): requests end on their own timeouts.

No thread or callback of pybroker's holds a client, so a command's clients are destroyed
(their librdkafka threads joined) when the command returns or raises, before the process
exits: a client still alive at exit lets a broker thread (a TLS handshake, say) race
OpenSSL's ``atexit`` cleanup, which crashes the process with SIGSEGV.

Commands whose requests librdkafka does not offer (``txn``, ``quota``, ``partition
move``, ``cluster rebalance|drain``) speak through pybroker's own client,
``pybroker.client.Cluster``, opened by ``protocol_cluster`` with its security from the
same ``--command-config`` (:mod:`pybroker.client.security`): its first Metadata request
is tried once at each bootstrap server, and fails the same way.

What still escapes a command as an exception from the client (a ``KafkaException``, a
timeout, a socket error) is turned into one line by ``failure_text``, which ``cli.main``
calls for the commands ``add_client_options`` marked: a client command never ends with a
traceback. Errors the broker answers are the commands' own to print (one line per item,
with Kafka's error name).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pybroker.cli import CommandError
from pybroker.client.cluster import Cluster
from pybroker.client.security import client_security
from pybroker.errors import KafkaError
from pybroker.kafka_admin import error_text

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 10.0
# After librdkafka reports every broker down, this long for an answer before giving up:
# it retries a refused connection within ~100 ms, each time at the host's next address.
_DOWN_GRACE_S = 1.0
_POLL_S = 0.05
# librdkafka's local error codes meaning "no broker answered", not an answer.
_UNREACHABLE = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT"})
# "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused
# (after 0ms in state CONNECT)" -> "Connection refused"
_BROKER_PREFIX = re.compile(r"^\S+/\S+: ")
_CONNECT_FAILED = re.compile(r"^Connect to \S+ failed: ")
# (... or "(after 0ms in state CONNECT, 1 identical error(s) suppressed)")
_AFTER_SUFFIX = re.compile(r"\s*\(after \d+ms in state .*\)$")


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap``, ``--timeout`` and ``-v``; marks the command as a client command
    (``cli.main`` turns its client failures into one line)."""
    parser.add_argument("--bootstrap", "-b", metavar="HOST:PORT",
                        default=os.environ.get("PYBROKER_BOOTSTRAP", DEFAULT_BOOTSTRAP),
                        help="broker to connect to, or a comma-separated list (default "
                             f"$PYBROKER_BOOTSTRAP or {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        metavar="SECONDS", help="give up when the broker has not answered "
                        f"in this time (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="show the client library's log lines (connection attempts)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties (security.protocol, sasl.mechanism, "
                             "sasl.jaas.config, ssl.truststore.location, or librdkafka's "
                             "own keys), as Kafka's tools take them")
    parser.set_defaults(failure_text=failure_text)


def command_config(path: str | None) -> dict[str, str]:
    """librdkafka's settings from a Kafka client properties file: ``sasl.mechanism``,
    the ``username``/``password`` of ``sasl.jaas.config`` and a PEM
    ``ssl.truststore.location`` become librdkafka's ``sasl.mechanisms``,
    ``sasl.username``/``sasl.password`` and ``ssl.ca.location``; other keys pass as they
    are (librdkafka knows ``security.protocol`` and its own keys)."""
    if path is None:
        return {}
    from pybroker.config import read_properties
    from pybroker.security.jaas import JaasError, parse_jaas

    out: dict[str, str] = {}
    for key, value in read_properties(path).items():
        if key == "sasl.mechanism":
            out["sasl.mechanisms"] = value
        elif key == "sasl.jaas.config":
            try:
                options = parse_jaas(value).options
            except JaasError as exc:
                raise CommandError(f"{path}: {exc}") from None
            out.update({f"sasl.{k}": options[k] for k in ("username", "password")
                        if k in options})
        elif key == "ssl.truststore.location":
            out["ssl.ca.location"] = value
        elif key not in ("ssl.truststore.type", "ssl.keystore.type"):
            out[key] = value
    return out


def connection_failure(librdkafka_text: str) -> str:
    """librdkafka's text of a failed connection, without the broker name and the state:
    ``connection refused`` (an acronym keeps its case: ``SASL authentication error``)."""
    text = _AFTER_SUFFIX.sub("", _CONNECT_FAILED.sub("", _BROKER_PREFIX.sub("", librdkafka_text)))
    return text if text[1:2].isupper() else text[:1].lower() + text[1:]


def unreachable(bootstrap: str, reason: str) -> CommandError:
    which = "brokers" if "," in bootstrap else "broker"
    return CommandError(f"cannot reach {which} {bootstrap}: {reason}")


class _Reachability:
    """What the clients' ``error_cb`` said about reaching the brokers. The callback is this
    object's, not ``BrokerClients``': a client holding the object holding it would be a
    reference cycle, which keeps the client alive until a garbage collection, maybe past
    the process's exit (see the module docstring)."""

    def __init__(self) -> None:
        self.last_failure: str | None = None  # of a connection, as connection_failure says
        self.all_down_at: float | None = None

    def on_error(self, error: Any) -> None:
        if error.name() == "_ALL_BROKERS_DOWN":
            if self.all_down_at is None:
                self.all_down_at = time.monotonic()
        elif error.name() in ("_TRANSPORT", "_RESOLVE", "_AUTHENTICATION"):
            self.last_failure = connection_failure(error.str())


class BrokerClients:
    """The librdkafka clients of one command, configured alike, and what their error
    callbacks said about reaching the brokers."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.bootstrap: str = args.bootstrap
        self.timeout: float = args.timeout
        self.verbose: bool = args.verbose
        self.settings = command_config(getattr(args, "command_config", None))
        self.reachability = _Reachability()
        self._admin: Any = None

    def config(self, **settings: Any) -> dict[str, Any]:
        timeout_ms = max(1, int(self.timeout * 1000))
        return {"bootstrap.servers": self.bootstrap, "client.id": "pybroker-cli",
                "error_cb": self.reachability.on_error,
                "log_level": 6 if self.verbose else 0,
                "socket.connection.setup.timeout.ms": timeout_ms, **self.settings,
                **settings}

    def admin(self) -> Any:
        """The command's admin client (one per command)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            # asking about a topic must not create it (a producer's, and so an admin
            # client's, metadata requests may by default)
            self._admin = AdminClient(self.config(**{"allow.auto.create.topics": False}))
        return self._admin

    def producer(self, **settings: Any) -> Any:
        from confluent_kafka import Producer

        return Producer(self.config(**settings))

    def consumer(self, **settings: Any) -> Any:
        from confluent_kafka import Consumer

        return Consumer(self.config(**settings))

    def metadata(self, client: Any = None, topic: str | None = None) -> Any:
        """Metadata (of every topic, or of ``topic``) through ``client`` (the admin client or
        a producer; not a consumer, whose ``poll`` waits for its ``list_topics``), failing
        fast with ``CommandError`` when no broker can be reached."""
        client = self.admin() if client is None else client
        reachability = self.reachability
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                # librdkafka answers _TRANSPORT when no broker came up within the call's
                # timeout, and _TIMED_OUT when one did but its answer did not come
                return client.list_topics(topic, timeout=_POLL_S)
            except Exception as exc:
                if not _local_failure(exc):
                    raise
                if _error_name(exc) == "_TIMED_OUT":
                    break
            client.poll(0)  # serves error_cb
            now = time.monotonic()
            if reachability.all_down_at is not None and reachability.last_failure \
                    is not None and now - reachability.all_down_at > _DOWN_GRACE_S:
                raise unreachable(self.bootstrap, reachability.last_failure)
            if now > deadline:
                raise self.no_answer()
        # a broker is up: its answer may take the rest of the timeout
        try:
            return client.list_topics(topic, timeout=max(_POLL_S, deadline - time.monotonic()))
        except Exception as exc:
            if _local_failure(exc):
                raise self.no_answer() from None
            raise

    def no_answer(self) -> CommandError:
        reason = f"no answer within {self.timeout:g} s"
        if self.reachability.last_failure is not None:
            reason += f" (last: {self.reachability.last_failure})"
        return unreachable(self.bootstrap, reason)


def _error_name(exc: BaseException) -> str | None:
    """The name of the librdkafka error a client exception carries (``_TRANSPORT``)."""
    error: Any = exc.args[0] if exc.args else None
    return error.name() if hasattr(error, "name") else None


def _local_failure(exc: BaseException) -> bool:
    """A client exception saying no broker answered (not an error a broker answered)."""
    return _error_name(exc) in _UNREACHABLE


def failure_text(exc: Exception, args: argparse.Namespace) -> str | None:
    """One line for a client command's failure, or None for what is not a client failure
    (a bug: its traceback helps)."""
    if isinstance(exc, TimeoutError):  # a future's result() or a socket's timeout
        return str(unreachable(args.bootstrap, f"no answer within {args.timeout:g} s"))
    if isinstance(exc, OSError):
        return str(exc)
    error: Any = exc.args[0] if exc.args else None
    if type(exc).__name__ != "KafkaException" or not hasattr(error, "name"):
        return None
    if _local_failure(exc):
        return str(unreachable(args.bootstrap, connection_failure(error.str())))
    return error_text(exc)


def report_each(futures: Mapping[Any, Any], timeout: float, done: Callable[[Any], str],
                name: Callable[[Any], str] = str) -> int:
    """Wait for an admin call's futures, one per item: ``done(item)`` on stdout for each
    that succeeded, ``name(item): error`` on stderr for each that failed; 1 if any
    failed."""
    status = 0
    for item, future in futures.items():
        try:
            future.result(timeout=timeout)
            print(done(item))
        except Exception as exc:  # the client raises KafkaException carrying the error
            print(f"{name(item)}: {error_text(exc)}", file=sys.stderr)
            status = 1
    return status


@contextmanager
def protocol_cluster(args: argparse.Namespace, client_id: str) -> Iterator[Cluster]:
    """A client for one command, each request bounded by ``--timeout``. Its first request
    is tried once at each bootstrap server: none answering ends the command at once. A
    broker that refused or dropped a request (one that does not know an API closes the
    connection) ends it too; each with one line on stderr and status 1."""
    try:
        security = client_security(command_config(args.command_config))
    except (ValueError, OSError) as exc:  # a setting it cannot follow, a store unreadable
        raise CommandError(f"{args.command_config}: {exc}") from None
    cluster = Cluster(args.bootstrap, client_id, timeout=args.timeout, security=security)
    try:
        try:
            cluster.refresh(attempts=1)
        except OSError as exc:
            raise unreachable(args.bootstrap, socket_failure(exc, args.timeout)) from None
        yield cluster
    except KafkaError as exc:
        raise CommandError(f"{exc}: {exc.code.name}") from None
    except TimeoutError:
        raise CommandError(f"no answer from the broker within {args.timeout:g} s") from None
    except OSError as exc:
        raise CommandError(f"{exc} (does the broker support the request?)") from None
    finally:
        cluster.close()


def socket_failure(exc: OSError, timeout: float) -> str:
    """``connection refused``, ``no answer within 10 s``: why no broker answered."""
    cause = exc.__cause__ or exc.__context__ or exc
    if isinstance(cause, TimeoutError):
        return f"no answer within {timeout:g} s"
    text = getattr(cause, "strerror", None) or str(cause)
    return text[:1].lower() + text[1:]
