"""``python3 -m bench.hostile --bootstrap HOST:PORT --pid PID [--log FILE] [--patterns a,b]
[--out DIR]``: hostile and heavy client patterns next to a canary, against one running
Kafka-protocol broker on this host (see bench/hostile/__init__.py and bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import sys

from bench.hostile import report
from bench.hostile.patterns import DEFAULT_PATTERNS, PATTERNS
from bench.hostile.session import Session, Settings


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """The options a session takes, shared with the side-by-side runner."""
    parser.add_argument("--patterns", default=",".join(DEFAULT_PATTERNS),
                        help="comma-separated, in order (default: all but fd-exhaustion); "
                             f"known: {', '.join(PATTERNS)}")
    parser.add_argument("--count", action="append", default=[], metavar="PATTERN=N",
                        help="size of a pattern (connections, topics, requests), repeatable")
    parser.add_argument("--duration", type=float, default=15.0,
                        help="seconds a pattern holds its connections (default 15)")
    parser.add_argument("--idle", type=float, default=20.0,
                        help="seconds of the canary's idle baseline (default 20)")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds of quiet before and after each pattern (default 3)")
    parser.add_argument("--out", help="directory for result.json, result.md, canary samples")


def parse_run_args(parser: argparse.ArgumentParser, args: argparse.Namespace
                   ) -> tuple[list[str], Settings]:
    names = [n.strip() for n in args.patterns.split(",") if n.strip()]
    unknown = [n for n in names if n not in PATTERNS]
    if unknown:
        parser.error(f"unknown pattern(s) {', '.join(unknown)}; known: {', '.join(PATTERNS)}")
    counts = {}
    for item in args.count:
        name, _, value = item.partition("=")
        if name not in PATTERNS or not value.isdigit():
            parser.error(f"--count {item}: want PATTERN=N with a known pattern")
        counts[name] = int(value)
    return names, Settings(args.idle, args.duration, args.settle, counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.hostile", description=__doc__)
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT of the broker")
    parser.add_argument("--pid", type=int, required=True, help="the broker's pid on this host")
    parser.add_argument("--log", help="the broker's log file (log growth, forged lines)")
    parser.add_argument("--label", default="broker", help="the broker's name in the table")
    add_run_args(parser)
    args = parser.parse_args(argv)
    names, settings = parse_run_args(parser, args)
    try:
        result = Session(args.bootstrap, args.pid, settings, args.log, args.out).run(names)
    except (ProcessLookupError, RuntimeError, OSError) as e:
        print(f"bench.hostile: {e}", file=sys.stderr)
        return 2
    text = report.table([(name, args.label, r) for name, r in
                         report.session_rows(result).items()]) + "\n" + report.LEGEND
    if args.out:
        with open(os.path.join(args.out, "result.md"), "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0 if result["alive_at_end"] else 1


if __name__ == "__main__":
    sys.exit(main())
