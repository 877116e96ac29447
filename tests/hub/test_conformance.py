"""The model names users name most (tests/helpers/hub_repos.ROWS), each published on one loopback hub as its real
repository is laid out, at a tiny shape with random weights; `attnserve pull` of each into the bundle cache (variant
fp32; Qwen3-Reranker with `--reranker qwen3`), then one `attnserve serve --model ALIAS=NAME ...` of them all, without
torch, compared (max abs 1e-5) with what the pipeline a user would otherwise call returns: sentence-transformers with
each prompt (jina-embeddings-v3 with each task's LoRA merged into its weights too, asked for by a request's `task`),
CrossEncoder, FlagEmbedding, colbert-ai, Qwen3-Reranker's scoring, SparseEncoder.

Only the rows whose tests a run selects are published, pulled and served. Rows whose family and output other rows and
`make test`'s family tests already cover (a plain BERT or XLM-R checkpoint in sentence-transformers' or the
cross-encoder's layout) are in the heavy tier (`make reliability`): their tests are marked `heavy`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from bench.procs import Server, launch, terminate, wait_ready
from tests.helpers.hub import FakeHub, hub_env, torch_blocked
from tests.helpers.hub_repos import DOCUMENTS, QUERY, ROWS, TEXTS, Expected, Row

pytestmark = pytest.mark.slow
TOLERANCE = 1e-5
HEAVY = {"sentence-transformers/all-MiniLM-L6-v2", "intfloat/multilingual-e5-small", "BAAI/bge-reranker-v2-m3"}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance")


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> list[Row]:
    """The rows whose tests this run selected (make test's selection leaves the heavy ones out)."""
    names = {item.callspec.params["row"].name for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec")}
    return [row for row in ROWS if row.name in names]


@pytest.fixture(scope="module")
def hub(work: Path, served: list[Row]) -> Iterator[tuple[FakeHub, dict[str, Expected]]]:
    """The fake hub with every served row's repository published, and each one's reference answers."""
    fake, expected = FakeHub(), {}
    for row in served:
        directory = work / "repositories" / row.name.replace("/", "--")
        expected[row.name] = row.build(directory)
        fake.publish(row.name, directory)
    fake.start()
    yield fake, expected
    fake.stop()


def pull_all(hub: FakeHub, work: Path, served: list[Row]) -> None:
    """`attnserve pull` of every served row into the cache, its main run in turn in one process (one torch import,
    not one per model, as serve's own subprocesses would be)."""
    calls = [[row.name, "--variants", "fp32", "--cache-dir", str(work / "cache"), "-q",
              *(["--reranker", row.reranker] if row.reranker else [])] for row in served]
    script = f"import sys\nfrom attnserve.pull import main\nsys.exit(max(main(argv) for argv in {calls!r}))"
    result = subprocess.run([sys.executable, "-c", script], env=hub_env(hub, work), capture_output=True, text=True,
                            timeout=1200, check=False)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def server(hub: tuple[FakeHub, dict[str, Expected]], work: Path, served: list[Row]) -> Iterator[Server]:
    """Every served row pulled into the cache, then one `attnserve serve --model ...` of them all, without torch:
    each name resolved on the hub to the commit its bundle was made of."""
    pull_all(hub[0], work, served)
    blocked, mark = torch_blocked(work)
    rerankers = [f"--reranker={row.alias}={row.reranker}" for row in served if row.reranker]
    models = [f"--model={row.alias}={row.name}" for row in served]  # beside others, each under a URL-safe alias
    argv = [sys.executable, "-m", "attnserve", "serve", *models, *rerankers, "--variants", "fp32", "--cache-dir",
            str(work / "cache"), "--intra-op-threads", "1", "--port", "{port}"]
    started = launch("attnserve", argv, work / "serve.log", hub_env(hub[0], work, **blocked))
    if not wait_ready(started, 120):
        status = terminate(started)
        pytest.fail(f"not ready (exit status {status}):\n{started.log()}")
    yield started
    assert terminate(started) == 0
    assert not mark.exists()


def post(server: Server, route: str, body: dict) -> object:
    response = httpx.post(server.url + route, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def assert_near(got: np.ndarray | list[np.ndarray], want: np.ndarray | list[np.ndarray]) -> None:
    pairs = list(zip(got, want, strict=True)) if isinstance(want, list) else [(np.asarray(got), want)]
    for ours, theirs in pairs:
        assert np.shape(ours) == np.shape(theirs), (np.shape(ours), np.shape(theirs))
        assert float(np.abs(np.asarray(ours) - theirs).max()) <= TOLERANCE, float(np.abs(ours - theirs).max())


def rows(kind: str) -> list[Any]:
    """The rows that serve `kind`, as parameters: those in HEAVY marked for the heavy tier."""
    return [pytest.param(row, id=row.name, marks=[pytest.mark.heavy] if row.name in HEAVY else [])
            for row in ROWS if kind in row.serves]


@pytest.mark.parametrize("row", rows("embedding"))
def test_embeddings_equal_sentence_transformers_under_each_prompt(server, hub, row):
    expected = hub[1][row.name]
    asked = [({"prompt_name": prompt} if prompt else {}, want) for prompt, want in expected.embeddings.items()]
    asked += [({"task": task}, want) for task, want in expected.tasks.items()]  # the task's adapter and prompt
    assert asked, f"{row.name} is served with nothing to compare it with"
    for fields, want in asked:
        data = post(server, "/v1/embeddings", {"input": TEXTS, "model": row.alias} | fields)["data"]
        assert_near(np.array([item["embedding"] for item in data]), want)


@pytest.mark.parametrize("row", rows("rerank"))
def test_rerankers_score_as_their_reference(server, hub, row):
    ranked = post(server, "/rerank", {"model": row.alias, "query": QUERY, "texts": DOCUMENTS})
    assert_near(np.array([r["score"] for r in sorted(ranked, key=lambda r: r["index"])]), hub[1][row.name].scores)


@pytest.mark.parametrize("row", rows("multi-vector"))
def test_token_vectors_equal_the_late_interaction_reference(server, hub, row):
    expected = hub[1][row.name]
    for input_type, want in (("document", expected.documents), ("query", expected.queries)):
        if want is None:
            continue
        texts = texts_of(row, input_type)
        data = post(server, "/v1/multi-vector", {"model": row.alias, "input": texts, "input_type": input_type})["data"]
        assert_near([np.array(item["embeddings"]) for item in data], want)


def texts_of(row: Row, input_type: str) -> list[str]:
    """The texts a row's token vectors were made of (the ColBERT helpers' own queries and documents)."""
    if "colbert" in row.name:
        from tests.helpers.colbert import DOCUMENTS as COLBERT_DOCUMENTS
        from tests.helpers.colbert import QUERIES

        return QUERIES[:2] if input_type == "query" else COLBERT_DOCUMENTS[:3]
    return DOCUMENTS


@pytest.mark.parametrize("row", rows("sparse"))
def test_sparse_vectors_equal_the_reference(server, hub, row):
    want = hub[1][row.name].sparse
    got = np.zeros_like(want)
    for i, values in enumerate(post(server, "/embed_sparse", {"model": row.alias, "inputs": TEXTS})):
        for value in values:
            got[i, value["index"]] = value["value"]
    assert (got != 0).sum() == (want != 0).sum()
    assert_near(got, want)
