"""The console's HTML: one function per page, over the plain data of
:mod:`pybroker.console.cluster`, inside ``templates/layout.html``.

Everything shown is escaped: record keys, values and headers, topic and group names and
configs come from clients and are untrusted. Text becomes markup only through ``esc``
(or ``html_table`` and the other helpers, which call it); what is already markup is an
``Html``, which they pass through unchanged.
"""

from __future__ import annotations

import datetime
import functools
import html
import importlib.resources
import json
import string
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

from pybroker.console.cluster import Cluster, ConfigInfo, Record, TopicInfo
from pybroker.kafka_admin import GroupLag, Partition

FORMATS = ("auto", "text", "json", "hex")
# a key or value longer than this is cut in the page (its full size is said)
MAX_SHOWN_BYTES = 16 * 1024


class Html(str):
    """Markup, safe to put in a page as is."""


def esc(value: Any) -> Html:
    return value if isinstance(value, Html) else Html(html.escape(str(value), quote=True))


def join(parts: Iterable[Any]) -> Html:
    return Html("".join(esc(p) for p in parts))


def url(path: str, **params: Any) -> str:
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    return f"{path}?{query}" if query else path


def link(href: str, text: Any) -> Html:
    return Html(f'<a href="{esc(href)}">{esc(text)}</a>')


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], table_id: str = "",
               numeric: Sequence[int] = (), warn: Sequence[bool] = ()) -> Html:
    """A table; the columns in ``numeric`` right-aligned, the rows flagged in ``warn``
    highlighted."""
    head = join(Html(f"<th>{esc(h)}</th>") for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = join(Html(f'<td class="num">{esc(c)}</td>' if j in numeric
                          else f"<td>{esc(c)}</td>") for j, c in enumerate(row))
        flagged = i < len(warn) and warn[i]
        body.append(Html(f'<tr class="warn">{cells}</tr>' if flagged else f"<tr>{cells}</tr>"))
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return Html(f"<table{ident}><thead><tr>{head}</tr></thead>"
                f"<tbody>{join(body)}</tbody></table>")


def message(text: str, ok: bool) -> Html:
    kind = "ok" if ok else "error"
    return Html(f'<div class="message {kind}" role="status">{esc(text)}</div>')


def _dash(value: Any) -> Any:
    return "-" if value is None or value == "" else value


def size_text(size: int | None) -> str:
    """Bytes for people: ``412 B``, ``1.5 KiB``, ``3.0 GiB``; ``-`` when not known."""
    if size is None:
        return "-"
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024:
            return f"{size} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids)) or "-"


@functools.cache
def _layout() -> string.Template:
    text = importlib.resources.files("pybroker.console").joinpath("templates/layout.html")
    return string.Template(text.read_text(encoding="utf-8"))


def page(title: str, body: Html, bootstrap: str) -> bytes:
    return _layout().substitute(title=esc(title), body=body,
                                bootstrap=esc(bootstrap)).encode("utf-8")


def static_file(name: str) -> bytes | None:
    """A file of ``static/`` (the style sheet), or None."""
    if name != "console.css":  # the only one: no path from a URL reaches the filesystem
        return None
    return importlib.resources.files("pybroker.console").joinpath(
        "static/console.css").read_bytes()


# forms ------------------------------------------------------------------------------------


def _hidden(fields: dict[str, str]) -> Html:
    return join(Html(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">')
                for k, v in fields.items())


def action_form(action: str, title: str, csrf: str, inputs: Html,
                fields: dict[str, str] | None = None, form_id: str = "") -> Html:
    """A POST form of an admin action; its submission asks for a confirmation first."""
    hidden = _hidden({"csrf": csrf, **(fields or {})})
    ident = f' id="{esc(form_id)}"' if form_id else ""
    return Html(f'<form class="action" method="post" action="{esc(action)}"{ident}>'
                f"<h3>{esc(title)}</h3>{hidden}{inputs}"
                f'<button type="submit">{esc(title)}…</button></form>')


def text_input(name: str, label: str, value: str = "", kind: str = "text",
               required: bool = True, extra: str = "") -> Html:
    req = " required" if required else ""
    return Html(f'<label>{esc(label)} <input type="{kind}" name="{esc(name)}" '
                f'value="{esc(value)}"{req}{extra}></label>')


def select(name: str, label: str, options: Sequence[tuple[str, str]],
           chosen: str = "") -> Html:
    opts = join(Html(f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>'
                     f"{esc(text)}</option>") for v, text in options)
    return Html(f'<label>{esc(label)} <select name="{esc(name)}">{opts}</select></label>')


def confirm_page(action: str, title: str, summary: Html, form: dict[str, str],
                 cancel: str) -> Html:
    """Asks before an admin action: the same form again, with ``confirmed=yes``."""
    fields = {k: v for k, v in form.items() if k != "confirmed"}
    return Html(f'<div class="confirm" id="confirm"><h2>Confirm: {esc(title)}</h2>{summary}'
                f'<form method="post" action="{esc(action)}">'
                f'{_hidden({**fields, "confirmed": "yes"})}'
                f'<button type="submit" class="danger" id="confirm-button">Confirm</button> '
                f'{link(cancel, "Cancel")}</form></div>')


def result_page(text: str, ok: bool, back: str) -> Html:
    return Html(message(text, ok) + link(back, "Back"))


# pages ------------------------------------------------------------------------------------


def overview(cluster: Cluster, groups: int) -> Html:
    topics = [t for t in cluster.topics if not t.internal]
    partitions = [p for t in topics for p in t.partitions]
    offline = sum(p.leader < 0 for p in partitions)
    under = sum(t.under_replicated for t in topics)
    facts = [("Cluster id", cluster.cluster_id or "-"),
             ("Controller", cluster.controller_id),
             ("Brokers", len(cluster.brokers)),
             ("Topics", link("/topics", len(topics))),
             ("Partitions", len(partitions)),
             ("Under-replicated partitions", under),
             ("Offline partitions", offline),
             ("Consumer groups", link("/groups", groups))]
    dl = join(Html(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>") for k, v in facts)
    brokers = html_table(
        ["ID", "HOST", "PORT", "ROLE"],
        [[i, host, port, "controller" if i == cluster.controller_id else ""]
         for i, host, port in cluster.brokers], "brokers", numeric=(0, 2))
    return Html(f'<dl id="cluster">{dl}</dl><h2>Brokers</h2>{brokers}')


def topics_page(cluster: Cluster, internal: bool, csrf: str) -> Html:
    shown = [t for t in cluster.topics if internal or not t.internal]
    table = html_table(
        ["TOPIC", "PARTITIONS", "REPLICATION", "UNDER-REPLICATED", "RECORDS", "SIZE"],
        [[link(url("/topic", name=t.name), t.name), len(t.partitions),
          t.replication_factor, t.under_replicated, t.records, size_text(t.size)]
         for t in shown],
        "topics", numeric=(1, 2, 3, 4, 5), warn=[t.under_replicated > 0 for t in shown])
    toggle = (link("/topics", "Hide internal topics") if internal
              else link(url("/topics", internal=1), "Show internal topics"))
    create = action_form(
        "/topics/create", "Create topic", csrf,
        join([text_input("name", "Name"),
              text_input("partitions", "Partitions", "1", "number", extra=' min="1"'),
              text_input("replication_factor", "Replication factor", "-1", "number",
                         extra=' title="-1: the broker\'s default.replication.factor"'),
              text_input("configs", "Configs (k=v, comma separated)", required=False)]),
        form_id="create-topic")
    return Html(f"{table}<p>{toggle}</p>{create}")


def topic_page(topic: TopicInfo, configs: list[ConfigInfo] | str, all_configs: bool,
               csrf: str) -> Html:
    """``configs``: the topic's, or why they could not be read."""
    rows = [[p.index, _dash(p.leader if p.leader >= 0 else None), _ids(p.replicas),
             _ids(p.isr), _dash(p.earliest), _dash(p.latest), _dash(p.records),
             size_text(p.size), _dash(p.error), link(url("/records", topic=topic.name, partition=p.index),
                                  "browse")]
            for p in topic.partitions]
    partitions = html_table(
        ["PARTITION", "LEADER", "REPLICAS", "ISR", "EARLIEST", "LATEST", "RECORDS", "SIZE",
         "ERROR", ""], rows, "partitions", numeric=(0, 4, 5, 6, 7),
        warn=[len(p.isr) < len(p.replicas) or p.leader < 0 for p in topic.partitions])
    if isinstance(configs, str):
        config_table = message(configs, False)
    else:
        shown = [c for c in configs if all_configs or not c.is_default]
        config_table = html_table(
            ["CONFIG", "VALUE", "SOURCE"],
            [[c.name, "(sensitive)" if c.sensitive else _dash(c.value), c.source]
             for c in shown], "configs")
        if not shown:
            config_table = Html(f"{config_table}<p>No overrides: every config has the "
                                "broker's default.</p>")
    toggle = (link(url("/topic", name=topic.name), "Only overrides") if all_configs
              else link(url("/topic", name=topic.name, all=1), "All configs"))
    grow = action_form(
        "/topic/partitions", "Add partitions", csrf,
        text_input("count", "New partition count", str(len(topic.partitions) + 1), "number",
                   extra=f' min="{len(topic.partitions) + 1}"'),
        {"topic": topic.name}, "add-partitions")
    alter = action_form(
        "/topic/config", "Alter config", csrf,
        join([text_input("key", "Config"), text_input("value", "Value", required=False),
              select("op", "Operation", [("set", "set"), ("delete", "remove override")])]),
        {"topic": topic.name}, "alter-config")
    return Html(f"{partitions}<h2>Configs</h2>{config_table}<p>{toggle}</p>"
                f"<h2>Actions</h2>{grow}{alter}")


def browse_form(topic: TopicInfo, params: dict[str, str]) -> Html:
    partitions = [(str(p.index), str(p.index)) for p in topic.partitions]
    return Html(
        f'<form method="get" action="/records" id="browse">'
        f'<input type="hidden" name="topic" value="{esc(topic.name)}">'
        + select("partition", "Partition", partitions, params.get("partition", "0"))
        + text_input("offset", "From offset", params.get("offset", ""), "number",
                     required=False)
        + text_input("time", "or from time (UTC ISO 8601 or epoch ms)",
                     params.get("time", ""), required=False)
        + text_input("limit", "Records", params.get("limit", "20"), "number",
                     extra=' min="1"')
        + select("format", "Show as", [(f, f) for f in FORMATS], params.get("format", "auto"))
        + '<button type="submit">Browse</button></form>')


def records_page(topic: TopicInfo, params: dict[str, str], start: int,
                 records: list[Record], fmt: str) -> Html:
    form = browse_form(topic, params)
    rows = [[r.offset, _time_text(r.timestamp_ms) + f" ({r.timestamp_type})",
             render_bytes(r.key, fmt), render_bytes(r.value, fmt),
             join(Html(f'<div class="record-header">{esc(k)}: {render_bytes(v, fmt)}</div>')
                  for k, v in r.headers)]
            for r in records]
    if not rows:
        found = Html(f'<p id="no-records">No records from offset {esc(start)}.</p>')
    else:
        nxt = records[-1].offset + 1
        more = url("/records", topic=topic.name, partition=params.get("partition", "0"),
                   offset=nxt, limit=params.get("limit"), format=fmt)
        found = Html(html_table(["OFFSET", "TIMESTAMP", "KEY", "VALUE", "HEADERS"], rows,
                                "records", numeric=(0,))
                     + f"<p>{link(more, f'Next records from offset {nxt}')}</p>")
    return Html(f"{form}<h2>From offset {esc(start)}</h2>{found}")


def groups_page(groups: list[tuple[str, str]]) -> Html:
    if not groups:
        return Html('<p id="no-groups">No consumer groups.</p>')
    return html_table(["GROUP", "STATE"],
                      [[link(url("/group", id=g), g), state] for g, state in groups], "groups")


def group_page(lag: GroupLag, topics: list[str], csrf: str) -> Html:
    facts = [("State", lag.state), ("Assignor", lag.assignor), ("Members", len(lag.members)),
             ("Total lag", sum(r.lag or 0 for r in lag.rows))]
    dl = join(Html(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>") for k, v in facts)
    rows = [[r.topic, r.partition, _dash(r.committed), _dash(r.end), _dash(r.lag),
             r.member.member_id if r.member else "-", r.member.host if r.member else "-",
             r.member.client_id if r.member else "-"] for r in lag.rows]
    table = html_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                        "CONSUMER-ID", "HOST", "CLIENT-ID"], rows, "lag",
                       numeric=(1, 2, 3, 4), warn=[(r.lag or 0) > 0 for r in lag.rows])
    errors = join(message(f"{t}-{p}: {e}", False) for (t, p), e in lag.errors.items())
    reset = action_form(
        "/group/reset", "Reset offsets", csrf,
        join([select("topic", "Topic", [(t, t) for t in topics]),
              select("to", "To", [("earliest", "earliest"), ("latest", "latest"),
                                  ("offset", "offset")]),
              text_input("offset", "Offset", "0", "number", required=False)]),
        {"group": lag.group_id}, "reset-offsets")
    note = Html('<p class="muted">Offsets can be reset only while the group has no '
                "members; an offset is clamped into the partition's range.</p>")
    return Html(f'<dl id="group">{dl}</dl>{errors}{table}<h2>Actions</h2>{note}{reset}')


def reset_summary(group: str, committed: dict[Partition, int],
                  plan: dict[Partition, int]) -> Html:
    rows = [[t, p, _dash(committed.get((t, p))), offset]
            for (t, p), offset in sorted(plan.items())]
    return Html(f"<p>New committed offsets of group <b>{esc(group)}</b>:</p>"
                + html_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], rows,
                             "plan", numeric=(1, 2, 3)))


# record contents --------------------------------------------------------------------------


def render_bytes(data: bytes | None, fmt: str) -> Html:
    """A key, value or header as ``fmt``: text (UTF-8, undecodable bytes replaced), json
    (indented, when it parses; else text), hex, or auto (json, else text when it decodes,
    else hex)."""
    if data is None:
        return Html('<span class="muted">null</span>')
    shown, cut = data[:MAX_SHOWN_BYTES], len(data) - MAX_SHOWN_BYTES
    note = Html(f'<div class="muted">… {cut} more bytes</div>') if cut > 0 else Html("")
    if fmt == "hex":
        return Html(f"<pre>{esc(shown.hex(' '))}</pre>{note}")
    if fmt in ("json", "auto") and cut <= 0:
        try:
            value = json.loads(shown)
        except ValueError:
            pass
        else:
            return Html(f'<pre class="json">{esc(json.dumps(value, indent=2))}</pre>')
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        if fmt == "auto":
            return Html(f"<pre>{esc(shown.hex(' '))}</pre>{note}")
        text = shown.decode("utf-8", errors="replace")
    return Html(f"<pre>{esc(text)}</pre>{note}")


def _time_text(ms: int) -> str:
    if ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from epoch ms or an ISO 8601 time (UTC if no zone)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    moment = datetime.datetime.fromisoformat(text)  # raises ValueError
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)
