#!/usr/bin/env bash
# perf/pyspy.sh PID SECONDS OUT
#
# Mixed Python + native (Cython, C) stacks of a running broker with py-spy --native.
# Two recordings one after the other (py-spy attaches with ptrace, so they cannot
# overlap), SECONDS each, into directory OUT:
#   pyspy.speedscope.json   open in https://www.speedscope.app ("Left Heavy" view)
#   pyspy.svg               py-spy's own flame graph (open in a browser: hover, click to zoom)
#   stacks.folded, top.txt  the speedscope recording as folded stacks, and its hottest frames
set -euo pipefail
if [ $# -ne 3 ]; then echo "usage: $0 PID SECONDS OUT" >&2; exit 2; fi
PID=$1 SECONDS_=$2 OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
kill -0 "$PID" 2>/dev/null || { echo "pyspy.sh: no process $PID" >&2; exit 1; }
RATE=${PYSPY_RATE:-250}

py-spy record --native --rate "$RATE" --pid "$PID" --duration "$SECONDS_" \
    --format speedscope --output "$OUT/pyspy.speedscope.json" >"$OUT/py-spy.log" 2>&1
py-spy record --native --rate "$RATE" --pid "$PID" --duration "$SECONDS_" \
    --format flamegraph --output "$OUT/pyspy.svg" >>"$OUT/py-spy.log" 2>&1
python3 "$HERE/perfkit.py" fold-speedscope "$OUT/pyspy.speedscope.json" > "$OUT/stacks.folded"
python3 "$HERE/perfkit.py" top 30 < "$OUT/stacks.folded" > "$OUT/top.txt"
echo "pyspy.sh: $OUT/pyspy.speedscope.json, $OUT/pyspy.svg, $OUT/top.txt" >&2
