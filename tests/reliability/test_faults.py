"""Runtime faults, in process: a graph that raises for a while, and a graph that returns NaN or Inf.

A raising graph (an injected fake, tests.helpers.fakes): the requests it hits get 500 JSON
(inference_failed, no internals), /ready turns 503 and comes back to 200 by itself once the fault
clears (a /ready probe run, no other traffic needed), /health stays 200 throughout. Non-finite
outputs: the request that got them gets 500 JSON (non_finite_output), never NaN written as null; its
batch partners and /ready are unaffected. (A bundle whose weights give NaN for everything never
becomes ready: see test_bad_bundles.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from inference.runtime.loading import LoadedBundle
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.serving import assert_error, serving, until


async def test_raising_graph_gives_500_then_ready_recovers_by_itself(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, wrap=GatedBundle.around) as (app, client):
        runtime = app.state.models.default.bundle

        def fault() -> None:
            raise RuntimeError("CUDA error: an illegal memory access at /opt/secret/kernel.cu:42")

        runtime.fault = fault
        for _ in range(3):
            responses = await asyncio.gather(
                client.post("/embed", json={"inputs": ["a", "b"]}),
                client.post("/v1/embeddings", json={"input": "c"}),
                client.post("/classify", json={"inputs": "d"}),
            )
            for response in responses:
                error = assert_error(response, 500, "inference_failed")
                assert "secret" not in error["message"] and "CUDA" not in error["message"]
            assert_error(await client.get("/ready"), 503, "not_ready")  # its probe run fails too
            assert (await client.get("/health")).status_code == 200
        runtime.fault = None
        ready = await client.get("/ready")  # no inference request in between: the probe decides
        assert ready.status_code == 200, ready.text
        assert (await client.post("/embed", json={"inputs": "a"})).status_code == 200
        assert (await client.get("/health")).status_code == 200
        metrics = (await client.get("/metrics")).text
        assert 'attnserve_model_runs_total{caller="",kind="fast",model="tiny",outcome="error"}' in metrics


class PoisonedSession:
    """Wraps an onnxruntime session: rows whose input ids contain `poison` get `value` in every output."""

    def __init__(self, session: Any, poison: int, value: float) -> None:
        self.session, self.poison, self.value = session, poison, value

    def run(self, names: list[str], feeds: dict[str, np.ndarray], options: Any = None) -> list[np.ndarray]:
        outputs = self.session.run(names, feeds, options)
        rows = (feeds["input_ids"] == self.poison).any(axis=1)  # (B,)
        for output in outputs:
            output[rows] = self.value
        return outputs

    def get_providers(self) -> list[str]:
        return self.session.get_providers()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
async def test_non_finite_outputs_are_a_json_error_for_that_request_only(tiny_bundle: Path, value: float) -> None:
    def poisoned(runtime: LoadedBundle) -> LoadedBundle:
        poison = runtime.tokenizer.encode(["boring"], True)[0].ids[1]  # [CLS] boring [SEP]
        for runner in runtime.graphs.values():
            runner.session = PoisonedSession(runner.session, int(poison), value)  # type: ignore[attr-defined]
        return GatedBundle.around(runtime)

    async with serving(tiny_bundle, wrap=poisoned, cache_bytes=0) as (app, client), held(app, client) as plug:
        engine = app.state.models.default
        requests = [
            client.post("/embed", json={"inputs": ["a warm and funny film", "boring and far too long"]}),
            client.post("/embed", json={"inputs": ["the plot makes no sense"]}),
            client.post("/classify", json={"inputs": "boring"}),
            client.post("/v1/embeddings", json={"input": ["boring"]}),
            client.post("/attention", json={"inputs": "boring"}),
            client.post("/classify", json={"inputs": "great performances all round"}),
        ]
        tasks = [asyncio.create_task(r) for r in requests]
        await until(lambda: engine.batcher.depth == 7)  # seven inputs in six requests
        engine.bundle.gate.set()  # the queued requests run as shared batches
        responses = await asyncio.gather(*tasks)
        assert (await plug).status_code == 200
        for index in (0, 2, 3, 4):
            assert responses[index].headers["content-type"] == "application/json"
            orjson.loads(responses[index].content)  # valid JSON, not a body with NaN in it
            error = assert_error(responses[index], 500, "non_finite_output")
            assert "NaN or Inf" in error["message"]
        for index in (1, 5):
            assert responses[index].status_code == 200, responses[index].text
            assert "null" not in responses[index].text
        assert (await client.get("/ready")).status_code == 200
