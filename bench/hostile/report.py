"""One table of pattern x broker, from one session's report or the medians of several.

Each pattern's result becomes a flat row of figures (``row``); rows of the same pattern
and broker from several rounds become one row of medians (``median_row``: the median of
each figure over the rounds that have it; ``alive`` becomes "survived in k of n").
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.hostile.patterns import PATTERNS, fmt

COLUMNS = ("pattern", "broker", "canary p50 / p99 / max ms", "idle p99 ms", "p99 / idle",
           "RSS before / peak / after MB", "growth / conn KiB", "CPU s", "canary errors",
           "alive", "notes")


def row(result: dict[str, Any], idle: dict[str, Any]) -> dict[str, Any]:
    canary = result.get("canary") or {}
    rss = result.get("rss_kb") or {}
    out: dict[str, Any] = {
        "p50": canary.get("p50_ms"), "p99": canary.get("p99_ms"), "max": canary.get("max_ms"),
        "idle_p99": idle.get("p99_ms"), "ratio": result.get("p99_ratio"),
        "growth_kib": result.get("rss_growth_per_connection_kib"),
        "cpu_s": result.get("cpu_seconds"),
        "errors": sum(canary["errors"].values()) if canary else None,
        "alive": result.get("alive"), "error": result.get("error")}
    for key in ("before", "peak", "after"):
        out[f"rss_{key}"] = None if rss.get(key) is None else rss[key] / 1024
    for key, value in (result.get("details") or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value
    return out


def session_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["pattern"]: row(r, report["idle"]) for r in report["patterns"]}


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": len(rows)}
    for key in {k for r in rows for k in r}:
        values = [r[key] for r in rows if r.get(key) is not None]
        if key == "alive":
            out[key] = f"{sum(values)}/{len(rows)}"
        elif key == "error":
            out[key] = "; ".join(dict.fromkeys(values)) or None
        elif values:
            out[key] = statistics.median(values)
    return out


def _alive(value: bool | str | None) -> str:
    if value is None or isinstance(value, str):  # a median row says "k/n"
        return value or "-"
    return "yes" if value else "NO"


def _cells(pattern: str, broker: str, r: dict[str, Any]) -> list[str]:
    notes = PATTERNS[pattern].note(r)
    if r.get("error"):
        notes = f"{notes}; error: {r['error'][:80]}" if notes else f"error: {r['error'][:80]}"
    return [pattern, broker,
            f"{fmt(r.get('p50'), '.1f')} / {fmt(r.get('p99'), '.1f')} / {fmt(r.get('max'), '.1f')}",
            fmt(r.get("idle_p99"), ".1f"), fmt(r.get("ratio"), ".2f"),
            f"{fmt(r.get('rss_before'), '.0f')} / {fmt(r.get('rss_peak'), '.0f')} / "
            f"{fmt(r.get('rss_after'), '.0f')}",
            fmt(r.get("growth_kib"), ".0f"), fmt(r.get("cpu_s"), ".1f"),
            fmt(r.get("errors"), ".0f"),
            _alive(r.get("alive")), notes]


def table(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
    """Markdown: one line per (pattern, broker, figures)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cells(*r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


LEGEND = """\
Canary: one produce (acks=1) + fetch round trip every 50 ms on its own connection;
p50 / p99 / max over the pattern's run, stalls counted as the round trips they held up
(coordinated omission), timeouts (10 s) at their elapsed time. idle p99: the same canary
with no pattern running, same broker, same session. RSS: VmRSS before the pattern, the
largest sampled (every 0.1 s) during it and its cleanup, and after cleanup and settling;
growth / conn = (peak - before) / hostile connections, for the patterns made of
connections. CPU s: the broker's CPU seconds during the run. canary errors: round trips
that timed out, failed to connect or were answered with an error.
"""
