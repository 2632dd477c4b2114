"""``python -m bench run WORKLOAD.yaml --bootstrap HOST:PORT --out DIR [--broker-pid PID]``

and ``python -m bench compare ...`` (the same as ``bench/compare``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from bench.driver import charts, report
from bench.driver.backends import BackendUnavailable
from bench.driver.progress import Progress
from bench.driver.runner import Run, RunError
from bench.driver.workload import Workload, WorkloadError

# What stops a run without a result: the user's input, the environment or the broker.
FAILURES = (WorkloadError, BackendUnavailable, RunError, ProcessLookupError, OSError)


def run_workload(workload: Workload, bootstrap: str, out_dir: str,
                 broker_pid: int | None = None, progress: Progress | None = None
                 ) -> dict[str, Any]:
    """One run, all its files written to ``out_dir``; returns the result.json mapping."""
    os.makedirs(out_dir, exist_ok=True)
    raw = Run(workload, bootstrap, broker_pid, progress).execute()
    result = report.build_result(raw)
    result["files"] = {"json": "result.json", "markdown": "result.md",
                       "charts": charts.write(result, out_dir)}
    report.write(result, out_dir)
    return result


def add_override_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, help="measured seconds (overrides the file)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds (overrides the file)")
    parser.add_argument("--rate", type=int, help="total messages/s (overrides the file)")


def load_workload(path: str, args: argparse.Namespace) -> Workload:
    return Workload.load(path).with_overrides(args.duration, args.warmup, args.rate)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:  # its own parser: argparse REMAINDER drops --options
        from bench.driver.compare import main as compare_main
        return compare_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one workload against one broker")
    run.add_argument("workload", help="workload YAML file")
    run.add_argument("--bootstrap", required=True, help="HOST:PORT of the broker")
    run.add_argument("--out", required=True, help="directory for result.json, .md, charts")
    run.add_argument("--broker-pid", type=int, help="broker pid on this host: CPU and memory")
    add_override_args(run)
    sub.add_parser("compare", help="alternate two brokers (bench/compare --help)")
    args = parser.parse_args(argv)
    try:
        result = run_workload(load_workload(args.workload, args), args.bootstrap, args.out,
                              args.broker_pid)
    except FAILURES as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # workers were stopped on the way out
        print("bench: interrupted", file=sys.stderr)
        return 130
    sys.stdout.write(report.markdown(result))
    return 0 if result["counts"]["consistent"] else 1


if __name__ == "__main__":
    sys.exit(main())
