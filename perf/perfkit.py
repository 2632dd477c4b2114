#!/usr/bin/env python3
"""Helpers behind the perf/*.sh scripts (standard library only).

    perfkit.py collapse < perf-script.txt > stacks.folded   perf script -> folded stacks
    perfkit.py svg TITLE < stacks.folded > flame.svg        folded stacks -> flame graph
    perfkit.py top N < stacks.folded                        hottest leaf frames
    perfkit.py fold-speedscope FILE > stacks.folded         py-spy speedscope -> folded
    perfkit.py net PID > snapshot.json                      bytes on the process's TCP sockets
    perfkit.py per-mb perf|strace NET0 NET1 < tool-output   syscall counts per MB moved
                                                            between two net snapshots

Folded stacks are one line per distinct stack, frames root first separated by ';' and
the sample count last ("python3;main;handle;crc32c 17") - the format of Brendan Gregg's
stackcollapse scripts and of ``py-spy record --format raw``, so both feed ``svg``.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Iterable
from typing import TextIO

# -- perf script -> folded -------------------------------------------------------------

_HEADER = re.compile(r"^(\S.*?)\s+(\d+)(?:/\d+)?\s+\[?\d*\]?\s*[\d.]+:\s+(\d+)?\s*\S+:")
_FRAME = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def collapse(lines: Iterable[str]) -> Counter[str]:
    """Fold ``perf script`` output (one event header, then its stack, leaf first)."""
    stacks: Counter[str] = Counter()
    comm: str | None = None
    frames: list[str] = []

    def finish() -> None:
        if comm is not None:
            stacks[";".join([comm] + frames[::-1])] += 1

    for line in lines:
        if not line.strip():
            finish()
            comm, frames = None, []
            continue
        if not line[0].isspace():
            finish()
            header = _HEADER.match(line)
            comm, frames = (header.group(1).replace(" ", "_") if header else "?"), []
            continue
        frame = _FRAME.match(line)
        if frame and comm is not None:
            frames.append(_frame_name(frame.group(1), frame.group(2)))
    finish()
    return stacks


def _frame_name(symbol: str, dso: str) -> str:
    symbol = re.sub(r"\+0x[0-9a-f]+$", "", symbol)
    if symbol in ("[unknown]", ""):
        base = dso.rsplit("/", 1)[-1]
        return f"[{base}]" if base not in ("[unknown]", "") else "[unknown]"
    if dso.endswith("[kernel.kallsyms]"):
        return symbol + "_[k]"
    return symbol.replace(";", ":")


def read_folded(stream: TextIO) -> Counter[str]:
    stacks: Counter[str] = Counter()
    for line in stream:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    return stacks


def fold_speedscope(path: str) -> Counter[str]:
    """Folded stacks from a speedscope file (py-spy's "sampled" profiles, one per thread)."""
    with open(path) as f:
        doc = json.load(f)
    names = [frame["name"] + (f" ({frame['file'].rsplit('/', 1)[-1]}:{frame['line']})"
                              if frame.get("file") and frame.get("line") else "")
             for frame in doc["shared"]["frames"]]
    stacks: Counter[str] = Counter()
    for profile in doc["profiles"]:
        thread = profile.get("name", "thread").replace(" ", "_").replace(";", ":")
        # Weights are seconds per sample (1 / rate): count samples, as perf's folding does.
        for sample in profile["samples"]:
            stacks[";".join([thread] + [names[i].replace(";", ":") for i in sample])] += 1
    return stacks


# -- folded -> SVG ---------------------------------------------------------------------

ROW = 16
WIDTH = 1200
FONT = 12
MIN_FRACTION = 0.0005  # frames under 0.05% of samples are not drawn (keeps the file small)


class _Node:
    __slots__ = ("name", "count", "children")

    def __init__(self, name: str):
        self.name = name
        self.count = 0
        self.children: dict[str, _Node] = {}


def _tree(stacks: Counter[str]) -> _Node:
    root = _Node("all")
    for stack, count in stacks.items():
        root.count += count
        node = root
        for name in stack.split(";"):
            node = node.children.setdefault(name, _Node(name))
            node.count += count
    return root


def _colour(name: str) -> str:
    # Python frames (py-spy "func (file.py:12)") green, kernel orange, our native code
    # (pb_* C and the Cython modules) blue, other native (libpython, libc) red-yellow.
    h = zlib.crc32(name.encode()) % 60
    if ".py" in name:
        return f"rgb({60 + h},{170 + h // 2},{60 + h})"
    if name.endswith("_[k]"):
        return f"rgb(230,{120 + h},40)"
    if name.startswith(("pb_", "__pyx_")) or "_native" in name:
        return f"rgb({60 + h},{110 + h},230)"
    return f"rgb(225,{80 + h * 2},{40 + h // 2})"


def svg(stacks: Counter[str], title: str) -> str:
    root = _tree(stacks)
    total = max(root.count, 1)
    rows: list[tuple[int, float, float, _Node]] = []

    def walk(node: _Node, depth: int, x: float) -> int:
        rows.append((depth, x, node.count / total * WIDTH, node))
        deepest = depth
        for child in sorted(node.children.values(), key=lambda n: n.name):
            if child.count / total >= MIN_FRACTION:
                deepest = max(deepest, walk(child, depth + 1, x))
            x += child.count / total * WIDTH
        return deepest

    depth = walk(root, 0, 0.0)
    height = (depth + 1) * ROW + 3 * ROW
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="monospace" font-size="{FONT}">',
           '<rect width="100%" height="100%" fill="#f8f8f8"/>',
           f'<text x="{WIDTH / 2}" y="{ROW + 2}" text-anchor="middle" font-size="{FONT + 3}">'
           f'{html.escape(title)} ({root.count} samples)</text>']
    for level, x, width, node in rows:
        y = height - (level + 1) * ROW  # root at the bottom, as flame graphs are drawn
        label = html.escape(node.name)
        pct = 100.0 * node.count / total
        out.append(f'<g><title>{label} ({node.count} samples, {pct:.2f}%)</title>'
                   f'<rect x="{x:.2f}" y="{y}" width="{max(width - 0.5, 0.1):.2f}" '
                   f'height="{ROW - 1}" fill="{_colour(node.name)}" rx="2"/>')
        chars = int(width / (FONT * 0.6)) - 1
        if chars >= 3:
            text = node.name if len(node.name) <= chars else node.name[:chars - 2] + ".."
            out.append(f'<text x="{x + 3:.2f}" y="{y + ROW - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def top(stacks: Counter[str], n: int) -> str:
    """Self time by leaf frame, then inclusive time by frame, as two short tables."""
    total = max(sum(stacks.values()), 1)
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split(";")
        leaves[frames[-1]] += count
        for name in set(frames[1:]):
            inclusive[name] += count
    lines = [f"# {total} samples", "# self %  frame"]
    lines += [f"{100 * c / total:7.2f}  {name}" for name, c in leaves.most_common(n)]
    lines += ["", "# total %  frame (inclusive)"]
    lines += [f"{100 * c / total:7.2f}  {name}" for name, c in inclusive.most_common(n)]
    return "\n".join(lines) + "\n"


# -- syscalls per MB -------------------------------------------------------------------

def socket_bytes(pid: str) -> dict[str, list[int]]:
    """{"local peer": [bytes sent and acked, bytes received]} for the process's TCP
    connections, from ``ss -tinp`` (the kernel's tcp_info counters)."""
    text = subprocess.run(["ss", "-tinpH", "state", "established"], capture_output=True,
                          text=True, check=True).stdout
    sockets: dict[str, list[int]] = {}
    lines = text.splitlines()
    for line, info in zip(lines, lines[1:], strict=False):
        if f"pid={pid}," not in line:
            continue
        fields = line.split()
        counters = dict(re.findall(r"(bytes_acked|bytes_received):(\d+)", info))
        sockets[f"{fields[2]} {fields[3]}"] = [int(counters.get("bytes_acked", 0)),
                                               int(counters.get("bytes_received", 0))]
    return sockets


def moved_bytes(before: str, after: str) -> int | None:
    """Bytes the process sent plus received on TCP between two ``net`` snapshots.

    That is the broker's client traffic (produce in, fetch out, replication), the
    denominator that makes syscall counts comparable across loads. /proc/PID/io's
    rchar/wchar would not do: recvmsg/sendmsg and io_uring writes do not count there.
    Connections opened in between count from zero; ones closed in between are missed.
    """
    try:
        with open(before) as f:
            start = json.load(f)
        with open(after) as f:
            end = json.load(f)
    except (OSError, ValueError):
        return None
    moved = 0
    for key, (sent, received) in end.items():
        sent0, received0 = start.get(key, (0, 0))
        moved += max(sent - sent0, 0) + max(received - received0, 0)
    return moved


def syscall_counts(tool: str, text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    if tool == "perf":
        # "      1234      syscalls:sys_enter_sendfile64"
        for m in re.finditer(r"^\s*([\d,]+)\s+syscalls:sys_enter_(\w+)", text, re.M):
            counts[m.group(2)] += int(m.group(1).replace(",", ""))
    else:
        # strace -c: "% time seconds usecs/call calls errors syscall"
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and \
                    parts[-1] != "total" and parts[3].isdigit():
                counts[parts[-1]] += int(parts[3])
    return counts


def per_mb(tool: str, moved: int | None, text: str) -> str:
    counts = syscall_counts(tool, text)
    mb = (moved or 0) / 1e6
    moved_text = f"{mb:.2f} MB" if moved is not None else "? MB (no traffic snapshot)"
    lines = [f"# {tool}: {sum(counts.values())} syscalls while the broker moved {moved_text}"]
    if not counts:
        lines.append("# no syscall counts in the tool's output")
        return "\n".join(lines) + "\n"
    lines.append(f"{'syscall':<24}{'count':>12}{'per MB':>12}")
    for name, count in counts.most_common():
        if count:
            rate = f"{count / mb:12.1f}" if mb > 0 else f"{'-':>12}"
            lines.append(f"{name:<24}{count:>12}{rate}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(__doc__ or "")
        return 2
    command, args = argv[0], argv[1:]
    if command == "collapse":
        for stack, count in collapse(sys.stdin).items():
            sys.stdout.write(f"{stack} {count}\n")
    elif command == "svg":
        sys.stdout.write(svg(read_folded(sys.stdin), args[0] if args else "flame graph"))
    elif command == "top":
        sys.stdout.write(top(read_folded(sys.stdin), int(args[0]) if args else 25))
    elif command == "fold-speedscope":
        for stack, count in fold_speedscope(args[0]).items():
            sys.stdout.write(f"{stack} {count}\n")
    elif command == "net":
        try:
            json.dump(socket_bytes(args[0]), sys.stdout)
        except (OSError, subprocess.CalledProcessError) as e:  # no ss (iproute2) here
            sys.stderr.write(f"perfkit net: {e}\n")
            return 1
    elif command == "per-mb":
        sys.stdout.write(per_mb(args[0], moved_bytes(args[1], args[2]), sys.stdin.read()))
    else:
        sys.stderr.write(__doc__ or "")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
