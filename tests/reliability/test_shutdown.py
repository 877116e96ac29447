"""Graceful shutdown under load, on a real server: one SIGTERM while requests are admitted and more arrive.

`--batch-wait-ms 3600000` keeps admitted requests in the queue (an hour: longer than any run of this test)
until the signal makes the batchers run what waits: a burst of 8 requests is sent, and the queue gauge
proves every one of its inputs was admitted (not a clock) before the signal. Then an open-loop stream
starts, and one SIGTERM is sent (never a second: an orchestrator sends one, and uvicorn takes a second as
"force quit"). What the code decides: every admitted request is answered 200; the stream's requests are
answered 200 (admitted), 503 (shutting down) or refused at the socket, never another status; once a new
connection is refused, every later one is too, until the process ends; the process exits 0 by itself
(within ATTNSERVE_GRACEFUL_TIMEOUT_S; the helper would SIGKILL it after 60 s) with no traceback.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.metrics import read
from tests.helpers.process import Server, running, sigterm, terminate
from tests.helpers.serving import until
from tests.helpers.tiny import review_texts
from tests.reliability.load import TRANSPORT_ERROR, Ledger, mixed_requests, open_loop

FLAGS = ("--batch-wait-ms", "3600000", "--graceful-timeout-s", "30")
SIZES = [1 + i % 3 for i in range(8)]
TEXTS = review_texts(sum(SIZES))  # distinct token ids for the tiny model: a repeat in the queue runs once
BURST = [{"inputs": TEXTS[sum(SIZES[:i]):sum(SIZES[:i + 1])]} for i in range(len(SIZES))]


async def probe_until_exit(server: Server) -> list[bool]:
    """Open (and close) new connections every 10 ms until the process ends: refused or not, in order. A connection
    reset as it opens counts as refused: the kernel took it into the listener's backlog, and the listener, closed
    by the signal, never accepted it."""
    refused: list[bool] = []
    while server.proc.poll() is None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.close()
            refused.append(False)
        except (ConnectionRefusedError, ConnectionResetError):
            refused.append(True)
        await asyncio.sleep(0.01)
    return refused


async def signal_under_load(server: Server, client: httpx.AsyncClient) -> tuple[list[httpx.Response], Ledger,
                                                                                list[bool], int]:
    burst = [asyncio.create_task(client.post("/embed", json=body)) for body in BURST]
    await until(lambda: read(server.url, "attnserve_queue_depth") == sum(len(b["inputs"]) for b in BURST))
    stream = asyncio.create_task(open_loop(server.url, 20, 3, mixed_requests((1, 2)), timeout_s=40))
    probes = asyncio.create_task(probe_until_exit(server))  # from before the signal, so a fast drain is still seen
    await asyncio.sleep(0.05)
    sigterm(server)
    status = await asyncio.to_thread(terminate, server, 60)  # waits for the exit; SIGKILL only past 60 s
    return list(await asyncio.gather(*burst)), await stream, await probes, status


@pytest.mark.slow
async def test_sigterm_under_load_answers_every_admitted_request_and_exits_zero(tiny_bundle: Path,
                                                                                 tmp_path: Path) -> None:
    with running(tiny_bundle, tmp_path / "server.log", *FLAGS) as server:
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            burst, stream, probes, status = await signal_under_load(server, client)
        elapsed_s, log = time.monotonic() - started, server.log()
    report = f"exit {status}, {elapsed_s:.1f} s after the burst; stream {stream.summary()}; probes refused {probes}"
    assert [r.status_code for r in burst] == [200] * len(BURST), report
    assert [len(r.json()) for r in burst] == [len(b["inputs"]) for b in BURST], report
    assert stream.answered == stream.sent and set(stream.by_status()) <= {200, 503, TRANSPORT_ERROR}, report
    assert True in probes and all(probes[probes.index(True):]), report  # refused from the first refusal on
    assert status == 0, f"{report}\n{log}"
    assert "Application shutdown complete" in log and "Traceback" not in log, log
