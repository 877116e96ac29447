"""A real `python -m attnserve serve` process (the Dockerfile's command) on 127.0.0.1, driven by httpx,
checked against eager PyTorch on the same checkpoint."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers.process import free_port, serve_command, server_env, terminate

TEXTS = ["a warm and funny film", "the plot makes no sense", "dull", "an instant classic with a great cast"]
ROOT = Path(__file__).resolve().parents[2]


def start(bundle: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env, command = server_env(), serve_command(bundle, port, *flags)
    log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process; a file never blocks it
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {read_log(proc)}")
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not become ready")


def stop(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM, wait for the graceful shutdown (exit status 0), and return the log."""
    terminate(proc)
    log = read_log(proc)
    assert proc.returncode == 0, log
    assert "Application shutdown complete" in log, log
    return log


def read_log(proc: subprocess.Popen[bytes]) -> str:
    proc.log.seek(0)  # type: ignore[attr-defined]
    return proc.log.read().decode()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def server(tiny_bundle: Path) -> Iterator[str]:
    proc, url = start(tiny_bundle)
    yield url
    stop(proc)


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
    text = httpx.get(f"{url}/metrics").text
    match = re.search(r'attnserve_model_runs_total\{kind="fast",model="tiny",outcome="ok"\} ([0-9.e+]+)', text)
    return float(match.group(1)) if match else 0.0


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


async def test_concurrent_singles_share_model_runs(server):
    before = model_runs(server)
    async with httpx.AsyncClient(base_url=server, timeout=30) as client:
        responses = await asyncio.gather(*(client.post("/embed", json={"inputs": TEXTS[i % 4]}) for i in range(32)))
    assert all(r.status_code == 200 for r in responses)
    runs = model_runs(server) - before
    assert 1 <= runs < 32, runs


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


async def test_sigterm_finishes_admitted_requests(tiny_bundle):
    proc, url = start(tiny_bundle, "--batch-wait-ms", "4000")  # admitted requests sit in the queue at SIGTERM
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        tasks = [asyncio.create_task(client.post("/embed", json={"inputs": t})) for t in TEXTS * 2]
        await until(lambda: queue_depth(url) + sum(t.done() for t in tasks) >= len(tasks))  # all admitted
        proc.send_signal(signal.SIGTERM)
        responses = await asyncio.gather(*tasks)
    assert [r.status_code for r in responses] == [200] * len(tasks)
    stop(proc)


async def test_client_that_disconnects_leaves_the_queue_before_compute(tiny_bundle):
    proc, url = start(tiny_bundle, "--batch-wait-ms", "3000")  # the worker holds queued inputs for 3 s
    try:
        before = model_runs(url)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            request = asyncio.create_task(client.post("/embed", json={"inputs": ["gone", "also gone"]}))
            await until(lambda: queue_depth(url) == 2)
            request.cancel()  # the client goes away: httpx closes the connection
            await until(lambda: queue_depth(url) == 0, timeout_s=2)  # well inside the batch wait
        await asyncio.sleep(3)
        assert model_runs(url) == before
        assert httpx.post(f"{url}/embed", json={"inputs": "still serving"}, timeout=30).status_code == 200
    finally:
        stop(proc)


async def until(condition, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def queue_depth(url: str) -> float:
    match = re.search(r'^attnserve_queue_depth\{model="tiny"\} ([0-9.e+]+)$', httpx.get(f"{url}/metrics").text, re.M)
    return float(match.group(1)) if match else 0.0


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run([sys.executable, "-m", "attnserve", "serve", *args], cwd=ROOT, env=env,
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
