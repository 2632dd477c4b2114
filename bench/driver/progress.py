"""One status line on stderr while a run goes on.

On a terminal the line is redrawn in place; otherwise (CI logs, pipes) a plain line is
written every few seconds and at each phase change, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

PLAIN_INTERVAL = 5.0


class Progress:
    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.last_plain = 0.0
        self.width = 0
        self.phase = ""

    def update(self, phase: str, text: str) -> None:
        line = f"[{phase}] {text}"
        if self.tty:
            pad = max(self.width - len(line), 0)
            self.stream.write("\r" + line + " " * pad)
            self.width = len(line)
        else:
            now = time.monotonic()
            if phase == self.phase and now - self.last_plain < PLAIN_INTERVAL:
                return
            self.last_plain = now
            self.stream.write(line + "\n")
        self.phase = phase
        self.stream.flush()

    def message(self, text: str) -> None:
        self.end_line()
        self.stream.write(text + "\n")
        self.stream.flush()

    def end_line(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.width = 0
