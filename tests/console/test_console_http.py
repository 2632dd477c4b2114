"""The web console over plain HTTP, on a real broker that real clients produced to and
consumed from: what each page shows, record browsing, the admin actions behind their
confirmation and form token, and Kafka's errors and bad input shown as messages while the
broker goes on serving."""

from __future__ import annotations

import datetime
import html
import re
import urllib.parse
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource

from tests.admin.clients import TIMEOUT, admin, create_topic, unique
from tests.console.helpers import commit_offset, committed_offsets, console_url, fetch, parse

RECORDS = 6  # on partition 0
SIZE = re.compile(r"^\d+ B$|^\d+\.\d (KiB|MiB|GiB|TiB)$")  # size_text
COMMITTED = 2
BASE_MS = 1_700_000_000_000
HOSTILE = "<script>alert('console')</script>"


@pytest.fixture(scope="module")
def cluster(module_broker_factory: Any) -> dict[str, Any]:
    """A broker with the console, a topic with JSON, hostile and binary records, and an
    empty group that committed offset COMMITTED on partition 0."""
    broker = module_broker_factory(metrics_listener="127.0.0.1:0")
    topic, group = unique("orders"), unique("group")
    create_topic(broker.bootstrap, topic, partitions=2, config={"retention.ms": "86400000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(RECORDS - 1):
        producer.produce(topic, b'{"id": %d, "item": "book"}' % i, key=b"key-%d" % i,
                         partition=0, timestamp=BASE_MS + i * 1000,
                         headers=[("trace", b"t-%d" % i)])
    producer.produce(topic, HOSTILE.encode(), key=HOSTILE.encode(), partition=0,
                     timestamp=BASE_MS + (RECORDS - 1) * 1000,
                     headers=[("x", HOSTILE.encode())])
    producer.produce(topic, bytes(range(256)), partition=1, timestamp=BASE_MS)
    assert producer.flush(TIMEOUT) == 0
    commit_offset(broker.bootstrap, group, topic, 0, COMMITTED)
    return {"broker": broker, "url": console_url(broker), "topic": topic, "group": group}


def page(cluster: dict[str, Any], path: str, **params: Any) -> tuple[int, Any, str]:
    query = urllib.parse.urlencode(params)
    status, text = fetch(cluster["url"] + path + (f"?{query}" if query else ""))
    return status, parse(text), text


def post(cluster: dict[str, Any], path: str, form: dict[str, str],
         headers: dict[str, str] | None = None) -> tuple[int, Any, str]:
    status, text = fetch(cluster["url"] + path, form, headers)
    return status, parse(text), text


def form_token(cluster: dict[str, Any]) -> str:
    return page(cluster, "/topics")[1].inputs["csrf"]


def topic_names(cluster: dict[str, Any]) -> set[str]:
    return set(admin(cluster["broker"].bootstrap).list_topics(timeout=TIMEOUT).topics)


def test_overview_shows_the_cluster_and_its_brokers(cluster):
    status, found, text = page(cluster, "/")
    assert status == 200
    port = cluster["broker"].port
    assert found.tables["brokers"] == [["0", "127.0.0.1", str(port), "controller"]]
    assert "<dt>Brokers</dt><dd>1</dd>" in text


def test_topics_list_partitions_and_records(cluster):
    status, found, _ = page(cluster, "/topics")
    rows = {row[0]: row[1:] for row in found.tables["topics"]}
    assert status == 200
    assert rows[cluster["topic"]][:4] == ["2", "1", "0", str(RECORDS + 1)]
    assert SIZE.match(rows[cluster["topic"]][4]), rows
    assert "__consumer_offsets" not in rows
    assert "__consumer_offsets" in {r[0] for r in page(cluster, "/topics", internal=1)[1]
                                    .tables["topics"]}


def test_topic_page_shows_leaders_isr_watermarks_and_overrides(cluster):
    status, found, _ = page(cluster, "/topic", name=cluster["topic"])
    assert status == 200
    partitions = found.tables["partitions"]
    assert [row[:7] + row[8:9] for row in partitions] == [
        ["0", "0", "0", "0", "0", str(RECORDS), str(RECORDS), "-"],
        ["1", "0", "0", "0", "0", "1", "1", "-"]]
    # each partition's bytes on its leader (DescribeLogDirs): some records, not none
    assert all(SIZE.match(row[7]) and row[7] != "0 B" for row in partitions), partitions
    assert ["retention.ms", "86400000", "DYNAMIC_TOPIC_CONFIG"] in found.tables["configs"]


def test_browse_from_an_offset_shows_keys_values_and_headers(cluster):
    status, found, text = page(cluster, "/records", topic=cluster["topic"], partition=0,
                               offset=1, limit=2)
    assert status == 200
    rows = found.tables["records"]
    assert [row[0] for row in rows] == ["1", "2"]
    assert rows[0][2] == "key-1"
    assert rows[0][3] == '{\n  "id": 1,\n  "item": "book"\n}'  # pretty JSON
    assert rows[0][4] == "trace: t-1"
    assert "Next records from offset 3" in text


def test_browse_from_a_time_starts_at_the_first_later_record(cluster):
    moment = datetime.datetime.fromtimestamp((BASE_MS + 2500) / 1000, datetime.UTC) \
        .isoformat(timespec="milliseconds").replace("+00:00", "Z")
    by_iso = page(cluster, "/records", topic=cluster["topic"], partition=0, time=moment,
                  limit=1)[1].tables["records"]
    by_ms = page(cluster, "/records", topic=cluster["topic"], partition=0,
                 time=BASE_MS + 2000, limit=1)[1].tables["records"]
    assert [row[0] for row in by_iso] == ["3"]  # 2.5 s: records are a second apart
    assert [row[0] for row in by_ms] == ["2"]
    status, found, _ = page(cluster, "/records", topic=cluster["topic"], partition=0,
                            time=BASE_MS + 3_600_000)
    assert status == 200 and "records" not in found.tables  # nothing that late


def test_browse_formats(cluster):
    def value(fmt: str, partition: int = 0) -> str:
        rows = page(cluster, "/records", topic=cluster["topic"], partition=partition,
                    offset=0, limit=1, format=fmt)[1].tables["records"]
        return rows[0][3]

    assert value("text") == '{"id": 0, "item": "book"}'
    assert value("hex") == b'{"id": 0, "item": "book"}'.hex(" ")
    assert value("auto", partition=1) == bytes(range(256)).hex(" ")  # not UTF-8: hex
    assert value("text", partition=1).startswith("\x00\x01\x02")


def test_record_contents_are_escaped(cluster):
    status, found, text = page(cluster, "/records", topic=cluster["topic"], partition=0,
                               offset=RECORDS - 1, limit=1)
    assert status == 200
    assert HOSTILE not in text
    assert text.count(html.escape(HOSTILE)) == 3  # key, value, header
    row = found.tables["records"][0]
    assert row[2] == HOSTILE and row[3] == HOSTILE and row[4] == f"x: {HOSTILE}"


def test_group_page_shows_lag_per_partition(cluster):
    status, found, text = page(cluster, "/group", id=cluster["group"])
    assert status == 200
    assert found.tables["lag"] == [[cluster["topic"], "0", str(COMMITTED), str(RECORDS),
                                    str(RECORDS - COMMITTED), "-", "-", "-"]]
    assert f"<dt>Total lag</dt><dd>{RECORDS - COMMITTED}</dd>" in text
    groups = page(cluster, "/groups")[1].tables["groups"]
    assert [cluster["group"], "Empty"] in groups


def test_create_topic_only_after_confirmation(cluster):
    name = unique("created")
    form = {"csrf": form_token(cluster), "name": name, "partitions": "3",
            "replication_factor": "1", "configs": "cleanup.policy=compact"}
    status, found, text = post(cluster, "/topics/create", form)
    assert status == 200 and 'id="confirm"' in text and name in text
    assert found.inputs["confirmed"] == "yes"
    assert name not in topic_names(cluster)  # asked, not done
    status, found, _ = post(cluster, "/topics/create", {**form, "confirmed": "yes"})
    assert status == 200 and found.messages == [f"Topic {name} created."]
    metadata = admin(cluster["broker"].bootstrap).list_topics(name, timeout=TIMEOUT)
    assert len(metadata.topics[name].partitions) == 3
    status, found, _ = post(cluster, "/topics/create", {**form, "confirmed": "yes"})
    assert status == 400
    assert found.messages[0].startswith(f"create {name}: TOPIC_ALREADY_EXISTS")


def test_posts_without_the_form_token_or_from_another_origin_are_refused(cluster):
    name = unique("forged")
    form = {"name": name, "partitions": "1", "confirmed": "yes"}
    assert post(cluster, "/topics/create", form)[0] == 403
    assert post(cluster, "/topics/create", {**form, "csrf": "guess"})[0] == 403
    status, found, _ = post(cluster, "/topics/create",
                            {**form, "csrf": form_token(cluster)},
                            {"Origin": "http://attacker.example"})
    assert status == 403 and "another site" in found.messages[0]
    assert name not in topic_names(cluster)


def test_alter_config_and_add_partitions(cluster):
    name = unique("altered")
    create_topic(cluster["broker"].bootstrap, name, partitions=1)
    token = form_token(cluster)
    status, found, _ = post(cluster, "/topic/config", {
        "csrf": token, "topic": name, "key": "retention.ms", "value": "-2",
        "op": "set", "confirmed": "yes"})
    assert status == 400 and "INVALID_CONFIG" in found.messages[0]
    status, found, _ = post(cluster, "/topic/config", {
        "csrf": token, "topic": name, "key": "retention.ms", "value": "60000", "op": "set",
        "confirmed": "yes"})
    assert status == 200, found.messages
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin(cluster["broker"].bootstrap).describe_configs([resource])[resource] \
        .result(timeout=TIMEOUT)
    assert configs["retention.ms"].value == "60000"
    status, _, text = post(cluster, "/topic/partitions",
                           {"csrf": token, "topic": name, "count": "4"})
    assert status == 200 and "from 1 to 4" in text  # the confirmation says what changes
    assert post(cluster, "/topic/partitions", {"csrf": token, "topic": name, "count": "4",
                                               "confirmed": "yes"})[0] == 200
    metadata = admin(cluster["broker"].bootstrap).list_topics(name, timeout=TIMEOUT)
    assert len(metadata.topics[name].partitions) == 4
    status, found, _ = post(cluster, "/topic/partitions", {
        "csrf": token, "topic": name, "count": "2", "confirmed": "yes"})
    assert status == 400 and "INVALID_PARTITIONS" in found.messages[0]


def test_reset_offsets_previews_the_plan_and_refuses_a_group_with_members(cluster):
    topic, group = cluster["topic"], unique("reset")
    member = Consumer({"bootstrap.servers": cluster["broker"].bootstrap, "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    member.subscribe([topic])
    for _ in range(int(TIMEOUT / 0.2)):
        member.poll(0.2)
        if member.assignment():
            break
    member.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    form = {"csrf": form_token(cluster), "group": group, "topic": topic, "to": "offset",
            "offset": "4"}
    status, found, _ = post(cluster, "/group/reset", form)
    member.close()
    assert status == 400 and "only be reset while the group is empty" in found.messages[0]
    status, found, _ = post(cluster, "/group/reset", form)
    assert status == 200
    assert found.tables["plan"] == [[topic, "0", "1", "4"], [topic, "1", "-", "1"]]
    assert committed_offsets(cluster["broker"].bootstrap, group) == {0: 1}  # previewed only
    status, found, _ = post(cluster, "/group/reset", {**form, "confirmed": "yes"})
    assert status == 200, found.messages
    # 4 is clamped into partition 1's [0, 1]
    assert committed_offsets(cluster["broker"].bootstrap, group) == {0: 4, 1: 1}


def test_bad_input_is_a_message_and_the_broker_goes_on(cluster):
    topic = cluster["topic"]
    for path, params, expected in [
            ("/topic", {"name": "no-such-topic"}, "UNKNOWN_TOPIC_OR_PARTITION"),
            ("/records", {"topic": topic, "partition": "x"}, "expected a whole number"),
            ("/records", {"topic": topic, "partition": 7}, "no partition 7"),
            ("/records", {"topic": topic, "time": "yesterday"}, "ISO 8601"),
            ("/records", {"topic": topic, "format": "<b>"}, "format &#x27;&lt;b&gt;&#x27;"),
            ("/group", {"id": "no-such-group"}, "no such group")]:
        status, _, text = page(cluster, path, **params)
        assert status == 400 and expected in text, (path, params)
    assert "no-such-topic" not in topic_names(cluster)  # looking does not create it
    assert page(cluster, "/nowhere")[0] == 404
    assert page(cluster, "/static/../broker.log")[0] == 404
    token = form_token(cluster)
    status, found, _ = post(cluster, "/topics/create", {"csrf": token, "name": "x",
                                                        "partitions": "many"})
    assert status == 400 and "expected a whole number" in found.messages[0]
    status, _, _ = post(cluster, "/topics/create", {"csrf": token, "pad": "x" * 70_000})
    assert status == 413
    assert fetch(cluster["url"] + "/metrics")[0] == 200
    assert cluster["broker"].alive()


def test_sizes_read_as_people_write_them():
    from pybroker.console.pages import size_text
    assert [size_text(n) for n in (None, 0, 1023, 1024, 1536, 5 * 2**30, 3 * 2**40)] == [
        "-", "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 GiB", "3.0 TiB"]
