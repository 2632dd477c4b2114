"""Strings clients choose never forge a line in the broker's log.

A group id, a client id (inside the member id the coordinator gives it) and a topic name
carrying a newline and what looks like a log record of their own reach the broker's log
through JoinGroup, FindCoordinator and a failed acks=0 Produce; every line of the log must
still be the broker's, with the client's text escaped where it is quoted. Tracebacks keep
their line breaks, indented, so a client string inside one cannot start a line either.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

from pybroker.cli import LOG_DATE_FORMAT, LOG_FORMAT, EscapingFormatter
from pybroker.client.connection import BrokerConnection
from pybroker.errors import ErrorCode
from pybroker.net.protocol import codec
from tests.broker.wire_client import WireClient, produce_body

FORGED = "\n2026-01-01 00:00:00,000 ERROR forged"
ESCAPED = "\\n2026-01-01 00:00:00,000 ERROR forged"
FIND_COORDINATOR, JOIN = 10, 11
# What every record line of the broker's log starts with (cli.LOG_FORMAT).
RECORD = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} [A-Z]+ pybroker")


def _join(conn: BrokerConnection, group: str) -> dict[str, Any]:
    body = {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    response = conn.request(JOIN, 7, body)
    if response["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
        body["member_id"] = response["member_id"]
        response = conn.request(JOIN, 7, body)
    return response


def test_client_strings_are_escaped_in_the_log(broker):
    group, client_id, topic = "g" + FORGED, "c" + FORGED + "\x1b[2J", "t" + FORGED
    host, port = broker.bootstrap.split(":")
    with BrokerConnection(host, int(port), client_id=client_id) as conn:
        found = conn.request(FIND_COORDINATOR, 4, {"key_type": 0,
                                                   "coordinator_keys": [group]})
        assert found["coordinators"][0]["error_code"] == ErrorCode.NONE
        joined = _join(conn, group)
        assert joined["error_code"] == ErrorCode.NONE, joined
        assert joined["member_id"].startswith(client_id)  # Kafka's clientId-uuid
    with WireClient(broker.bootstrap) as client:
        client.send(0, 9, produce_body(topic, 0, b"not a batch", acks=0))
        assert client.closed_by_peer()  # a failed acks=0 produce closes the connection
    broker.stop()

    log = broker.log_text()
    lines = log.splitlines()
    assert not [line for line in lines if "forged" in line and not RECORD.match(line)]
    assert "\x1b" not in log
    quoted = [line for line in lines if ESCAPED in line]
    assert any("group g" + ESCAPED in line for line in quoted), quoted  # the group id
    assert any("c" + ESCAPED + "\\x1b[2J-" in line for line in quoted), quoted  # member id
    assert any("t" + ESCAPED + "-0" in line for line in quoted), quoted  # the topic


def test_traceback_lines_are_indented_and_escaped():
    formatter = EscapingFormatter(LOG_FORMAT, LOG_DATE_FORMAT)
    try:
        raise ValueError("bad topic t" + FORGED + "\r\x85")
    except ValueError:
        record = logging.LogRecord("pybroker.test", logging.ERROR, __file__, 1,
                                   "failed for %s", ("g" + FORGED,), sys.exc_info())
    text = formatter.format(record)
    first, *rest = text.split("\n")
    assert first.endswith("failed for g" + ESCAPED)
    assert rest[0] == "    Traceback (most recent call last):"
    assert all(line.startswith("    ") for line in rest)
    assert rest[-2] == "    ValueError: bad topic t"
    assert rest[-1].startswith("    2026-01-01")  # the message's own break, indented ...
    assert rest[-1].endswith("forged\\r\\x85")  # ... and the rest of it escaped
    assert "\r" not in text and "\x85" not in text


def test_plain_messages_are_left_alone():
    formatter = EscapingFormatter("%(message)s")
    record = logging.LogRecord("pybroker.test", logging.INFO, __file__, 1,
                               "created topic %s (ünïcode, \\ kept)", ("orders",), None)
    assert formatter.format(record) == "created topic orders (ünïcode, \\ kept)"
    assert record.getMessage() == formatter.format(record)
    tab = logging.LogRecord("pybroker.test", logging.INFO, __file__, 1, "a\tb\u2028c", (),
                            None)
    assert formatter.format(tab) == "a\\tb\\u2028c"
    assert tab.getMessage() == "a\tb\u2028c"  # the record itself is not changed


def test_codec_keeps_the_client_id_as_sent():
    # The test above relies on the client id reaching the broker unchanged.
    frame = codec.encode_request(10, 4, 1, {"key_type": 0, "coordinator_keys": ["g"]},
                                 client_id="c" + FORGED)
    assert ("c" + FORGED).encode() in frame
