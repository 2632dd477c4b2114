"""One local Spark per test process, shared by every Spark test module: starting one
costs more than most of the tests that use it. It runs ``local[2,2]``: a failed task is
retried once, as on a cluster (tests/spark/test_exactly_once.py retries one); a test that
counts rows exactly still sees a retry's duplicates."""

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (SparkSession.builder.master("local[2,2]")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "2g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
