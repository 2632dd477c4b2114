"""In a ZooKeeper cluster, one broker's console shows the whole cluster: it is a Kafka
client of the cluster, not a view of its own broker's partitions and groups."""

from __future__ import annotations

from tests.admin.clients import produce, unique
from tests.cluster.conftest import zk_connect, zookeeper  # noqa: F401 (fixtures)
from tests.cluster.harness import LocalCluster
from tests.console.helpers import commit_offset, console_url, fetch, parse


def test_a_brokers_console_shows_what_other_brokers_lead(zk_connect, tmp_path):  # noqa: F811
    topic, group = unique("elsewhere"), unique("group")
    with LocalCluster(zk_connect, tmp_path, size=2,
                      settings={"metrics.listener": "127.0.0.1:0"}) as cluster:
        cluster.create_topic(topic, assignment=[[2], [2]])  # broker 2 holds every replica
        produce(cluster.bootstrap, topic, [b'{"led": "by broker 2"}'])
        commit_offset(cluster.bootstrap, group, topic, 0, 1)
        url = console_url(cluster.brokers[1])

        overview = parse(fetch(url + "/")[1])
        assert [row[0] for row in overview.tables["brokers"]] == ["1", "2"]
        status, text = fetch(f"{url}/topic?name={topic}")
        assert status == 200, parse(text).messages
        assert [row[:7] for row in parse(text).tables["partitions"]] == [
            ["0", "2", "2", "2", "0", "1", "1"], ["1", "2", "2", "2", "0", "0", "0"]]
        records = parse(fetch(f"{url}/records?topic={topic}&partition=0")[1])
        assert [row[3] for row in records.tables["records"]] == ['{\n  "led": "by broker 2"\n}']
        lag = parse(fetch(f"{url}/group?id={group}")[1])
        assert lag.tables["lag"] == [[topic, "0", "1", "1", "0", "-", "-", "-"]]
