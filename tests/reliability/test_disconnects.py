"""Clients that hang up while queued, on a real uvicorn server (httptools, real sockets) run in this process
with an injected runtime whose graph runs the test can hold (tests.helpers.fakes): their inputs leave the
queue and none reaches the model (read from the batch-size counter in /metrics), nothing logs a traceback
(stderr and log records captured), and the queue gauge returns to 0.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import orjson
import pytest

from tests.helpers.fakes import GatedBundle, held
from tests.helpers.metrics import sample
from tests.helpers.serving import until, uvicorn_here
from tests.helpers.tiny import SENTENCES

CLIENTS = 20
INPUTS_EACH = 3


async def hang_up_while_queued(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = orjson.dumps({"inputs": SENTENCES[:INPUTS_EACH]})  # the same for every client: the cache is off
    writer.write(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    return reader, writer


async def test_clients_gone_while_queued_never_reach_the_model(
    tiny_bundle: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with (
        uvicorn_here(tiny_bundle, GatedBundle.around, cache_bytes=0) as (app, url),  # every input queues
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        batcher = app.state.models.default.batcher
        async with held(app, client) as plug:
            before = (await client.get("/metrics")).text
            port = int(url.rsplit(":", 1)[1])
            connections = [await hang_up_while_queued(port) for _ in range(CLIENTS)]
            await until(lambda: batcher.depth == CLIENTS * INPUTS_EACH)
            for _, writer in connections:  # the clients go away
                writer.transport.abort()
            await until(lambda: batcher.depth == 0)
        assert (await plug).status_code == 200
        # Each batch starts with the oldest waiting input, and all 61 fit one batch: abandoned inputs left in
        # the queue would run before or with a later request. So once it is answered, exactly its one input
        # has run if none of theirs did (no sleep needed to find out).
        assert (await client.post("/embed", json={"inputs": "still serving"})).status_code == 200
        after = (await client.get("/metrics")).text
        ran = sample(after, "attnserve_batch_size_sum") - sample(before, "attnserve_batch_size_sum")
        assert ran == 1, f"{ran - 1} of {CLIENTS * INPUTS_EACH} abandoned inputs ran"
        assert batcher.in_flight == 0 and sample(after, "attnserve_queue_depth") == 0
    errors = capfd.readouterr().err
    assert "Traceback" not in errors, errors
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text

