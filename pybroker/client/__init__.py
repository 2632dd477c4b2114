"""pybroker's own lean client: bulk columnar produce and columnar fetch.

For ingest and analytics paths where rows arrive as Arrow columns (Spark, benchmarks):
records are encoded and decoded natively, a whole batch per call. For general use, any
Kafka client works with pybroker unchanged.
"""

from pybroker.client.cluster import Cluster, TopicMetadata
from pybroker.client.fetcher import Fetcher
from pybroker.client.producer import BulkProducer, ProduceStats

__all__ = ["BulkProducer", "Cluster", "Fetcher", "ProduceStats", "TopicMetadata"]
