"""Graceful shutdown under load, on a real server: SIGTERM while open-loop traffic flows. Every request the
server had admitted completes with 200, new connections are refused after the signal, and the process exits
0 within the drain time (ATTNSERVE_GRACEFUL_TIMEOUT_S). (~10 s in CI and in full)

`--batch-wait-ms 1500` keeps every admitted request in the server for about 1.5 s, so at the signal many are
in flight and the drain is long enough to probe for refused connections.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from tests.reliability.load import TRANSPORT_ERROR, Server, mixed_requests, open_loop, running_server

GRACEFUL_S = 10
RATE, DURATION_S, SIGNAL_AT_S = 20.0, 5.0, 2.5
MARGIN_S = 0.3  # requests sent this long before the signal were surely read by the server
REFUSED_FROM_S = 0.5  # uvicorn notices the signal on its next 0.1 s tick; a busy machine may take longer


async def signal_and_probe(server: Server, at: float) -> tuple[float, list[bool], float]:
    """SIGTERM at perf_counter `at`; then try new connections until the process ends. Returns (signal time,
    refused-or-not per probe made from REFUSED_FROM_S on, seconds from the signal to the exit)."""
    await asyncio.sleep(max(0.0, at - time.perf_counter()))
    signalled = time.perf_counter()
    server.proc.send_signal(signal.SIGTERM)
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    probes: list[bool] = []
    while server.proc.poll() is None and time.perf_counter() - signalled < GRACEFUL_S + 5:
        if time.perf_counter() - signalled >= REFUSED_FROM_S:
            try:
                _, writer = await asyncio.open_connection(host, port)
                writer.close()
                probes.append(False)
            except ConnectionRefusedError:
                probes.append(True)
        await asyncio.sleep(0.1)
    await asyncio.to_thread(server.proc.wait, GRACEFUL_S + 5)
    return signalled, probes, time.perf_counter() - signalled


@pytest.mark.slow
async def test_sigterm_under_load_drains_admitted_requests_and_exits_zero(tiny_bundle: Path, tmp_path: Path) -> None:
    flags = ("--batch-wait-ms", "1500", "--graceful-timeout-s", str(GRACEFUL_S))
    with running_server(tiny_bundle, tmp_path / "server.log", *flags) as server:
        start = time.perf_counter()
        load = asyncio.create_task(open_loop(server.url, RATE, DURATION_S, mixed_requests((1, 2, 4)), timeout_s=20))
        signalled, probes, drain_s = await signal_and_probe(server, start + SIGNAL_AT_S)
        ledger = await load
        log = server.log()
    cut = signalled - ledger.started
    before = [status for at, status, _ in ledger.rows if at < cut - MARGIN_S]
    around = [status for at, status, _ in ledger.rows if at >= cut - MARGIN_S]
    report = (f"{ledger.summary()}; signal at {cut:.2f} s, exit {drain_s:.2f} s after it; "
              f"{len(before)} sent before, after: {sorted(set(around))}; probes refused {probes}")
    print("\n" + report)
    assert ledger.answered == ledger.sent, report
    assert len(before) >= 20 and set(before) == {200}, report  # admitted before the signal: all 200
    assert set(around) <= {200, TRANSPORT_ERROR}, report  # later: served, or the connection refused/closed
    assert probes and all(probes), report  # new connections are refused while it drains
    assert server.proc.returncode == 0 and drain_s <= GRACEFUL_S, report
    assert "Traceback" not in log, log
