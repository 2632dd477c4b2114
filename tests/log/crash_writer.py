"""Child process of the crash tests: appends batches to ``crash-0`` until killed.

    python -m tests.log.crash_writer DATA_DIR

Opens the data dir as the broker does (``LogManager.load``: recovery after an unclean
stop), then appends batch after batch: batch number ``i`` (the log end offset / 3) holds
3 records whose values are ``expected_value(i, j)``, of a size varying with ``i`` so
segments roll at odd places. After each append returns it prints the batch's last offset
(the "ack"); the parent kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import sys

from pybroker._native.records import encode_batch, validate_batch
from pybroker.log.log_config import LogConfig
from pybroker.log.log_manager import LogManager

CONFIG = LogConfig.from_properties({"segment.bytes": 256 * 1024, "index.interval.bytes": 4096,
                                    "segment.index.bytes": 4096})
RECORDS = 3


def expected_value(batch: int, record: int) -> bytes:
    size = (batch * 7919) % 30_000 + 10
    return (f"{batch}:{record}:".encode() * (size // 4 + 1))[:size]


def main(data_dir: str) -> None:
    manager = LogManager(data_dir)
    manager.load(lambda topic: CONFIG)
    log = manager.get_or_create("crash", 0, CONFIG)
    print(f"ready {log.log_end_offset}", flush=True)
    batch_no = log.log_end_offset // RECORDS
    while True:
        values = [expected_value(batch_no, j) for j in range(RECORDS)]
        batch = bytearray(encode_batch(values, timestamps=[batch_no] * RECORDS))
        info = log.append(batch, validate_batch(batch))
        print(info.last_offset, flush=True)
        batch_no += 1


if __name__ == "__main__":
    main(sys.argv[1])
