"""Clients that hang up while queued, on a real uvicorn server (httptools, real sockets) run in this process
with an injected runtime whose graph runs the test can hold (tests.helpers.fakes): their inputs leave the
queue and none reaches the model (read from the batch-size counter in /metrics), nothing logs a traceback
(stderr and log records captured), and the queue gauge returns to 0.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import orjson
import pytest
import uvicorn
from fastapi import FastAPI

from service.app import create_app
from service.deadlines import with_header_timeout
from service.runtime import load_runtime
from service.settings import Settings
from tests.helpers.fakes import GatedRuntime, held
from tests.helpers.process import free_port
from tests.helpers.serving import until

CLIENTS = 20
INPUTS_EACH = 3


@asynccontextmanager
async def uvicorn_here(bundle: Path) -> AsyncIterator[tuple[FastAPI, str]]:
    """create_app served by uvicorn.Server on 127.0.0.1 in this event loop, as `attnserve serve` serves it."""
    settings = Settings(bundle=bundle, intra_op_threads=1)
    app = create_app(settings, GatedRuntime.around(load_runtime(settings)))
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on",
                            http=with_header_timeout(settings.header_timeout_s))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.05)
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


async def hang_up_while_queued(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = orjson.dumps({"inputs": [f"gone {i}" for i in range(INPUTS_EACH)]})
    writer.write(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    return reader, writer


async def test_clients_gone_while_queued_never_reach_the_model(
    tiny_bundle: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with uvicorn_here(tiny_bundle) as (app, url), httpx.AsyncClient(base_url=url, timeout=30) as client:
        batcher = app.state.engine.batcher
        async with held(app, client) as plug:
            before = (await client.get("/metrics")).text
            port = int(url.rsplit(":", 1)[1])
            connections = [await hang_up_while_queued(port) for _ in range(CLIENTS)]
            await until(lambda: batcher.depth == CLIENTS * INPUTS_EACH)
            for _, writer in connections:  # the clients go away
                writer.transport.abort()
            await until(lambda: batcher.depth == 0)
        assert (await plug).status_code == 200
        await asyncio.sleep(0.5)  # a worker that ignored the cancellations would run them now
        after = (await client.get("/metrics")).text
        ran_sum = 'attnserve_batch_size_sum{model="tiny"}'
        ran = metric(after, ran_sum) - metric(before, ran_sum)
        assert ran == 0, f"{ran} of {CLIENTS * INPUTS_EACH} abandoned inputs ran"
        assert batcher.in_flight == 0 and metric(after, 'attnserve_queue_depth{model="tiny"}') == 0
        assert (await client.post("/embed", json={"inputs": "still serving"})).status_code == 200
    errors = capfd.readouterr().err
    assert "Traceback" not in errors, errors
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text

