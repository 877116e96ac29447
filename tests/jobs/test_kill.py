"""A real `python -m attnserve embed` process, killed (SIGKILL) or interrupted (SIGINT) after two parts,
then run again with the same arguments: the output equals an uninterrupted run's (also with --chunking
windows, on documents of several windows).

The input is a pipe the test feeds, so the kill lands at a known point without timing: the job has
written and recorded two parts and waits for the rows of the third.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq
import pytest

from bench.procs import clean_env
from jobs.local import Job, run
from jobs.options import Chunking, JobOutput
from tests.jobs.corpus import job_model, long_texts, rejects, texts

ROOT = Path(__file__).resolve().parents[2]
PART_ROWS = 20
WINDOWS = Chunking("windows", 8, 512)


def _as_in_a_terminal() -> None:
    """In the child before exec: SIGINT's default action, as for a command run in a terminal. A shell
    without job control starts background commands (CI runners, `make test &`) with SIGINT ignored, the
    job inherits that like any Unix program, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lines(chunking: Chunking | None) -> list[str]:
    """4 parts; every 11th line is empty (a reject). With chunking, documents of 2 to 5 windows."""
    docs = long_texts(70) if chunking is not None else texts(70)
    return [t if i % 11 else "" for i, t in enumerate(docs)]


def _command(fifo: Path, bundle: Path, out: Path, chunking: Chunking | None) -> list[str]:
    flags = ["--chunking", chunking.mode, "--chunk-overlap", str(chunking.overlap)] if chunking is not None else []
    return [sys.executable, "-m", "attnserve", "embed", str(fifo), "--format", "text", "--bundle", str(bundle),
            "--out", str(out), "--part-rows", str(PART_ROWS), "--intra-op-threads", "1", *flags]


def _wait(condition: Callable[[], bool], proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the job exited ({proc.returncode}): {proc.stderr.read().decode() if proc.stderr else ''}")
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _writer(fifo: Path, proc: subprocess.Popen[bytes]) -> IO[bytes]:
    """The pipe's write end, once the job has opened its read end (it does after loading the bundle)."""
    fds: list[int] = []

    def opened() -> bool:
        try:
            fds.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        return bool(fds)

    _wait(opened, proc)
    os.set_blocking(fds[0], True)
    return os.fdopen(fds[0], "wb")


def _recorded_parts(out: Path) -> int:
    try:
        return len(json.loads((out / "_job.json").read_text())["parts"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


@pytest.mark.parametrize("signum, status, chunking", [(signal.SIGKILL, -signal.SIGKILL, None),
                                                      (signal.SIGINT, 130, None),
                                                      (signal.SIGKILL, -signal.SIGKILL, WINDOWS)])
def test_killed_then_rerun_equals_an_uninterrupted_run(tiny_bundle: Path, tmp_path: Path, signum, status,
                                                       chunking) -> None:
    fifo, out, lines = tmp_path / "docs.fifo", tmp_path / "out", _lines(chunking)
    os.mkfifo(fifo)
    data = "".join(line + "\n" for line in lines).encode()
    proc = subprocess.Popen(_command(fifo, tiny_bundle, out, chunking), cwd=ROOT, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_as_in_a_terminal)
    with _writer(fifo, proc) as pipe:
        pipe.write(b"".join(line.encode() + b"\n" for line in lines[:50]))  # 2.5 parts
        pipe.flush()
        _wait(lambda: _recorded_parts(out) == 2, proc)
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == status
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if signum == signal.SIGINT:
        assert "stopped by SIGINT; run the same command again to resume" in stderr

    again = subprocess.Popen(_command(fifo, tiny_bundle, out, chunking), cwd=ROOT, env=clean_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with _writer(fifo, again) as pipe:
        pipe.write(data)
    stdout, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr.decode()
    assert "resuming after 2 parts" in stderr.decode()
    assert stdout.decode().startswith("70 rows (63 written, 7 rejected) in 4 parts")

    whole = tmp_path / "whole"
    (tmp_path / "docs.txt").write_bytes(data)
    run(Job((tmp_path / "docs.txt",), whole, "text", part_rows=PART_ROWS, output=JobOutput(chunking=chunking)),
        job_model(tiny_bundle), io.StringIO())
    for index in range(4):
        name = f"part-{index:05d}.parquet"
        assert pq.read_table(out / name).equals(pq.read_table(whole / name)), name
    assert rejects(out) == rejects(whole)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
