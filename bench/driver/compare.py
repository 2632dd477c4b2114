"""Alternate two brokers on the same workloads and compare them pair by pair.

On a shared, noisy machine two runs minutes apart differ by more than two brokers often
do, so the runs alternate (A B, then B A, ...) and each round's B is divided by its A; the
median of those ratios is the figure to quote, and the spread of the pairs shows how far
it can be trusted. Ratios are B / A for every metric: above 1 means B has more of it
(better for throughput, worse for latency and CPU per GB).

Before every run, ``--condition-gib`` GiB are written and deleted through the page cache
(bench.driver.pagecache): on this VM whichever broker writes right after a large free
gets warm pages and looks up to twice as fast, so each run gets the same start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

SCHEMA = "pybroker-bench-compare/1"
DEFAULT_CONDITION_GIB = 3.0

# (name, path into result.json); a metric missing from a run (no consumers, no pid) is null.
METRICS = (
    ("publish msgs/s", ("publish", "msgs_per_s")),
    ("publish MB/s", ("publish", "mb_per_s")),
    ("publish p50 ms", ("publish", "latency_ms", "p50")),
    ("publish p99 ms", ("publish", "latency_ms", "p99")),
    ("consume msgs/s", ("consume", "msgs_per_s")),
    ("consume p50 ms", ("consume", "latency_ms", "p50")),
    ("consume p99 ms", ("consume", "latency_ms", "p99")),
    ("read msgs/s", ("read", "msgs_per_s")),
    ("read MB/s", ("read", "mb_per_s")),
    ("tail idle p50 ms", ("tail", "idle", "p50")),
    ("tail idle p99 ms", ("tail", "idle", "p99")),
    ("tail cold p50 ms", ("tail", "cold", "p50")),
    ("tail cold p99 ms", ("tail", "cold", "p99")),
    ("broker CPU s/GB", ("broker", "phases", 0, "cpu_s_per_gb")),
    ("broker max RSS KiB", ("broker", "max_sampled_rss_kb")),  # VmHWM spans the whole life
)


def metric(result: dict[str, Any], path: tuple[Any, ...]) -> float | None:
    value: Any = result
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            return None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def figures(result: dict[str, Any]) -> dict[str, float | None]:
    return {name: metric(result, path) for name, path in METRICS}


def ratios(a: dict[str, float | None], b: dict[str, float | None]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in a:
        x, y = a[name], b.get(name)
        out[name] = round(y / x, 4) if x and y is not None else None
    return out


def summarize(pairs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Median of each metric's pair ratios (pairs without the metric are left out)."""
    out: dict[str, float | None] = {}
    for name, _ in METRICS:
        values = [p["ratio"][name] for p in pairs if p["ratio"].get(name) is not None]
        out[name] = round(statistics.median(values), 4) if values else None
    return out


def markdown(report: dict[str, Any]) -> str:
    a, b = report["a"], report["b"]
    lines = [f"# {b['name']} / {a['name']}", "",
             f"A = {a['name']} at `{a['bootstrap']}`, B = {b['name']} at `{b['bootstrap']}`; "
             f"{report['rounds']} round(s), A first in odd rounds and B first in even "
             "ones; each cell is B / A for one round, last column the median. "
             + (f"Before each run {report['condition_gib']} GiB were written and deleted "
                "through the page cache." if report["condition_gib"] else
                "No conditioning of the page cache (--condition-gib 0)."), ""]
    for name, entry in report["workloads"].items():
        rounds = [p["round"] for p in entry["pairs"]]
        lines += [f"## {name}", "",
                  "| metric | " + " | ".join(f"round {r}" for r in rounds) + " | median |",
                  "|---|" + "---:|" * (len(rounds) + 1)]
        for metric_name, _ in METRICS:
            cells = [p["ratio"][metric_name] for p in entry["pairs"]]
            median = entry["median_ratio"][metric_name]
            if median is None:
                continue
            lines.append(f"| {metric_name} | " + " | ".join(_cell(c) for c in cells) +
                         f" | **{_cell(median)}** |")
        lines += ["", "Counts consistent in every run: "
                  + ("yes" if entry["consistent"] else "NO (see the runs' result.md)"), ""]
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    from bench.__main__ import FAILURES
    try:
        return _compare(argv)
    except FAILURES as e:
        print(f"bench/compare: {e}", file=sys.stderr)
        return 2


def _compare(argv: list[str] | None) -> int:
    from bench.__main__ import add_override_args, load_workload, run_workload
    from bench.driver.progress import Progress

    parser = argparse.ArgumentParser(prog="bench/compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+", help="workload YAML files")
    parser.add_argument("--a", required=True, metavar="HOST:PORT", help="broker A (baseline)")
    parser.add_argument("--b", required=True, metavar="HOST:PORT", help="broker B")
    parser.add_argument("--a-name", default="A")
    parser.add_argument("--b-name", default="B")
    parser.add_argument("--a-pid", type=int, help="broker A's pid on this host")
    parser.add_argument("--b-pid", type=int, help="broker B's pid on this host")
    parser.add_argument("--a-data-dir", help="broker A's data dir (cold-read; conditioning)")
    parser.add_argument("--b-data-dir", help="broker B's data dir (cold-read; conditioning)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True, help="directory for compare.json/.md and runs")
    add_override_args(parser, condition_gib=DEFAULT_CONDITION_GIB)
    args = parser.parse_args(argv)

    sides = {"A": (args.a, args.a_pid, args.a_data_dir),
             "B": (args.b, args.b_pid, args.b_data_dir)}
    progress = Progress()
    report: dict[str, Any] = {
        "schema": SCHEMA, "rounds": args.rounds, "condition_gib": args.condition_gib,
        "a": {"name": args.a_name, "bootstrap": args.a},
        "b": {"name": args.b_name, "bootstrap": args.b},
        "workloads": {},
    }
    for path in args.workloads:
        workload = load_workload(path, args)
        entry: dict[str, Any] = {"pairs": [], "consistent": True}
        report["workloads"][workload.name] = entry
        for round_no in range(1, args.rounds + 1):
            pair: dict[str, Any] = {"round": round_no}
            for side in ("A", "B") if round_no % 2 else ("B", "A"):
                bootstrap, pid, data_dir = sides[side]
                out = os.path.join(args.out, workload.name, f"round{round_no}-{side}")
                progress.message(f"{workload.name}: round {round_no}/{args.rounds}, "
                                 f"{side} ({bootstrap})")
                result = run_workload(workload, bootstrap, out, pid, progress, data_dir,
                                      args.condition_gib, args.rdkafka_performance)
                entry["consistent"] &= result["counts"]["consistent"]
                pair[side.lower()] = figures(result)
                pair[f"{side.lower()}_dir"] = os.path.relpath(out, args.out)
            pair["ratio"] = ratios(pair["a"], pair["b"])
            entry["pairs"].append(pair)
        entry["median_ratio"] = summarize(entry["pairs"])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    text = markdown(report)
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0 if all(e["consistent"] for e in report["workloads"].values()) else 1
