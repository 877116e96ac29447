"""A real `python -m attnserve serve` process (the Dockerfile's command) on 127.0.0.1, driven by httpx,
checked against eager PyTorch on the same checkpoint."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from bench.procs import ROOT, clean_env
from tests.helpers.metrics import read
from tests.helpers.process import Server, free_port, launch_server, sigterm, stop, wait_ready
from tests.helpers.serving import until
from tests.helpers.tiny import review_texts

TEXTS = ["a warm and funny film", "the plot makes no sense", "dull", "an instant classic with a great cast"]
WAITING_BATCH = 32


def stop_cleanly(server: Server) -> str:
    """One SIGTERM (unless already sent), wait for the graceful shutdown (exit status 0); the log."""
    status, log = stop(server)
    assert status == 0, log
    assert "Application shutdown complete" in log, log
    return log


@pytest.fixture(scope="module")
def server_process(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = launch_server(tiny_bundle, tmp_path_factory.mktemp("integration") / "server.log")
    assert wait_ready(server, 60), server.log()
    yield server
    stop_cleanly(server)


@pytest.fixture(scope="module")
def server(server_process: Server) -> str:
    return server_process.url


@pytest.fixture(scope="module")
def waiting_process(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The batcher waits an hour for a batch to fill, and a batch is full at WAITING_BATCH inputs: a batch
    runs exactly when that many inputs wait, whenever they arrive (no clock in the checks). Access log on."""
    server = launch_server(tiny_bundle, tmp_path_factory.mktemp("waiting") / "server.log",
                           "--batch-wait-ms", "3600000", "--max-batch-size", str(WAITING_BATCH), "--access-log",
                           "--cache-bytes", "0")  # every input queues, repeats of another request's too
    assert wait_ready(server, 60), server.log()
    yield server
    stop_cleanly(server)


@pytest.fixture(scope="module")
def waiting_server(waiting_process: Server) -> str:
    return waiting_process.url


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    """Eager PyTorch on the same checkpoint: (embeddings (N, D), attentions per text (L, H, n, n))."""
    import torch

    from model.load import load_model
    from model.tokenizer import encode

    loaded = load_model(tiny_checkpoint)
    input_ids, attention_mask = encode(loaded.tokenizer, TEXTS, 64)
    with torch.no_grad():
        out = loaded.encoder(input_ids, attention_mask, output_attentions=True)
    lengths = attention_mask.sum(1).tolist()
    maps = [out.attentions[i, :, :, :n, :n].numpy() for i, n in enumerate(lengths)]
    return out.embedding.numpy(), maps


def model_runs(url: str) -> float:
    return read(url, "attnserve_model_runs_total", kind="fast", outcome="ok")


def queue_depth(url: str) -> float:
    return read(url, "attnserve_queue_depth")


def test_every_route_answers(server):
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}
    info = httpx.get(f"{server}/info").json()
    assert info["provider"] == "cpu" and info["variants"]["fast"] == "fp32"
    for path, payload in [("/embed", {"inputs": TEXTS}), ("/classify", {"inputs": TEXTS}),
                          ("/attention", {"inputs": TEXTS[:1]}), ("/tokenize", {"inputs": TEXTS}),
                          ("/v1/embeddings", {"input": TEXTS})]:
        response = httpx.post(f"{server}{path}", json=payload)
        assert response.status_code == 200, (path, response.text)
        assert response.headers["x-request-id"]
    assert httpx.get(f"{server}/nowhere").json()["error"]["code"] == "not_found"


async def test_access_log_lines_only_when_asked_for(server_process, waiting_process):
    for process in (server_process, waiting_process):
        assert httpx.post(process.url + "/tokenize", json={"inputs": "access log"}).status_code == 200
    await until(lambda: '"POST /tokenize HTTP/1.1" 200' in waiting_process.log())  # --access-log
    assert "POST /tokenize" not in server_process.log()  # the default


def test_batch_equals_one_by_one(server):
    batch = np.array(httpx.post(f"{server}/embed", json={"inputs": TEXTS}).json())
    singles = np.array([httpx.post(f"{server}/embed", json={"inputs": t}).json()[0] for t in TEXTS])
    assert np.abs(batch - singles).max() <= 1e-5


def test_embeddings_and_attention_equal_eager_pytorch(server, reference):
    embeddings, maps = reference
    served = np.array(httpx.post(f"{server}/embed", json={"inputs": TEXTS, "normalize": False}).json())
    np.testing.assert_allclose(served, embeddings, atol=1e-5)
    data = httpx.post(f"{server}/attention", json={"inputs": TEXTS}).json()["data"]
    for item, expected in zip(data, maps, strict=True):
        np.testing.assert_allclose(np.array(item["attention"]), expected, atol=1e-5)


async def test_concurrent_singles_share_one_model_run(waiting_server):
    url, before = waiting_server, model_runs(waiting_server)
    batched = read(url, "attnserve_batch_size_sum")
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:  # the batch runs only once all 32 wait
        tasks = [asyncio.create_task(client.post("/embed", json={"inputs": TEXTS[i % 4]}))
                 for i in range(WAITING_BATCH)]
        responses = await asyncio.gather(*tasks)
    assert [r.status_code for r in responses] == [200] * WAITING_BATCH
    assert model_runs(url) - before == 1 and read(url, "attnserve_batch_size_sum") - batched == WAITING_BATCH


def test_openai_client_works_unchanged(server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server}/v1", api_key="not-checked", max_retries=0)
    result = client.embeddings.create(model="tiny", input=TEXTS[:2])  # the client asks for base64
    floats = httpx.post(f"{server}/v1/embeddings", json={"input": TEXTS[:2]}).json()
    assert len(result.data) == 2 and result.usage.prompt_tokens > 0
    for got, expected in zip(result.data, floats["data"], strict=True):
        np.testing.assert_allclose(got.embedding, expected["embedding"], atol=1e-6)
    short = client.embeddings.create(model="tiny", input="dull", dimensions=8, encoding_format="float")
    assert len(short.data[0].embedding) == 8


async def test_sigterm_finishes_admitted_requests(tiny_bundle, tmp_path):
    """Admitted requests wait for a batch that would take an hour to fill; SIGTERM makes them run at once."""
    server = launch_server(tiny_bundle, tmp_path / "server.log", "--batch-wait-ms", "3600000",
                           "--cache-bytes", "0")  # every request's input queues, repeats too
    try:
        assert wait_ready(server, 60), server.log()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            tasks = [asyncio.create_task(client.post("/embed", json={"inputs": t})) for t in TEXTS * 2]
            await until(lambda: queue_depth(server.url) == len(tasks))  # all admitted, waiting for the batch
            sigterm(server)  # the one signal; stop_cleanly() below only waits
            responses = await asyncio.gather(*tasks)
        assert [r.status_code for r in responses] == [200] * len(tasks)
    finally:
        stop_cleanly(server)


async def test_client_that_disconnects_leaves_the_queue_before_compute(waiting_server):
    url, before = waiting_server, model_runs(waiting_server)
    batched = read(url, "attnserve_batch_size_sum")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        request = asyncio.create_task(client.post("/embed", json={"inputs": ["gone", "also gone"]}))
        await until(lambda: queue_depth(url) == 2)  # they wait for the batch to fill
        request.cancel()  # the client goes away: httpx closes the connection
        await until(lambda: queue_depth(url) == 0)
        # A later request fills a batch alone; had the abandoned inputs stayed queued, they would have run
        # with it. So once it is answered, exactly its inputs have run if theirs did not.
        full = {"inputs": review_texts(WAITING_BATCH)}  # distinct token ids: repeats in a request run once
        assert (await client.post("/embed", json=full)).status_code == 200
    assert model_runs(url) - before == 1 and read(url, "attnserve_batch_size_sum") - batched == WAITING_BATCH


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "attnserve", "serve", *args], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=60)


def test_invalid_bundle_stops_startup_with_one_line(tiny_bundle, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_bundle, bad)
    with (bad / "fast-fp32.onnx").open("ab") as fh:
        fh.write(b"\0")
    result = run_cli("--bundle", str(bad), "--port", str(free_port()))
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, lines
    assert "fast-fp32.onnx" in lines[0]


def test_explicit_cuda_without_cuda_fails_startup(tiny_bundle):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    result = run_cli("--bundle", str(tiny_bundle), "--provider", "cuda")
    assert result.returncode == 2 and "cuda" in result.stderr
