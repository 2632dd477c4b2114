#!/usr/bin/env bash
# System packages pybroker builds and tests against (Debian/Ubuntu). Idempotent: installs
# only what is missing, so repeated `make` runs cost one dpkg query. `--test` (make
# install-test) adds what only the tests need, so `make serve` installs no browser.
set -euo pipefail
packages=(
  build-essential    # gcc for the native core
  liburing-dev       # io_uring appends (cffi binding); a pwritev fallback is chosen at run time
  libssl-dev         # TLS frames decrypted in network threads (pybroker/_native/tlsread)
  kcat               # a real Kafka client used by the tests
  librdkafka-dev     # bench/transactions_producer.c, the transactions benchmark's producer
  zookeeper          # cluster mode coordinates through ZooKeeper
  default-jre-headless  # ZooKeeper and Spark run on the JVM
  linux-perf strace  # perf/ profiling scripts
  iproute2           # ss: perf/syscalls.sh reads TCP byte counts
)
if [ "${1:-}" = --test ]; then
  packages+=(
    chromium chromium-driver  # tests/console: the web console in headless Chromium
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
