"""Model test: random streams of appends, rolls, truncations, DeleteRecords and reopens
(clean, or unclean with a torn tail) against a plain list of batches (STYLE 23).

After every step the log must agree with the model on its offsets, and any read (random
offset, byte budget, bound) must return exactly the model's whole batches.
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from tests.log.helpers import append, make_batch, region_bytes

CONFIG = LogConfig.from_properties({"segment.bytes": 4000, "index.interval.bytes": 300,
                                    "file.delete.delay.ms": 0})

OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 5), st.integers(8, 400)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("delete_records"), st.floats(0, 1)),
    st.tuples(st.just("reopen"), st.booleans(), st.integers(0, 30)),
    st.tuples(st.just("read"), st.floats(0, 1), st.integers(1, 3000), st.booleans(),
              st.floats(0, 1)),
), min_size=1, max_size=40)


class Model:
    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (base, last, stamped bytes)
        self.start = 0
        self.end = 0

    def visible(self) -> list[tuple[int, int, bytes]]:
        return [b for b in self.batches if b[1] >= self.start]

    def expected_read(self, offset: int, max_bytes: int, min_one: bool, bound: int) -> bytes:
        out = b""
        for _, last, data in self.batches:
            if last < offset:
                continue
            if last >= bound or (len(out) + len(data) > max_bytes and (out or not min_one)):
                break
            out += data
        return out


def offset_in(model: Model, fraction: float) -> int:
    return model.start + int((model.end - model.start) * fraction)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_log_matches_a_list_model(ops):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m-0")
        log = Log(path, CONFIG)
        model = Model()
        tag = 0
        try:
            for op in ops:
                kind = op[0]
                if kind == "append":
                    batch = make_batch(count=op[1], value_size=op[2], tag=tag)
                    tag += 1
                    info = append(log, batch)
                    assert info.base_offset == model.end
                    model.batches.append((info.base_offset, info.last_offset, bytes(batch)))
                    model.end = info.last_offset + 1
                elif kind == "roll":
                    log.roll()
                elif kind == "truncate":
                    target = int(model.end * op[1])
                    log.truncate_to(target)
                    if target < model.end:
                        # the end moves to the start of the batch holding target
                        holders = [b for b in model.batches if b[1] >= target]
                        if target < model.start or holders[0][0] < model.start:
                            model.batches, model.start, model.end = [], target, target
                        else:
                            model.batches = [b for b in model.batches if b[1] < target]
                            model.end = holders[0][0]
                elif kind == "delete_records":
                    log.high_watermark = log.log_end_offset
                    target = offset_in(model, op[1])
                    log.delete_records_before(target)
                    model.start = max(model.start, target)
                elif kind == "reopen":
                    clean, tear = op[1], op[2]
                    hw = log.high_watermark
                    log.close()
                    if not clean and tear and model.batches:
                        # tear the tail: cut inside the last batch of the last segment
                        last_log = sorted(n for n in os.listdir(path) if n.endswith(".log"))[-1]
                        size = os.path.getsize(os.path.join(path, last_log))
                        if size:
                            os.truncate(os.path.join(path, last_log), max(size - tear, 0))
                            base, last, data = model.batches[-1]
                            if tear >= len(data) and len(model.batches) > 1:
                                pass  # cut into an earlier batch too: handled below
                            model.batches.pop()
                            model.end = model.batches[-1][1] + 1 if model.batches else base
                            model.start = min(model.start, model.end)
                            if not model.batches:
                                model.end = max(model.end, model.start)
                    log = Log(path, CONFIG, clean=clean, log_start_offset=model.start,
                              high_watermark=hw)
                    if log.log_end_offset < model.end:  # tear reached further back
                        model.batches = [b for b in model.batches if b[1] < log.log_end_offset]
                        model.end = log.log_end_offset
                elif kind == "read" and model.end > model.start:
                    offset = offset_in(model, op[1])
                    bound = offset_in(model, op[4]) if op[4] < 0.9 else model.end
                    result = log.read(offset, op[2], max_offset=bound, min_one=op[3])
                    assert region_bytes(result) == model.expected_read(offset, op[2], op[3],
                                                                       bound)
                assert (log.log_start_offset, log.log_end_offset) == (model.start, model.end)
            # everything the model holds is readable, in order, byte for byte
            if model.end > model.start:
                whole = log.read(model.start, 1 << 30)
                assert region_bytes(whole) == b"".join(b[2] for b in model.visible())
        finally:
            log.close()
