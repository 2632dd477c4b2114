"""The PySpark data source ``pybroker``: batch and streaming reads and writes.

See :mod:`pybroker.spark.source` for the options (named after Spark's Kafka connector).
"""
