#!/usr/bin/env bash
# perf/syscalls.sh PID SECONDS [OUT]
#
# Counts a running broker's system calls and prints them per MB the broker moved, with
# two tools one after the other, SECONDS each:
#   1. perf stat -e syscalls:sys_enter_...  kernel tracepoints: exact counts, ~no overhead;
#                                            the I/O, polling and memory calls a broker
#                                            makes by default (SYSCALLS=all for every
#                                            tracepoint: ~15 s to set up on this VM)
#   2. strace -c -f -p PID                   ptrace: also times each call, but slows the
#                                            broker many-fold, so its MB are fewer
# "MB moved" is what the broker received plus sent on its TCP connections over the same
# window (tcp_info bytes_received + bytes_acked, read with ss): its client traffic.
# A tool that cannot run here (no tracefs, ptrace denied) prints a line saying so
# ("# perf stat: unavailable ..." / "# strace: unavailable ...") instead of a table.
# With OUT, the raw tool outputs and the tables are also written to that directory.
set -uo pipefail
if [ $# -lt 2 ]; then echo "usage: $0 PID SECONDS [OUT]" >&2; exit 2; fi
PID=$1 SECONDS_=$2 OUT=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
KIT="python3 $HERE/perfkit.py"
kill -0 "$PID" 2>/dev/null || { echo "syscalls.sh: no process $PID" >&2; exit 1; }
WORK=${OUT:-$(mktemp -d)}
mkdir -p "$WORK"
# One counter per tracepoint per thread: a threaded broker needs thousands of fds.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true


if [ "${SYSCALLS:-}" = all ]; then
    EVENTS='syscalls:sys_enter_*'
else
    EVENTS=""
    for s in read write readv writev pread64 pwrite64 preadv pwritev preadv2 pwritev2 \
             sendfile64 splice vmsplice tee recvfrom sendto recvmsg sendmsg recvmmsg \
             sendmmsg epoll_wait epoll_pwait epoll_ctl poll ppoll select io_uring_enter \
             fsync fdatasync sync_file_range futex mmap munmap madvise mremap brk \
             accept4 close openat fallocate ftruncate lseek clock_nanosleep; do
        EVENTS="$EVENTS${EVENTS:+,}syscalls:sys_enter_$s"
    done
fi

# The traffic snapshots are taken by the command perf stat runs, i.e. while the counters
# are live: setting up tracepoints takes a second or more that must not count as traffic.
NET="$KIT net $PID"
if perf stat -e "$EVENTS" -p "$PID" -o "$WORK/perf-stat.txt" \
        -- sh -c "$NET > '$WORK/net.0'; sleep $SECONDS_; $NET > '$WORK/net.1'; true" \
        2>"$WORK/perf-stat.err" && grep -q 'syscalls:sys_enter_' "$WORK/perf-stat.txt"; then
    $KIT per-mb perf "$WORK/net.0" "$WORK/net.1" < "$WORK/perf-stat.txt" \
        | tee "$WORK/perf-per-mb.txt"
else
    echo "# perf stat: unavailable here ($(grep -v '^$' "$WORK/perf-stat.err" | head -1))"
fi
echo

$NET > "$WORK/net.2" 2>/dev/null
timeout -s INT "$SECONDS_" strace -c -f -p "$PID" -o "$WORK/strace.txt" \
    2>"$WORK/strace.err"
$NET > "$WORK/net.3" 2>/dev/null
if grep -q 'total' "$WORK/strace.txt" 2>/dev/null; then
    $KIT per-mb strace "$WORK/net.2" "$WORK/net.3" < "$WORK/strace.txt" \
        | tee "$WORK/strace-per-mb.txt"
else
    echo "# strace: unavailable here ($(grep -v '^$' "$WORK/strace.err" | head -1))"
fi
[ -n "$OUT" ] || rm -rf "$WORK"
