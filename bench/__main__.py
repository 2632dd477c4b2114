"""``python -m bench run WORKLOAD.yaml --bootstrap HOST:PORT --out DIR [--broker-pid PID]
[--data-dir DIR] [--condition-gib N] [--rdkafka-performance PATH]``

and ``python -m bench compare ...`` (the same as ``bench/compare``). ``--condition-gib``
writes and deletes N GiB through the page cache before the run (bench.driver.pagecache);
read workloads (fanout, cold-read) run through bench.driver.reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from bench.driver import charts, pagecache, reads, report
from bench.driver.backends import BackendUnavailable
from bench.driver.progress import Progress
from bench.driver.rawclient import BrokerError
from bench.driver.runner import Run, RunError
from bench.driver.workload import READ_MODES, Workload, WorkloadError

# What stops a run without a result: the user's input, the environment or the broker.
FAILURES = (WorkloadError, BackendUnavailable, RunError, BrokerError, ProcessLookupError,
            OSError)


def run_workload(workload: Workload, bootstrap: str, out_dir: str,
                 broker_pid: int | None = None, progress: Progress | None = None,
                 data_dir: str | None = None, condition_gib: float = 0,
                 rdkafka_performance: str | None = None) -> dict[str, Any]:
    """One run, all its files written to ``out_dir``; returns the result.json mapping.
    ``condition_gib``: GiB written and deleted beside ``data_dir`` (or in the temp dir)
    first, so the run starts on warm page-cache memory whichever broker ran before."""
    os.makedirs(out_dir, exist_ok=True)
    conditioned = None
    if condition_gib > 0:
        progress = progress or Progress()
        progress.message(f"conditioning: writing and deleting {condition_gib} GiB")
        conditioned = pagecache.condition(condition_gib, pagecache.conditioning_dir(data_dir))
    files: dict[str, Any] = {"json": "result.json", "markdown": "result.md"}
    if workload.mode in READ_MODES:
        result = reads.ReadRun(workload, bootstrap, broker_pid, data_dir, progress,
                               rdkafka_performance).execute()
        text: str | None = reads.markdown(result)
    else:
        result = report.build_result(Run(workload, bootstrap, broker_pid, progress).execute())
        files["charts"] = charts.write(result, out_dir)
        text = None  # the driver's own report
    result["conditioning"] = conditioned
    result["files"] = files
    report.write(result, out_dir, text)
    return result


def add_override_args(parser: argparse.ArgumentParser, condition_gib: float = 0) -> None:
    parser.add_argument("--duration", type=float, help="measured seconds (overrides the file)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds (overrides the file)")
    parser.add_argument("--rate", type=int, help="total messages/s (overrides the file)")
    parser.add_argument("--preload-bytes", type=int,
                        help="bytes preloaded by a read workload (overrides the file)")
    parser.add_argument("--idle-seconds", type=float,
                        help="cold-read: idle tail window (overrides the file)")
    parser.add_argument("--condition-gib", type=float, default=condition_gib, metavar="N",
                        help="write and delete N GiB through the page cache before each run, "
                             f"capped to half of MemAvailable (default {condition_gib})")
    parser.add_argument("--rdkafka-performance", metavar="PATH",
                        help="rdkafka_performance for consumer_backend rdkafka_performance "
                             "(default $RDKAFKA_PERFORMANCE)")


def load_workload(path: str, args: argparse.Namespace) -> Workload:
    return Workload.load(path).with_overrides(args.duration, args.warmup, args.rate,
                                              args.preload_bytes, args.idle_seconds)


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
    run.add_argument("--data-dir", help="the broker's data dir (cold-read drops its pages; "
                                        "conditioning writes beside it)")
    add_override_args(run)
    sub.add_parser("compare", help="alternate two brokers (bench/compare --help)")
    args = parser.parse_args(argv)
    try:
        result = run_workload(load_workload(args.workload, args), args.bootstrap, args.out,
                              args.broker_pid, data_dir=args.data_dir,
                              condition_gib=args.condition_gib,
                              rdkafka_performance=args.rdkafka_performance)
    except FAILURES as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # workers were stopped on the way out
        print("bench: interrupted", file=sys.stderr)
        return 130
    with open(os.path.join(args.out, "result.md")) as f:
        sys.stdout.write(f.read())
    return 0 if result["counts"]["consistent"] else 1


if __name__ == "__main__":
    sys.exit(main())
