"""Write options of the pybroker data source: Spark's Kafka sink names, our defaults."""

import pytest

from pybroker.spark.options import WriteOptions


def test_write_option_names_and_defaults():
    default = WriteOptions.parse({"topic": "t"})
    assert (default.acks, default.idempotent, default.compression, default.batch_bytes,
            default.max_in_flight) == (-1, True, "none", 1_000_000, 5)
    tuned = WriteOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t",
                                "kafka.acks": "1", "kafka.batch.size": "65536",
                                "kafka.max.in.flight.requests.per.connection": "2"})
    assert (tuned.bootstrap, tuned.acks, tuned.idempotent, tuned.batch_bytes,
            tuned.max_in_flight) == ("h:1", 1, False, 65_536, 2)


def test_exactly_once_and_isolation_options():
    from pybroker.spark.options import ReadOptions

    default = WriteOptions.parse({"topic": "t"})
    assert (default.exactly_once, default.transaction_timeout_ms) == (False, 900_000)
    eos = WriteOptions.parse({"topic": "t", "exactlyOnce": "true",
                              "transactionalIdPrefix": "nightly",
                              "kafka.transaction.timeout.ms": "120000"})
    assert (eos.exactly_once, eos.transactional_id_prefix, eos.transaction_timeout_ms) == (
        True, "nightly", 120_000)
    with pytest.raises(ValueError, match="acks=all"):
        WriteOptions.parse({"topic": "t", "exactlyOnce": "true", "kafka.acks": "1"})
    assert ReadOptions.parse({"subscribe": "t"}, streaming=False).isolation_level == 0
    assert ReadOptions.parse({"subscribe": "t", "kafka.isolation.level": "read_committed"},
                             streaming=True).isolation_level == 1
    with pytest.raises(ValueError, match="read_committed"):
        ReadOptions.parse({"subscribe": "t", "kafka.isolation.level": "committed"},
                          streaming=False)


def test_headers_column_only_with_include_headers():
    from pybroker.spark.options import ReadOptions
    from pybroker.spark.source import PybrokerDataSource

    assert not ReadOptions.parse({"subscribe": "t"}, streaming=False).include_headers
    assert ReadOptions.parse({"subscribe": "t", "includeHeaders": "true"},
                             streaming=True).include_headers
    plain = PybrokerDataSource({"subscribe": "t"}).schema()
    assert "headers" not in plain and plain.startswith("key binary, value binary")
    with_headers = PybrokerDataSource({"subscribe": "t", "includeheaders": "TRUE"}).schema()
    assert with_headers == plain + ", headers array<struct<key: string, value: binary>>"
