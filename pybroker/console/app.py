"""The console's routes: pages (GET) and admin actions (POST), as a handler of the broker's
HTTP listener (:mod:`pybroker.broker.http_listener`).

An action never runs on its first POST: that answers a confirmation page saying what will
be done (for an offset reset, the plan per partition), whose Confirm button posts the same
form again with ``confirmed=yes``. Every POST must carry the console's form token (a
random secret of this broker's run, in each form it renders) and, when the browser sends
an ``Origin``, come from the console's own origin: another site's page cannot read the
token, so it cannot make a visitor's browser act on the cluster.

What fails (bad input, the cluster's error answer) is shown as a message on the page with
status 400; nothing raised here reaches the broker.
"""

from __future__ import annotations

import hmac
import secrets
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from pybroker.broker.http_listener import Request, Response
from pybroker.console import pages
from pybroker.console.cluster import DEFAULT_TIMEOUT_S, ClusterClient, ConfigInfo, ConsoleError
from pybroker.console.pages import Html, esc, url

Form = dict[str, str]


@dataclass(frozen=True)
class Action:
    title: str
    preview: Callable[[Form], Html]  # what will be done; raises ConsoleError on bad input
    perform: Callable[[Form], str]  # does it; the message to show
    back: Callable[[Form], str]  # the page to return to


class Console:
    """Thread-safe: its state is the cluster client (thread-safe) and a constant token."""

    def __init__(self, bootstrap: str, timeout: float = DEFAULT_TIMEOUT_S,
                 client_settings: dict[str, str] | None = None) -> None:
        self.cluster = ClusterClient(bootstrap, timeout, client_settings)
        self.form_token = secrets.token_urlsafe(32)
        self._pages: dict[str, Callable[[dict[str, str]], tuple[str, Html]]] = {
            "/": self._overview, "/topics": self._topics, "/topic": self._topic,
            "/records": self._records, "/groups": self._groups, "/group": self._group}
        self._actions = {
            "/topics/create": Action("Create topic", self._create_preview,
                                     self._create, lambda f: "/topics"),
            "/topic/partitions": Action("Add partitions", self._partitions_preview,
                                        self._add_partitions, self._topic_url),
            "/topic/config": Action("Alter config", self._config_preview,
                                    self._alter_config, self._topic_url),
            "/group/reset": Action("Reset offsets", self._reset_preview, self._reset,
                                   lambda f: url("/group", id=f.get("group", ""))),
        }

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/static/"):
            data = pages.static_file(request.path.removeprefix("/static/"))
            if data is None:
                return self._page(404, "Not found", pages.message("No such file.", False))
            return Response(200, data, "text/css; charset=utf-8",
                            {"Cache-Control": "max-age=3600"})
        if request.method == "POST":
            return self._act(request)
        show = self._pages.get(request.path)
        if show is None:
            return self._page(404, "Not found", pages.message("No such page.", False))
        try:
            title, body = show(request.query)
        except ConsoleError as exc:
            return self._page(400, "Error", pages.message(str(exc), False))
        return self._page(200, title, body)

    def _page(self, status: int, title: str, body: Html) -> Response:
        return Response(status, pages.page(title, body, self.cluster.bootstrap),
                        headers={"Cache-Control": "no-store",
                                 "X-Frame-Options": "DENY",
                                 "Content-Security-Policy": "default-src 'self'; "
                                 "frame-ancestors 'none'"})

    # actions ------------------------------------------------------------------------------

    def _act(self, request: Request) -> Response:
        action = self._actions.get(request.path)
        if action is None:
            return self._page(404, "Not found", pages.message("No such action.", False))
        refused = self._refusal(request)
        if refused:
            return self._page(403, "Refused", pages.message(refused, False))
        form = request.form
        try:
            if form.get("confirmed") != "yes":
                summary = action.preview(form)
                return self._page(200, action.title, pages.confirm_page(
                    request.path, action.title, summary, form, action.back(form)))
            done = action.perform(form)
        except ConsoleError as exc:
            return self._page(400, action.title,
                              pages.result_page(str(exc), False, action.back(form)))
        return self._page(200, action.title, pages.result_page(done, True, action.back(form)))

    def _refusal(self, request: Request) -> str | None:
        """Why a POST is not the console's own form, or None."""
        token = request.form.get("csrf", "")
        if not hmac.compare_digest(token.encode(), self.form_token.encode()):
            return "The form is not this console's (or the broker restarted): reload the page."
        origin = request.headers.get("Origin")
        if origin is not None and urllib.parse.urlsplit(origin).netloc != \
                request.headers.get("Host"):
            return "A form posted from another site is refused."
        return None

    def _topic_url(self, form: Form) -> str:
        return url("/topic", name=form.get("topic", ""))

    def _create_preview(self, form: Form) -> Html:
        name, partitions, replicas, configs = _create_args(form)
        shown = ", ".join(f"{k}={v}" for k, v in configs.items()) or "none"
        return Html(f"<p>Create topic <b>{esc(name)}</b> with {esc(partitions)} partitions, "
                    f"replication factor {esc(replicas)} (-1: the broker's default), "
                    f"configs: {esc(shown)}.</p>")

    def _create(self, form: Form) -> str:
        name, partitions, replicas, configs = _create_args(form)
        self.cluster.create_topic(name, partitions, replicas, configs)
        return f"Topic {name} created."

    def _partitions_preview(self, form: Form) -> Html:
        topic, count = _required(form, "topic"), _int(form, "count")
        current = len(self.cluster.topic(topic).partitions)
        return Html(f"<p>Raise the partition count of <b>{esc(topic)}</b> from "
                    f"{esc(current)} to {esc(count)}. Partitions cannot be removed later, "
                    "and keyed records will map to other partitions.</p>")

    def _add_partitions(self, form: Form) -> str:
        topic, count = _required(form, "topic"), _int(form, "count")
        self.cluster.set_partition_count(topic, count)
        return f"Topic {topic} now has {count} partitions."

    def _config_preview(self, form: Form) -> Html:
        topic, key, value = _config_args(form)
        if value is None:
            return Html(f"<p>Remove the override of <b>{esc(key)}</b> on topic "
                        f"<b>{esc(topic)}</b> (back to the broker's default).</p>")
        return Html(f"<p>Set <b>{esc(key)}</b> = <b>{esc(value)}</b> on topic "
                    f"<b>{esc(topic)}</b>.</p>")

    def _alter_config(self, form: Form) -> str:
        topic, key, value = _config_args(form)
        self.cluster.alter_config(topic, key, value)
        return (f"Override of {key} on {topic} removed." if value is None
                else f"{key}={value} set on {topic}.")

    def _reset_preview(self, form: Form) -> Html:
        group, topic, to = _reset_args(form)
        committed, plan = self.cluster.reset_preview(group, topic, to)
        return pages.reset_summary(group, committed, plan)

    def _reset(self, form: Form) -> str:
        group, topic, to = _reset_args(form)
        _, plan = self.cluster.reset_preview(group, topic, to)
        self.cluster.reset_offsets(group, plan)
        moved = ", ".join(f"{p}: {offset}" for (_, p), offset in sorted(plan.items()))
        return f"Offsets of group {group} on {topic} reset ({moved})."

    # pages --------------------------------------------------------------------------------

    def _overview(self, query: dict[str, str]) -> tuple[str, Html]:
        return "Cluster", pages.overview(self.cluster.cluster(), len(self.cluster.groups()))

    def _topics(self, query: dict[str, str]) -> tuple[str, Html]:
        return "Topics", pages.topics_page(self.cluster.cluster(), bool(query.get("internal")),
                                           self.form_token)

    def _topic(self, query: dict[str, str]) -> tuple[str, Html]:
        name = _required(query, "name")
        topic = self.cluster.topic(name)
        try:
            configs: list[ConfigInfo] | str = self.cluster.configs(name)
        except ConsoleError as exc:  # the partitions are still worth showing
            configs = str(exc)
        return (f"Topic {name}",
                pages.topic_page(topic, configs, bool(query.get("all")), self.form_token))

    def _records(self, query: dict[str, str]) -> tuple[str, Html]:
        name = _required(query, "topic")
        topic = self.cluster.topic(name)
        partition = _int(query, "partition", 0)
        if not 0 <= partition < len(topic.partitions):
            raise ConsoleError(f"{name} has no partition {partition}")
        if query.get("offset", "").strip():
            start = _int(query, "offset")
        elif query.get("time", "").strip():
            try:
                ms = pages.parse_time(query["time"])
            except ValueError:
                raise ConsoleError(f"time {query['time']!r}: expected epoch milliseconds "
                                   "or ISO 8601 (2026-01-31T12:00:00Z)") from None
            start = self.cluster.offset_for_time(name, partition, ms)
        else:
            start = topic.partitions[partition].earliest or 0
        fmt = query.get("format", "auto")
        if fmt not in pages.FORMATS:
            raise ConsoleError(f"format {fmt!r}: one of {', '.join(pages.FORMATS)}")
        records = self.cluster.browse(name, partition, start, _int(query, "limit", 20))
        return (f"Records of {name}-{partition}",
                pages.records_page(topic, query, start, records, fmt))

    def _groups(self, query: dict[str, str]) -> tuple[str, Html]:
        return "Consumer groups", pages.groups_page(self.cluster.groups())

    def _group(self, query: dict[str, str]) -> tuple[str, Html]:
        group_id = _required(query, "id")
        lag = self.cluster.group(group_id)
        topics = sorted({row.topic for row in lag.rows})
        return f"Group {group_id}", pages.group_page(lag, topics, self.form_token)


def _required(fields: dict[str, str], name: str) -> str:
    value = fields.get(name, "").strip()
    if not value:
        raise ConsoleError(f"{name}: required")
    return value


def _int(fields: dict[str, str], name: str, default: int | None = None) -> int:
    text = fields.get(name, "").strip()
    if not text and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConsoleError(f"{name} {text!r}: expected a whole number") from None


def _create_args(form: Form) -> tuple[str, int, int, dict[str, str]]:
    configs = {}
    for pair in form.get("configs", "").split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConsoleError(f"config {pair.strip()!r}: expected KEY=VALUE")
        configs[key.strip()] = value.strip()
    return (_required(form, "name"), _int(form, "partitions", -1),
            _int(form, "replication_factor", -1), configs)


def _config_args(form: Form) -> tuple[str, str, str | None]:
    topic, key = _required(form, "topic"), _required(form, "key")
    if form.get("op", "set") == "delete":
        return topic, key, None
    return topic, key, form.get("value", "")


def _reset_args(form: Form) -> tuple[str, str, str | int]:
    to = form.get("to", "")
    if to not in ("earliest", "latest", "offset"):
        raise ConsoleError(f"to {to!r}: earliest, latest or offset")
    return (_required(form, "group"), _required(form, "topic"),
            _int(form, "offset") if to == "offset" else to)
