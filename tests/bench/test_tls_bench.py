"""bench/tls.py end to end, one short run against pybroker: both listeners carry the
load and the report has every figure (never the speed)."""

from __future__ import annotations

import json
import sys

from tests.bench import run_from_root


def test_one_run_reports_plaintext_and_tls(tmp_path):
    done = run_from_root([sys.executable, "-m", "bench.tls", "--seconds", "0.3",
                           "--out", str(tmp_path)], timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["ktls_used"] is False
    figures = result["pybroker"]
    assert figures["tls"]["version"] in ("TLSv1.2", "TLSv1.3")
    for name in ("fetch", "produce"):
        for path in ("plaintext", "tls"):
            assert figures[name][path]["mb_s"] > 0, (name, path)
        assert figures[name]["tls_fraction"] > 0
