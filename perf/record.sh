#!/usr/bin/env bash
# perf/record.sh PID SECONDS OUT
#
# Samples a running broker with `perf record -g` for SECONDS and writes to directory OUT:
#   perf.data       the raw profile (perf report -i OUT/perf.data)
#   stacks.folded   folded stacks (one line per stack, sample count last)
#   flamegraph.svg  the flame graph (perf/perfkit.py's SVG writer)
#   top.txt         the hottest frames by self and by inclusive time
#   method.txt      which sampler ran: cycles, cpu-clock, or py-spy (see perf/README.md)
#
# Event: hardware cycles when the CPU exposes them; on VMs without a PMU (`perf stat -e
# cycles true` says <not supported>) the kernel's cpu-clock timer instead. When perf
# cannot sample at all (perf_event_paranoid, no perf in the container) it falls back to
# py-spy --native, which still gives mixed Python and C stacks.
# Call graphs follow frame pointers (our extensions keep them); PERF_CALLGRAPH=dwarf
# unwinds through libraries built without them (libpython) at the cost of big files.
set -euo pipefail
if [ $# -ne 3 ]; then echo "usage: $0 PID SECONDS OUT" >&2; exit 2; fi
PID=$1 SECONDS_=$2 OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
KIT="python3 $HERE/perfkit.py"
mkdir -p "$OUT"
kill -0 "$PID" 2>/dev/null || { echo "record.sh: no process $PID" >&2; exit 1; }

if perf stat -e cycles -x, true 2>&1 >/dev/null | grep -q '^[0-9]'; then
    EVENT=cycles
else
    EVENT=cpu-clock
    echo "record.sh: hardware cycles unavailable, sampling with -e cpu-clock" >&2
fi
CALLGRAPH=${PERF_CALLGRAPH:-fp}

METHOD=""
if perf record -e "$EVENT" -F 999 --call-graph "$CALLGRAPH" -p "$PID" -o "$OUT/perf.data" \
        -- sleep "$SECONDS_" 2>"$OUT/perf-record.log" \
        && [ -s "$OUT/perf.data" ]; then
    perf script -i "$OUT/perf.data" 2>/dev/null | $KIT collapse > "$OUT/stacks.folded"
    if [ -s "$OUT/stacks.folded" ]; then METHOD="perf record -e $EVENT --call-graph $CALLGRAPH"; fi
fi
if [ -z "$METHOD" ]; then
    echo "record.sh: perf could not sample pid $PID ($(tail -1 "$OUT/perf-record.log" 2>/dev/null)); falling back to py-spy --native" >&2
    # --idle: a broker waiting in epoll still gives stacks (and a non-empty graph).
    py-spy record --native --idle --pid "$PID" --duration "$SECONDS_" --format raw \
        --output "$OUT/stacks.folded" >"$OUT/py-spy.log" 2>&1
    METHOD="py-spy record --native (fallback: perf unusable)"
fi
echo "$METHOD" > "$OUT/method.txt"
$KIT svg "pid $PID, $SECONDS_ s, $METHOD" < "$OUT/stacks.folded" > "$OUT/flamegraph.svg"
$KIT top 30 < "$OUT/stacks.folded" > "$OUT/top.txt"
echo "record.sh: $METHOD -> $OUT/flamegraph.svg, $OUT/top.txt" >&2
