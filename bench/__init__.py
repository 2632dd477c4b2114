"""End-to-end benchmarks of Kafka-protocol brokers, in the spirit of the OpenMessaging Benchmark.

``python -m bench run WORKLOAD.yaml --bootstrap HOST:PORT --out DIR`` drives any broker that
speaks the Kafka protocol (pybroker, Apache Kafka, Redpanda) with librdkafka producers and
consumers in separate processes; ``bench/compare`` alternates two brokers. See README.md.
"""
