"""Partition storage in Kafka's on-disk layout (docs/ARCHITECTURE.md, "Storage").

``log_manager.LogManager`` (every partition of a data dir) -> ``log.Log`` (one
partition: offsets, reads as file regions, retention, truncation) -> ``log_segments``
-> ``log_segment.LogSegment`` (one ``.log`` with its ``offset_index``/``time_index``,
sharing ``index_base``); ``leader_epoch_cache``, ``checkpoints``, ``log_config`` and the
``dump`` tool beside them; ``state_machine`` is the contract of state derived from a log
(``producer_state``, the idempotent producers', is one) and its sliced replay. Per-byte work is native (``pybroker._native.records``,
``.index``, ``.appender``).
"""
