"""The broker's opt-in HTTP listener, ``metrics.listener=HOST:PORT``: ``GET /metrics`` for
Prometheus (:mod:`pybroker.broker.metrics`) and the web console at every other path
(:mod:`pybroker.console`).

Threads: a stdlib ``ThreadingHTTPServer`` on its own daemon thread, one thread per
request, so a slow scraper or a console page waiting for the cluster never holds the
event loop. No handler reads the broker's state itself: ``/metrics`` asks the loop,
through ``call_soon_threadsafe``, for a snapshot (``metrics.samples``: plain tuples of
numbers), waits for it at most ``SNAPSHOT_TIMEOUT_S`` (else 503) and formats the text on
its own thread; the console is a Kafka client of the cluster, through one of the
broker's listeners, like any other (:mod:`pybroker.console`).

Handlers are plain functions of a parsed ``Request`` to a ``Response``; one that raises
is logged and answered 500 with no detail, and the broker goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.message
import http.server
import logging
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pybroker.broker.metrics import CONTENT_TYPE, Family, render, samples

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker

log = logging.getLogger("pybroker.http")

SNAPSHOT_TIMEOUT_S = 5.0
# how often the HTTP thread looks for shutdown: at most this long added to the broker's
POLL_INTERVAL_S = 0.1
# a console form is a few fields: a larger body is refused unread
MAX_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class Request:
    method: str  # GET or POST
    path: str  # without the query
    query: dict[str, str]  # the first value of each parameter
    form: dict[str, str]  # a POST's application/x-www-form-urlencoded body
    headers: email.message.Message  # case-insensitive .get


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response]


class HttpListener:
    """Serves ``routes`` (exact paths) and ``fallback`` (every other path) on its own
    thread; ``start`` on the loop, ``stop`` at shutdown (off the loop: it waits for the
    thread)."""

    def __init__(self, host: str, port: int, routes: dict[str, Handler],
                 fallback: Handler) -> None:
        self._routes = routes
        self._fallback = fallback
        self._http = http.server.ThreadingHTTPServer((host, port), self._handler_class())
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever,
                                        args=(POLL_INTERVAL_S,), name="http-listener",
                                        daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._http.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def respond(self, request: Request) -> Response:
        handler = self._routes.get(request.path, self._fallback)
        try:
            return handler(request)
        except Exception:
            log.exception("http %s %s failed", request.method, request.path)
            return Response(500, b"internal error (see the broker's log)\n",
                            "text/plain; charset=utf-8")

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        listener = self

        class RequestHandler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self._serve("GET", {})

            def do_POST(self) -> None:  # noqa: N802
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY_BYTES:
                    self.send_error(413 if length > 0 else 400)
                    return
                body = self.rfile.read(length).decode("utf-8", errors="replace")
                self._serve("POST", dict(urllib.parse.parse_qsl(body)))

            def _serve(self, method: str, form: dict[str, str]) -> None:
                url = urllib.parse.urlsplit(self.path)
                request = Request(method, url.path,
                                  dict(reversed(urllib.parse.parse_qsl(url.query))), form,
                                  self.headers)
                response = listener.respond(request)
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(response.body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                log.debug("http: " + format, *args)

        return RequestHandler


def metrics_handler(broker: Broker) -> Handler:
    """``GET /metrics``: the broker's samples, taken on its loop (the caller's)."""
    loop = asyncio.get_running_loop()

    def snapshot() -> list[Family]:
        result: concurrent.futures.Future[list[Family]] = concurrent.futures.Future()

        def take() -> None:
            if result.set_running_or_notify_cancel():
                try:
                    result.set_result(samples(broker))
                except BaseException as exc:
                    result.set_exception(exc)

        loop.call_soon_threadsafe(take)
        try:
            return result.result(SNAPSHOT_TIMEOUT_S)
        finally:
            result.cancel()  # a loop that is late: it skips the snapshot

    def handle(request: Request) -> Response:
        if request.method != "GET":
            return Response(405, b"GET only\n", "text/plain; charset=utf-8")
        try:
            body = render(snapshot())
        except Exception as exc:  # a loop that is gone or too late
            log.warning("metrics scrape failed: %r", exc)
            return Response(503, b"metrics snapshot unavailable\n", "text/plain; charset=utf-8")
        return Response(200, body, CONTENT_TYPE)

    return handle
