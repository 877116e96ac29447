"""The progress line: drawn on a terminal only, with rows, rows/s and ETA; the summary line's figures."""

from __future__ import annotations

import io

from jobs.local import Summary
from jobs.progress import Progress, clock


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_rows_rate_and_eta_a_pipe_gets_nothing() -> None:
    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = Progress(stream, total=1000, done=200, interval=0)
        progress.advance(300)
        progress.close()
    assert pipe.getvalue() == ""
    last = terminal.getvalue().rstrip("\n").split("\r")[-1]
    assert "500/1,000 rows" in last and "rows/s" in last and "ETA " in last and last.startswith("[############ ")


def test_line_figures() -> None:
    progress = Progress(io.StringIO(), total=1000, done=200)
    progress.done = 500  # 300 rows done by this run in 10 s: 30 rows/s, 500 left: 17 s
    assert progress.line(10.0) == "[############            ] 500/1,000 rows  30 rows/s  ETA 0:17"
    progress.total = None
    assert progress.line(10.0) == "500 rows  30 rows/s"
    assert (clock(59.6), clock(3725)) == ("1:00", "1:02:05")


def test_summary_line() -> None:
    summary = Summary(rows=12808, written=12800, rejected=8, tokens=415903, seconds=31.0, parts=2, out="emb")
    assert summary.line() == "12,808 rows (12,800 written, 8 rejected) in 2 parts, 415,903 tokens, 31.0 s, " \
        "413 rows/s -> emb"
