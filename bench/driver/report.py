"""From the workers' raw figures to result.json and result.md.

result.json (schema "pybroker-bench/1"), top-level keys:
  schema, workload, run          what ran, where, when, topics
  publish                        acknowledged messages in the measured window: messages,
                                 bytes, seconds, msgs_per_s, mb_per_s (MB = 10^6 bytes),
                                 latency_ms {count, p50, p99, p99.9, max, mean, curve}
  consume                        the same for consumers (all groups together); latency is
                                 end-to-end (send timestamp in the value) in live mode and
                                 the backlog's age in backlog mode (latency_kind says which)
  counts                         produced, acked, produce_errors, in_flight,
                                 consumed_per_group, checks [{check, ok, detail}], consistent
  series                         per-second messages: publish, consume, broker_cpu
  broker                         null without --broker-pid; else pid, phases [{phase,
                                 seconds, cpu_seconds, gb_moved, cpu_s_per_gb}],
                                 vm_hwm_kb, max_sampled_rss_kb
  clients                        CPU seconds of the producer and consumer processes
  files                          names of the files written next to result.json
  conditioning                   null, or what --condition-gib did first: requested_gib,
                                 written_gib, capped, directory, seconds
"""

from __future__ import annotations

import json
import os
import platform
import time
from typing import Any

from bench.driver import histogram

SCHEMA = "pybroker-bench/1"


def _rate(count: int, record_bytes: int, seconds: float) -> dict[str, Any]:
    seconds = max(seconds, 1e-9)
    return {"messages": count, "bytes": count * record_bytes, "seconds": round(seconds, 3),
            "msgs_per_s": round(count / seconds, 1),
            "mb_per_s": round(count * record_bytes / seconds / 1e6, 3)}


def _series(results: list[dict[str, Any]]) -> list[int]:
    merged: dict[int, int] = {}
    for r in results:
        for second, count in r["series"].items():
            merged[int(second)] = merged.get(int(second), 0) + count
    return [merged.get(s, 0) for s in range(max(merged) + 1)] if merged else []


def build_result(raw: dict[str, Any]) -> dict[str, Any]:
    w = raw["workload"]
    record_bytes = raw["record_bytes"]
    times = raw["times"]
    producers = raw["producers"]
    consumers = raw["consumers"]

    sent = sum(p["sent"] for p in producers)
    acked = sum(p["total"] for p in producers)
    produce_errors = sum(p["errors"] for p in producers)
    in_flight = sum(p["in_flight"] for p in producers)
    publish = _rate(sum(p["window"] for p in producers), record_bytes, w.duration)
    publish["latency_ms"] = histogram.summary(histogram.merge([p["histogram"] for p in producers]))

    consume: dict[str, Any] | None = None
    if consumers:
        if w.mode == "live":
            consume = _rate(sum(c["window"] for c in consumers), record_bytes, w.duration)
            consume["latency_kind"] = "end-to-end"
        else:
            last = max((c["last_at"] for c in consumers if c["last_at"]),
                       default=times["consume_start"])
            consume = _rate(sum(c["total"] for c in consumers), record_bytes,
                            last - times["consume_start"])
            consume["latency_kind"] = "backlog age"
        consume["latency_ms"] = histogram.summary(
            histogram.merge([c["histogram"] for c in consumers]))

    per_group: dict[str, int] = {}
    for c in consumers:
        per_group[c["group"]] = per_group.get(c["group"], 0) + c["total"]
    checks = [
        {"check": "produced == acked", "ok": sent == acked and produce_errors == 0
         and in_flight == 0,
         "detail": f"produced {sent}, acked {acked}, errors {produce_errors}, "
                   f"in flight {in_flight}"},
        {"check": "messages were produced", "ok": acked > 0, "detail": f"acked {acked}"},
    ]
    for group, consumed in sorted(per_group.items()):
        detail = f"consumed {consumed}, produced {acked}"
        if consumed < acked and raw.get("drain_timed_out"):
            detail += (f"; consumers still {acked - consumed} behind when drain_timeout "
                       "passed (slow consumers, not necessarily lost messages)")
        checks.append({"check": f"consumed == produced ({group})", "ok": consumed == acked,
                       "detail": detail})
    samples = [e for r in producers + consumers for e in r["error_samples"]]

    result: dict[str, Any] = {
        "schema": SCHEMA,
        "workload": w.as_dict(),
        "run": {
            "bootstrap": raw["bootstrap"],
            "run_id": raw["run_id"],
            "topics": raw["topics"],
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(raw["started_wall"])),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "librdkafka": _librdkafka_version(),
            "record_bytes": record_bytes,
        },
        "publish": publish,
        "consume": consume,
        "counts": {
            "produced": sent, "acked": acked, "produce_errors": produce_errors,
            "in_flight": in_flight, "consumed_per_group": per_group,
            "consume_errors": sum(c["errors"] for c in consumers),
            "error_samples": samples[:5],
            "checks": checks, "consistent": all(c["ok"] for c in checks),
        },
        "series": {"publish": _series(producers), "consume": _series(consumers),
                   "broker_cpu": []},
        "broker": _broker(raw, publish, consume),
        "clients": {"producer_cpu_seconds": round(sum(p["cpu_seconds"] for p in producers), 2),
                    "consumer_cpu_seconds": round(sum(c["cpu_seconds"] for c in consumers), 2)},
        "files": {},
    }
    if raw["probe"] is not None:
        base = times.get("produce_start", 0.0)
        result["series"]["broker_cpu"] = raw["probe"].cpu_series(base)
    return result


def _broker(raw: dict[str, Any], publish: dict[str, Any],
            consume: dict[str, Any] | None) -> dict[str, Any] | None:
    probe = raw["probe"]
    if probe is None:
        return None
    w, times = raw["workload"], raw["times"]
    windows = []
    if w.mode == "live":
        moved = publish["bytes"] + (consume["bytes"] if consume else 0)
        windows.append(("produce+consume" if consume else "produce",
                        times["produce_measure"], times["produce_end"], moved))
    else:
        windows.append(("produce", times["produce_measure"], times["produce_end"],
                        publish["bytes"]))
        if consume:
            windows.append(("consume", times["consume_start"],
                            times["consume_start"] + consume["seconds"], consume["bytes"]))
    phases = []
    for name, start, end, moved in windows:
        cpu = probe.cpu_seconds(start, end)
        gb = moved / 1e9
        phases.append({"phase": name, "seconds": round(end - start, 3),
                       "cpu_seconds": None if cpu is None else round(cpu, 3),
                       "gb_moved": round(gb, 6),
                       "cpu_s_per_gb": None if cpu is None or gb == 0 else round(cpu / gb, 2)})
    return {"pid": probe.pid, "phases": phases, **probe.peak_kb()}


def _librdkafka_version() -> str:
    try:
        import confluent_kafka
        return confluent_kafka.libversion()[0]
    except ImportError:
        return "unavailable"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(result: dict[str, Any]) -> str:
    w, run, counts = result["workload"], result["run"], result["counts"]
    publish, consume = result["publish"], result["consume"]
    lines = [
        f"# {w['name']}",
        "",
        f"{run['started_at']} against `{run['bootstrap']}` ({run['host']}, {run['cpus']} cpus, "
        f"librdkafka {run['librdkafka']}). {w['topics']} topic(s) x {w['partitions']} "
        f"partitions, {w['message_size']} B values, keys {w['keys']}, "
        f"{w['producers']} {w['producer']} producer(s) at rate {w['rate']}, acks {w['acks']}, "
        f"linger {w['linger_ms']} ms, compression {w['compression']}, "
        f"{w['consumers']['groups']} group(s) x {w['consumers']['per_group']} consumer(s), "
        f"mode {w['mode']}, warm-up {w['warmup']} s, duration {w['duration']} s.",
        "",
        "| | messages/s | MB/s | p50 ms | p99 ms | p99.9 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [("publish (ack latency)", publish)]
    if consume:
        rows.append((f"consume ({consume['latency_kind']})", consume))
    for label, figures in rows:
        lat = figures["latency_ms"]
        lines.append(f"| {label} | {figures['msgs_per_s']:,.0f} | {figures['mb_per_s']:.2f} | "
                     f"{_ms(lat['p50'])} | {_ms(lat['p99'])} | {_ms(lat['p99.9'])} | "
                     f"{_ms(lat['max'])} |")
    lines += ["", f"Counts: {'consistent' if counts['consistent'] else 'INCONSISTENT'}.", ""]
    for check in counts["checks"]:
        lines.append(f"- {'ok' if check['ok'] else 'FAILED'}: {check['check']}: "
                     f"{check['detail']}")
    for sample in counts["error_samples"]:
        lines.append(f"- error seen: {sample}")
    broker = result["broker"]
    if broker:
        lines += ["", f"| broker (pid {broker['pid']}) | seconds | CPU s | GB moved | "
                  "CPU s per GB |", "|---|---:|---:|---:|---:|"]
        for p in broker["phases"]:
            lines.append(f"| {p['phase']} | {p['seconds']} | {p['cpu_seconds']} | "
                         f"{p['gb_moved']:.3f} | {p['cpu_s_per_gb']} |")
        lines += ["", f"Broker peak resident memory: VmHWM {_mb(broker['vm_hwm_kb'])}, "
                  f"largest sampled VmRSS {_mb(broker['max_sampled_rss_kb'])}."]
    clients = result["clients"]
    lines += ["", f"Client processes used {clients['producer_cpu_seconds']} CPU s (producers) "
              f"and {clients['consumer_cpu_seconds']} CPU s (consumers) on the same host."]
    for name in result["files"].get("charts", []):
        lines += ["", f"![{name}]({name})"]
    return "\n".join(lines) + "\n"


def _mb(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f} MiB"


def write(result: dict[str, Any], out_dir: str, text: str | None = None) -> None:
    """result.json and result.md (``text``, or the driver's markdown of ``result``)."""
    with open(os.path.join(out_dir, "result.md"), "w") as f:
        f.write(markdown(result) if text is None else text)
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
