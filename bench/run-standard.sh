#!/usr/bin/env bash
# The standard set against a fresh pybroker, with this run's physical limits beside it.
#
#   bench/run-standard.sh OUT_DIR [EXTRA python -m bench run ARGS...]
#
# Starts a broker (temporary data dir, free port), measures the limits (bench.limits),
# runs every bench/workloads/*.yaml with the broker's pid (CPU per GB, memory), stops
# the broker, and writes OUT_DIR/summary.md: the table BENCHMARKS.md quotes.
set -euo pipefail
out=${1:?usage: bench/run-standard.sh OUT_DIR [bench run args...]}
shift
cd "$(dirname "$0")/.."
mkdir -p "$out"
data=$(mktemp -d /tmp/pybroker-standard-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m pybroker serve --data-dir "$data/data" --listen "127.0.0.1:$port" \
  > "$out/broker.log" 2>&1 &
broker=$!
trap 'kill -TERM $broker 2>/dev/null; wait $broker 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 300); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1).close()" \
    2>/dev/null && break
  sleep 0.1
done
python3 -m bench.limits --seconds 3 --dir "$data" --out "$out/limits.json"
for workload in bench/workloads/*.yaml; do
  name=$(basename "$workload" .yaml)
  echo "== $name (load $(cut -d' ' -f1 /proc/loadavg))"
  python3 -m bench run "$workload" --bootstrap "127.0.0.1:$port" --out "$out/$name" \
    --broker-pid "$broker" "$@" 2> "$out/$name.err" || echo "   $name exited $?"
done
python3 - "$out" <<'PY'
import json, os, sys, time
out = sys.argv[1]
limits = json.load(open(os.path.join(out, "limits.json")))
rows = ["| workload | side | msgs/s | MB/s | p50 ms | p99 ms | broker CPU s/GB | fraction of limit |",
        "|---|---|---:|---:|---:|---:|---:|---|"]
for name in sorted(os.listdir(out)):
    path = os.path.join(out, name, "result.json")
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    phases = {p["phase"]: p for p in (r.get("broker") or {}).get("phases", [])}
    for side, limit_key in (("publish", "sequential_write_gbps"),
                            ("consume", "sendfile_to_socket_gbps")):
        s = r.get(side)
        if not s or not s.get("messages"):
            continue
        lat = s.get("latency_ms") or {}
        # Live workloads measure one phase for both sides; backlog ones, one each.
        phase = (phases.get("produce" if side == "publish" else "consume")
                 or phases.get("produce+consume") or {})
        frac = s["mb_per_s"] / 1000 / limits[limit_key]
        rows.append(f"| {name} | {side} | {s['msgs_per_s']:,.0f} | {s['mb_per_s']:.1f} | "
                    f"{lat.get('p50', float('nan')):.1f} | {lat.get('p99', float('nan')):.1f} | "
                    f"{phase.get('cpu_s_per_gb', float('nan')):.2f} | "
                    f"{frac:.2f} of {limit_key.replace('_gbps', '')} |")
text = (f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, limits measured in the "
        f"same run (GB/s): " + ", ".join(f"{k.replace('_gbps', '')} {v:.2f}"
                                          for k, v in limits.items()) + "\n\n" + "\n".join(rows))
open(os.path.join(out, "summary.md"), "w").write(text + "\n")
print(text)
PY
