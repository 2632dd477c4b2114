"""Shared by the console's tests: its address from the broker's log, pages fetched with
urllib, tables and forms parsed with the standard library's HTML parser, and a group's
committed offsets set and read with confluent-kafka."""

from __future__ import annotations

import html.parser
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

from tests.admin.clients import TIMEOUT, admin

CONSOLE = re.compile(r"console: serving (http://\S+)/")


def console_url(broker: Any) -> str:
    match = CONSOLE.search(broker.log_text())
    assert match, "the broker did not log its console address"
    return match.group(1)


def fetch(url: str, form: dict[str, str] | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, str]:
    """GET, or POST ``form``; the status and the body, whatever the status."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class _Parser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.inputs: dict[str, str] = {}
        self.messages: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_body = False
        self._message: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "table" and attributes.get("id"):
            self._table = attributes["id"]
            self.tables[self._table] = []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._table and self._in_body:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "input" and attributes.get("name"):
            self.inputs.setdefault(attributes["name"] or "", attributes.get("value") or "")
        elif tag == "div" and "message" in (attributes.get("class") or ""):
            self._message = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None
        elif tag == "div" and self._message is not None:
            self.messages.append("".join(self._message).strip())
            self._message = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._message is not None:
            self._message.append(data)


def parse(page: str) -> _Parser:
    """The page's tables (by id: rows of cell texts), the first value of each named
    input, and its messages' texts."""
    parser = _Parser()
    parser.feed(page)
    return parser


def commit_offset(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    """Commit ``offset`` for the group, which stays (or becomes) Empty."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    consumer.close()


def committed_offsets(bootstrap: str, group: str) -> dict[int, int]:
    """The group's committed offset per partition."""
    futures = admin(bootstrap).list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])
    return {tp.partition: tp.offset
            for tp in futures[group].result(timeout=TIMEOUT).topic_partitions}
