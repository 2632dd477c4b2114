#!/usr/bin/env bash
# bench/produce-1000-partitions.sh [ROUNDS]
# Produce 2M x 100 B (acks=1, linger.ms=5, keyless) to a fresh 1,000-partition topic on
# Apache Kafka 4.1 (../shared/reference/kafka.sh) and on pybroker (this checkout), a fresh
# broker each run, the first broker alternating per round, 3 GiB written and deleted
# through the page cache before each run (bench/driver/pagecache.py explains why).
# Prints msgs/s and the broker's CPU s per GB of each run.
set -uo pipefail
ROUNDS=${1:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
R=${REFERENCE:-$ROOT/../shared/reference}
PB_PORT=${PB_PORT:-49092}
export TMPDIR=${TMPDIR:-/tmp}
TICK=$(getconf CLK_TCK)
cpu() { awk -v t="$TICK" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t }' /proc/$1/stat; }
condition() { PYTHONPATH=$ROOT python3 -c 'from bench.driver.pagecache import condition; import os; condition(3.0, os.environ["TMPDIR"])' >/dev/null; }
run() {  # name bootstrap pid
  local t=p1000-$RANDOM$RANDOM out c0 c1
  python3 "$R/create-topic.py" "$2" "$t" 1000 1 >/dev/null 2>&1; sleep 2; condition
  c0=$(cpu "$3")
  out=$("$R/rdkafka_performance" -P -t "$t" -s 100 -c 2000000 -b "$2" -X linger.ms=5 -a 1 2>&1 | grep "messages produced" | tail -1)
  c1=$(cpu "$3")
  echo "$1 $(echo "$out" | sed -E 's/.* in ([0-9]+)ms: ([0-9]+) msgs\/s.*/\2/') msgs/s $(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", (b-a)/0.2}') CPU-s/GB"
}
kafka() {
  KAFKA_FRESH=1 "$R/kafka.sh" start >/dev/null 2>&1
  run kafka "127.0.0.1:${KAFKA_PORT:-29092}" "$(cat "$TMPDIR/ref-kafka-${KAFKA_PORT:-29092}/kafka.pid")"
  "$R/kafka.sh" stop >/dev/null 2>&1
}
pybroker() {
  local dir=$TMPDIR/p1000-pybroker pid
  rm -rf "$dir"
  (cd "$ROOT" && PYTHONPATH=$ROOT exec python3 -m pybroker serve --data-dir "$dir" --listen "127.0.0.1:$PB_PORT" > "$dir.log" 2>&1) &
  pid=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PB_PORT") 2>/dev/null && break; sleep 0.1; done
  run pybroker "127.0.0.1:$PB_PORT" "$pid"
  kill -TERM "$pid"; wait "$pid"
}
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then kafka; pybroker; else pybroker; kafka; fi
done
