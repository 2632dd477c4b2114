"""What the data source does to a Spark Python worker's garbage collector, checked in a
fresh interpreter (freezing is process-wide: never in the test process itself)."""

import subprocess
import sys

SCRIPT = """
import gc
import pybroker.client
from pybroker.spark import source

assert gc.get_freeze_count() == 0
source._freeze_worker_heap()
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen  # the modules loaded so far
garbage = [[] for _ in range(1000)]
source._freeze_worker_heap()  # once per process: a later task's objects stay collectable
assert gc.get_freeze_count() == frozen
cycle = []
cycle.append(cycle)
del cycle
assert gc.collect() >= 1  # what is made after the freeze is still collected
print("ok")
"""


def test_the_worker_heap_is_frozen_once_and_new_garbage_still_collected():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
