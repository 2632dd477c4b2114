"""PNG charts of one result: throughput over time and latency percentiles (matplotlib, Agg)."""

from __future__ import annotations

import os
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402


def write(result: dict[str, Any], out_dir: str) -> list[str]:
    names = [_throughput(result, out_dir), _latency(result, out_dir)]
    return [n for n in names if n]


def _throughput(result: dict[str, Any], out_dir: str) -> str:
    w, series = result["workload"], result["series"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(range(len(series["publish"])), series["publish"], label="publish (acked)")
    if series["consume"]:
        ax.plot(range(len(series["consume"])), series["consume"], label="consume")
    if w["warmup"] and w["mode"] == "live":
        ax.axvline(w["warmup"], color="grey", linestyle=":", label="end of warm-up")
    ax.set_xlabel("seconds since the phase started")
    ax.set_ylabel("messages/s")
    ax.set_title(f"{w['name']}: throughput")
    if series["broker_cpu"]:
        cpu = ax.twinx()
        cpu.plot([s[0] for s in series["broker_cpu"]], [s[1] for s in series["broker_cpu"]],
                 color="tab:red", alpha=0.5, label="broker CPU (cores)")
        cpu.set_ylabel("broker CPU (cores)")
        cpu.legend(loc="upper right")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, out_dir, "throughput.png")


def _latency(result: dict[str, Any], out_dir: str) -> str:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    curves = [("publish", result["publish"]["latency_ms"]["curve"])]
    if result["consume"]:
        curves.append((result["consume"]["latency_kind"],
                       result["consume"]["latency_ms"]["curve"]))
    labels: list[str] = []
    for name, curve in curves:
        if curve:
            labels = [f"p{p:g}" if p < 100 else "max" for p, _ in curve]
            ax.plot(range(len(curve)), [v for _, v in curve], marker="o", label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yscale("log")
    ax.set_ylabel("milliseconds")
    ax.set_title(f"{result['workload']['name']}: latency percentiles")
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return _save(fig, out_dir, "latency.png")


def _save(fig: Any, out_dir: str, name: str) -> str:
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name), dpi=100)
    plt.close(fig)
    return name
