"""The benchmark driver: workloads, worker processes, aggregation, reports."""
