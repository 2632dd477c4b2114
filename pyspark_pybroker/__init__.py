"""Makes ``spark.read.format("pybroker")`` work with no registration call.

Spark 4 looks for importable top-level modules named ``pyspark_*`` that expose a
``DefaultSource`` and registers each under its ``name()``.
"""

from pybroker.spark.source import PybrokerDataSource as DefaultSource

__all__ = ["DefaultSource"]
