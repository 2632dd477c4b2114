"""features(): the fast paths this machine should run are the ones it does run.

A fast path behind a switch nothing sets silently never runs (STYLE 16). The expected
answers are derived from the machine: SSE4.2 in /proc/cpuinfo means the hardware CRC,
io_uring not disabled by the kernel means io_uring appends.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from pybroker._native import features


def cpu_has_sse42():
    return "sse4_2" in Path("/proc/cpuinfo").read_text().split()


def io_uring_allowed():
    setting = Path("/proc/sys/kernel/io_uring_disabled")  # absent before Linux 6.6
    return not setting.exists() or setting.read_text().strip() == "0"


def kernel_at_least(major, minor):
    release = os.uname().release.split(".")
    return (int(release[0]), int(release[1].split("-")[0])) >= (major, minor)


def features_in_child(**env):
    code = "import json; from pybroker._native import features; print(json.dumps(features()))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_this_machine_runs_the_fast_paths():
    found = features()
    assert set(found) == {"crc32c", "append", "zerocopy", "residency"}
    if cpu_has_sse42():
        assert found["crc32c"].startswith("sse4.2"), found
    else:
        assert found["crc32c"] == "table", found
    assert found["append"] == ("io_uring" if io_uring_allowed() else "pwritev"), found
    assert found["zerocopy"] in ("sendfile", "splice"), found
    assert found["residency"] == ("cachestat" if kernel_at_least(6, 5) else "nowait"), found


def test_forced_fallbacks_are_reported():
    found = features_in_child(PYBROKER_APPEND="pwritev", PYBROKER_ZEROCOPY="splice",
                              PYBROKER_RESIDENCY="nowait")
    assert found["append"] == "pwritev"
    assert found["zerocopy"] == "splice"
    assert found["residency"] == "nowait"
