"""Request handlers, one module per API family, registered by API key.

A handler is ``async def handle(ctx: RequestContext, request: dict) -> dict | None``:
``request`` is the decoded body (snake_case keys, see ``pybroker.net.protocol.codec``), the
returned dict is encoded as the response of the same version, ``None`` sends nothing
(acks=0 produce). Annotate both with the generated types of ``pybroker.net.protocol.typed``
so mypy checks their keys; at run time a response key its struct has in no version raises
``UnknownFieldError``, and a field of the version that has no spec default left out
``MissingFieldError`` (bugs: logged, the connection closed). Register it with the
versions it serves::

    @handler(api_key=3, versions=(0, 12))
    async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse: ...

Every module of this package is imported by :func:`load_all`, so adding an API family is
adding one module here; nothing else changes. ApiVersions advertises what is registered.
A module that fails to import stops the broker's start with that module's error
(:class:`HandlerImportError`): a broker that came up without Produce, say, would answer
its clients' produce requests by closing their connections, a failure far from its cause.

The handler contract: what a handler may assume in its first step (the code up to its
first ``await`` that suspends).

- The broker is started: its components are built and running, and reached through its
  typed attributes (:class:`pybroker.broker.broker.Broker`): ``ctx.broker.metadata`` (the
  one :class:`pybroker.metadata.Metadata` interface, whichever control plane runs),
  ``topics``, ``producer_ids``, ``group_coordinator`` (started, its groups loaded or
  loading) and ``validation_pool`` (None with ``num.io.threads=0``). A handler never asks
  which mode the broker runs in and never attaches state to the broker; a component with
  a lifetime of its own is built by the broker (``Broker.start``), not by a handler.
- ``request`` is well formed for ``ctx.api_version``, which is within the registered
  versions (the dispatcher closed the connection otherwise).
- It runs on the event loop thread, possibly *outside any task*: the first step may run
  straight in the connection's receive callback (``Connection._serve_inline``), so it must
  not call ``asyncio.current_task()``, use ``asyncio.timeout`` or otherwise need a task
  before its first suspension (``asyncio.wait`` and awaiting futures work). A handler that
  finishes without suspending may be answered from there, with no task at all.
- The connection's earlier requests are answered, its later ones wait: requests of one
  connection are handled one at a time, in order. A handler parking a request on the
  client's behalf (long polls, group joins) awaits through ``ctx.park(future)``.
- ``ctx.frame`` stays valid until the handler returns; ``records`` views point into it.

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
import pkgutil
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from pybroker.broker.request import Encoded, RequestContext

__all__ = ["Encoded", "Handler", "HandlerImportError", "HANDLERS", "handler", "load_all"]

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


class HandlerImportError(RuntimeError):
    """A handler module failed to import: the broker does not start without it."""


def load_all() -> dict[int, Handler]:
    """Import every handler module of this package; the first that fails to import
    raises :class:`HandlerImportError` (chained to its error)."""
    for module in pkgutil.iter_modules(__path__):
        try:
            importlib.import_module(f"{__name__}.{module.name}")
        except Exception as exc:
            raise HandlerImportError(
                f"handler module {module.name} failed to import: {exc!r}") from exc
    return HANDLERS
