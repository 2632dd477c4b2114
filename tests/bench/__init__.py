"""Tests of the benchmark scripts, run end to end as a user runs them."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_from_root(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``argv`` run in the checkout's root with the checkout importable (PYTHONPATH), its
    output captured as text; the finished process, whatever its exit code."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
