"""pybroker's own lean client: bulk columnar produce and columnar fetch.

For ingest and analytics paths where rows arrive as Arrow columns (Spark, benchmarks):
records are encoded and decoded natively, a whole batch per call. For general use, any
Kafka client works with pybroker unchanged.
"""

from pybroker.client.cluster import READ_COMMITTED, READ_UNCOMMITTED, Cluster, TopicMetadata
from pybroker.client.fetcher import Fetcher
from pybroker.client.producer import BulkProducer, ProducerFencedError, ProduceStats

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "BulkProducer", "Cluster", "Fetcher",
           "ProduceStats", "ProducerFencedError", "TopicMetadata"]
