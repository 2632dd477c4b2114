"""Request handlers, one module per API family, registered by API key.

A handler is ``async def handle(ctx: RequestContext, request: dict) -> dict | None``:
``request`` is the decoded body (snake_case keys, see ``pybroker.net.protocol.codec``), the
returned dict is encoded as the response of the same version, ``None`` sends nothing
(acks=0 produce). Annotate both with the generated types of ``pybroker.net.protocol.typed``
so mypy checks their keys; at run time a response key its struct has in no version raises
``UnknownFieldError`` (a bug: logged, the connection closed). Register it with the versions
it serves::

    @handler(api_key=3, versions=(0, 12))
    async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse: ...

Every module of this package is imported by :func:`load_all`, so adding an API family is
adding one module here; nothing else changes. ApiVersions advertises what is registered.
A module that fails to import is logged and left out; the broker serves the rest.

A family with state to set up or tear down decorates ``async def f(broker)`` with
:func:`on_start` (run after the topics are loaded, before the port opens) or
:func:`on_stop` (run after in-flight requests are answered, before the logs close).

A handler on a hot path may bring its own ``decode(frame, body_offset, version)`` (the
Cython parsers of ``pybroker._native.wire``) and return an :class:`Encoded` response it
built itself (the Fetch builder, with file regions for sendfile).

``KafkaError`` raised by a handler becomes its ``code`` in the response's top-level
``error_code`` (APIs without one close the connection, after a log line); any other
exception is a bug: logged, answered with UNKNOWN_SERVER_ERROR the same way. Handlers of
per-partition APIs catch per partition so one bad partition does not fail the rest.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from pybroker.broker.request import Encoded, RequestContext

__all__ = ["Encoded", "Handler", "HANDLERS", "handler", "load_all", "on_start", "on_stop"]

log = logging.getLogger("pybroker.broker")

HandlerFn = Callable[[RequestContext, Any], Awaitable[Any]]
DecodeFn = Callable[[Any, int, int], Any]


class Handler(NamedTuple):
    api_key: int
    versions: tuple[int, int]
    fn: HandlerFn
    decode: DecodeFn | None = None


HANDLERS: dict[int, Handler] = {}


def handler(api_key: int, versions: tuple[int, int],
            decode: DecodeFn | None = None) -> Callable[[HandlerFn], HandlerFn]:
    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in HANDLERS and HANDLERS[api_key].fn is not fn:
            raise RuntimeError(f"two handlers for api key {api_key}")
        HANDLERS[api_key] = Handler(api_key, versions, fn, decode)
        return fn
    return register


Hook = Callable[[Any], Awaitable[Any]]
STARTUP: list[Hook] = []
SHUTDOWN: list[Hook] = []


def on_start(fn: Hook) -> Hook:
    STARTUP.append(fn)
    return fn


def on_stop(fn: Hook) -> Hook:
    SHUTDOWN.append(fn)
    return fn


def load_all() -> dict[int, Handler]:
    for module in pkgutil.iter_modules(__path__):
        try:
            importlib.import_module(f"{__name__}.{module.name}")
        except Exception:
            log.exception("handler module %s failed to import; its APIs are not served",
                          module.name)
    return HANDLERS
