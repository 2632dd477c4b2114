"""Write options of the pybroker data source: Spark's Kafka sink names, our defaults."""

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
