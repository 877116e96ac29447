"""A one-line progress bar on a terminal (rows, rows/s, ETA) and the summary line at the end.

tqdm is only in the train extra and the job runs in the torch-free image, so this is the few lines it
needs: redrawn at most every `interval` seconds, and only when the stream is a terminal (a log file gets
the summary alone).
"""

from __future__ import annotations

import time
from typing import TextIO

WIDTH = 24


class Progress:
    def __init__(self, stream: TextIO, total: int | None, done: int = 0, interval: float = 0.25) -> None:
        self.stream, self.total, self.done = stream, total, done
        self.enabled = stream.isatty()
        self._start_rows, self._start = done, time.monotonic()
        self._interval, self._drawn = interval, 0.0

    def advance(self, rows: int) -> None:
        self.done += rows
        now = time.monotonic()
        if self.enabled and now - self._drawn >= self._interval:
            self._drawn = now
            self.stream.write("\r" + self.line(now - self._start) + "\x1b[K")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r" + self.line(time.monotonic() - self._start) + "\x1b[K\n")
            self.stream.flush()

    def line(self, elapsed: float) -> str:
        rate = (self.done - self._start_rows) / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            return f"{self.done:,} rows  {rate:,.0f} rows/s"
        share = self.done / self.total if self.total else 1.0
        bar = "#" * int(share * WIDTH)
        eta = (self.total - self.done) / rate if rate > 0 else None
        return (f"[{bar:<{WIDTH}}] {self.done:,}/{self.total:,} rows  {rate:,.0f} rows/s  "
                f"ETA {clock(eta) if eta is not None else '?'}")


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
