"""Several models in one server: `[NAME=]DIR` bundles from flags and the environment, routing by the
request's `model` (OpenAI body, TEI body or query), 404 naming the served models, /v1/models, /info,
/ready and /metrics per model, and admission per model. The second model is the tiny Hugging Face BERT
bundle, next to the tiny attnserve bundle (same sizes and labels, different weights)."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
from pydantic import ValidationError

from inference.errors import ModelNotFound, StartupError
from inference.registry import ModelRegistry, ServedBundle, load_bundles, served_names
from inference.runtime.graphs import BatchKind, TokenSequence
from inference.runtime.loading import LoadedBundle
from service.cli import read_settings
from service.settings import Settings
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.process import launch_server, running, stop
from tests.helpers.serving import assert_error, serving, until


# -- settings ------------------------------------------------------------------------------------
def test_bundles_from_the_environment_and_repeated_flags(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNSERVE_BUNDLE", f"{tmp_path / 'a'}, b={tmp_path / 'b'}")
    assert Settings().bundle == [ServedBundle(path=tmp_path / "a"), ServedBundle(name="b", path=tmp_path / "b")]
    flags = ["--bundle", f"x={tmp_path}", "--bundle", f"{tmp_path / 'y'},z:1={tmp_path / 'z'}"]
    settings = read_settings(flags, "attnserve serve")  # flags win over the environment
    assert [(b.name, b.path) for b in settings.bundle] == [
        ("x", tmp_path), (None, tmp_path / "y"), ("z:1", tmp_path / "z"),
    ]
    assert Settings(bundle="/data/run=3/bundle").bundle == [ServedBundle(path=Path("/data/run=3/bundle"))]


@pytest.mark.parametrize(("value", "names"), [
    ("bad name=/x", "'bad name' is not a model name"),
    ("a=", "no directory after '='"),
    ("a=/x,a=/y", "'a' is given to more than one bundle"),
    ("", "nothing to serve: give a bundle"),
])
def test_bundle_errors_name_the_item(value, names):
    with pytest.raises(ValidationError, match=names):
        Settings(bundle=value)


def test_help_documents_the_repeatable_flag(capsys):
    with pytest.raises(SystemExit):
        read_settings(["--help"], "attnserve serve")
    assert "[NAME=]DIR" in " ".join(capsys.readouterr().out.split())


def bundle_named(name: str) -> Any:
    return SimpleNamespace(manifest=SimpleNamespace(name=name))


def test_served_names_are_given_or_the_manifests_and_unique(tmp_path):
    two = Settings(bundle=[tmp_path / "a", f"other={tmp_path / 'b'}"]).bundle
    assert served_names(two, [bundle_named("tiny"), bundle_named("tiny")]) == ["tiny", "other"]
    same = Settings(bundle=[tmp_path / "a", tmp_path / "b"]).bundle
    with pytest.raises(StartupError, match="two bundles are named 'tiny'.*NAME=DIR"):
        served_names(same, [bundle_named("tiny"), bundle_named("tiny")])
    with pytest.raises(StartupError, match="cannot be used in a URL"):
        served_names(same, [bundle_named("org/model"), bundle_named("tiny")])
    assert served_names(Settings(bundle=tmp_path).bundle, [bundle_named("org/model")]) == ["org/model"]  # alone


def test_bundles_of_one_model_share_sessions_and_tokenizer(tiny_bundle, tiny_hf_bundle, tmp_path):
    """Graphs and tokenizers are opened once per sha256: a copy of a bundle costs no second set of weights."""
    copy = shutil.copytree(tiny_bundle, tmp_path / "copy")
    settings = Settings(bundle=[tiny_bundle, f"copy={copy}", f"bert={tiny_hf_bundle}"])
    first, second, other = load_bundles(settings.bundle, settings.load_options())
    for kind in ("fast", "attention"):
        assert first.graphs[kind].session is second.graphs[kind].session
        assert first.graphs[kind].session is not other.graphs[kind].session
    assert first.tokenizer is second.tokenizer


def model_stub(name: str, full: bool = False) -> Any:
    return SimpleNamespace(name=name, batcher=SimpleNamespace(full=full, full_for=lambda priority: full))


def test_resolve_and_busy():
    one = ModelRegistry({"a": model_stub("a")})
    assert one.resolve(None).name == one.resolve("anything").name == "a"
    two = ModelRegistry({"a": model_stub("a", full=True), "b": model_stub("b")})
    assert two.resolve(None).name == "a" and two.resolve("b").name == "b"
    with pytest.raises(ModelNotFound, match="served models: a, b"):
        two.resolve("c")
    assert two.busy("a") and not two.busy("b") and not two.busy("c")  # unknown: the route answers 404
    assert not two.busy(None)  # the body may name b: only the route can tell
    assert ModelRegistry({"a": model_stub("a", True), "b": model_stub("b", True)}).busy(None)


# -- one app, two models ---------------------------------------------------------------------------
@pytest_asyncio.fixture(loop_scope="function")
async def two(tiny_bundle, tiny_hf_bundle):
    async with serving([tiny_bundle, f"bert={tiny_hf_bundle}"], intra_op_threads=1) as (app, client):
        yield app, client


async def embed(client: httpx.AsyncClient, **kwargs: Any) -> np.ndarray:
    response = await client.post("/embed", **kwargs)
    assert response.status_code == 200, response.text
    return np.asarray(response.json())


async def test_models_are_listed_and_requests_route_by_name(two, tiny_bundle, tiny_hf_bundle):
    app, client = two
    listed = (await client.get("/v1/models")).json()
    assert [m["id"] for m in listed["data"]] == ["tiny", "bert"] and listed["object"] == "list"
    by_body = await embed(client, json={"inputs": ["a cat"], "model": "bert"})
    by_query = await embed(client, json={"inputs": ["a cat"]}, params={"model": "bert"})
    default = await embed(client, json={"inputs": ["a cat"]})
    named_first = await embed(client, json={"inputs": ["a cat"], "model": "tiny"})
    np.testing.assert_array_equal(by_body, by_query)
    np.testing.assert_array_equal(default, named_first)
    assert not np.allclose(by_body, default)  # two models, two answers
    async with serving(tiny_hf_bundle, intra_op_threads=1) as (_, alone):  # each as its own server answers
        np.testing.assert_allclose(by_body, await embed(alone, json={"inputs": ["a cat"]}), rtol=1e-5, atol=1e-6)
    openai = (await client.post("/v1/embeddings", json={"input": "a cat", "model": "bert"})).json()
    assert openai["model"] == "bert"
    vector = np.asarray(openai["data"][0]["embedding"])  # normalised as the manifest says; /embed always
    np.testing.assert_allclose(vector / np.linalg.norm(vector), by_body[0], rtol=1e-5, atol=1e-6)
    attention = (await client.post("/attention", json={"inputs": "a cat", "model": "bert"})).json()
    assert attention["model"] == "bert"
    for route in ("/classify", "/tokenize"):
        assert (await client.post(route, json={"inputs": "a cat", "model": "bert"})).status_code == 200


async def test_unknown_or_two_names_are_refused(two):
    _, client = two
    for request in ({"json": {"inputs": "a", "model": "gpt"}}, {"json": {"inputs": "a"}, "params": {"model": "gpt"}}):
        error = assert_error(await client.post("/embed", **request), 404, "model_not_found")
        assert "tiny, bert" in error["message"]
    error = assert_error(await client.post("/v1/embeddings", json={"input": "a", "model": "gpt"}), 404)
    assert "tiny, bert" in error["message"]
    for route in ("/classify", "/attention", "/tokenize"):
        assert_error(await client.post(route, json={"inputs": "a", "model": "gpt"}), 404, "model_not_found")
    both = await client.post("/embed", json={"inputs": "a", "model": "tiny"}, params={"model": "bert"})
    assert "two models" in assert_error(both, 422)["message"]
    long = assert_error(await client.post("/embed", json={"inputs": "a", "model": "m" * 5000}), 404)
    assert len(long["message"]) < 200  # the name is cut short, not echoed whole


async def test_info_ready_and_metrics_cover_every_model(two):
    app, client = two
    info = (await client.get("/info")).json()
    assert info["model"] == "tiny" and [m["name"] for m in info["models"]] == ["tiny", "bert"]
    assert info["models"][1]["source"] != info["models"][0]["source"]
    assert (await client.get("/ready")).status_code == 200
    await embed(client, json={"inputs": "x", "model": "bert"})
    metrics = (await client.get("/metrics")).text
    assert 'attnserve_requests_total{caller="",model="bert",route="/embed",status="200"} 1.0' in metrics
    assert 'attnserve_model_runs_total{caller="",kind="fast",model="bert",outcome="ok"}' in metrics
    assert 'attnserve_model_runs_total{caller="",kind="fast",model="tiny",outcome="ok"}' in metrics  # its warm-up
    assert 'attnserve_requests_total{caller="",model="",route="/health",status="200"}' not in metrics  # not asked yet
    await client.get("/health")
    health = 'attnserve_requests_total{caller="",model="",route="/health",status="200"} 1.0'
    assert health in (await client.get("/metrics")).text


async def test_ready_only_when_every_model_is(tiny_bundle, tiny_hf_bundle):
    async with serving([tiny_bundle, f"bert={tiny_hf_bundle}"], wrap=GatedBundle.around) as (app, client):
        bert: GatedBundle = app.state.models.resolve("bert").bundle

        def fault() -> None:
            raise RuntimeError("broken")

        bert.fault = fault
        assert_error(await client.post("/embed", json={"inputs": "a", "model": "bert"}), 500, "inference_failed")
        error = assert_error(await client.get("/ready"), 503, "not_ready")
        assert "bert" in error["message"]
        assert (await client.post("/embed", json={"inputs": "a"})).status_code == 200  # tiny still serves
        bert.fault = None
        assert (await client.get("/ready")).status_code == 200  # the probe run decides


async def test_admission_is_per_model(tiny_bundle, tiny_hf_bundle):
    async with serving([tiny_bundle, f"bert={tiny_hf_bundle}"], wrap=GatedBundle.around, max_queue=3) as (
        app, client,
    ):
        tiny, bert = app.state.models.resolve("tiny"), app.state.models.resolve("bert")
        async with held(app, client) as plug:  # tiny's plug holds the graph thread and 1 of tiny's 3 permits
            fill = asyncio.create_task(client.post("/embed", json={"inputs": ["a", "b"]}))
            await until(lambda: tiny.batcher.full)
            assert_error(await client.post("/embed", json={"inputs": "c"}), 429, "overloaded")  # by admission
            assert_error(await client.post("/embed", json={"inputs": "c"}, params={"model": "tiny"}), 429)  # edge
            other = asyncio.create_task(client.post("/embed", json={"inputs": ["d", "e", "f"], "model": "bert"}))
            await until(lambda: bert.batcher.in_flight == 3)  # admitted: bert has its own permits
        responses = await asyncio.gather(plug, fill, other)
        assert [r.status_code for r in responses] == [200, 200, 200]
        assert tiny.batcher.in_flight == bert.batcher.in_flight == 0


RUNNING = {"now": 0, "most": 0}
RUNNING_LOCK = threading.Lock()


@dataclasses.dataclass
class Overlapping(LoadedBundle):
    """The real loaded bundle, counting graph runs in progress across every instance (each run lasts 20 ms
    more)."""

    @classmethod
    def around(cls, loaded: LoadedBundle) -> Overlapping:
        return cls(**{f.name: getattr(loaded, f.name) for f in dataclasses.fields(LoadedBundle)})

    def run_batch(
        self, kind: BatchKind, sequences: list[TokenSequence], adapters: Sequence[int] | None = None,
    ) -> Sequence[Any]:
        with RUNNING_LOCK:
            RUNNING["now"] += 1
            RUNNING["most"] = max(RUNNING["most"], RUNNING["now"])
        try:
            time.sleep(0.02)  # simulated work: a window in which a second graph thread would overlap
            return super().run_batch(kind, sequences, adapters)
        finally:
            with RUNNING_LOCK:
                RUNNING["now"] -= 1


async def test_graph_runs_of_all_models_never_overlap(tiny_bundle, tiny_hf_bundle):
    RUNNING.update(now=0, most=0)
    async with serving([tiny_bundle, f"bert={tiny_hf_bundle}"], wrap=Overlapping.around) as (_, client):
        requests = [client.post("/embed", json={"inputs": f"text {i}", "model": name})
                    for i in range(6) for name in ("tiny", "bert")]
        assert [r.status_code for r in await asyncio.gather(*requests)] == [200] * 12
    assert RUNNING["most"] == 1


async def test_two_real_bundles_over_http(tiny_bundle, tiny_hf_bundle, tmp_path):
    """The real server, the flag repeated; the same bundle twice under its manifest's name stops start-up."""
    with running(tiny_bundle, tmp_path / "two.log", "--bundle", f"bert={tiny_hf_bundle}") as server:
        url = server.url
        assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["tiny", "bert"]
        one = httpx.post(f"{url}/embed", json={"inputs": "a dog", "model": "bert"})
        assert one.status_code == 200 and len(one.json()[0]) == 32
        unknown = httpx.post(f"{url}/embed", json={"inputs": "a dog", "model": "nope"})
        assert unknown.status_code == 404 and "tiny, bert" in unknown.json()["error"]["message"]
    assert server.proc.returncode == 0, server.log()
    twice = launch_server(tiny_bundle, tmp_path / "twice.log", "--bundle", str(tiny_bundle))
    twice.proc.wait(timeout=60)
    status, log = stop(twice)
    assert status == 2 and "two bundles are named 'tiny'" in log, log
