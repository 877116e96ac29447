"""Chunking of long inputs: windows cut as the issue defines them, spans that map back to the text, pooled
vectors equal to the same computation done by hand on eager PyTorch, short texts unchanged bit for bit,
the limits (overlap, windows per input, characters) and admission counted in windows."""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from inference import chunking
from inference.runtime.tokenize import TextTokenizer
from service.settings import Settings
from tests.helpers.fakes import GatedBundle, held
from tests.helpers.serving import assert_error, graph_runs, serving, until

MAX_LENGTH = 64  # the tiny model's; windows hold 62 content tokens
OVERLAP = 32  # a request's default overlap (chunking.default_overlap: 32 fits in the window)
SHORT = "a warm and funny film"


@pytest.fixture(scope="module")
def tokenizer(tiny_bundle: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_bundle / "tokenizer.json"))


@pytest.fixture(scope="module")
def text_tokenizer(tokenizer: Tokenizer) -> TextTokenizer:
    return TextTokenizer(tokenizer, MAX_LENGTH)


@pytest.fixture(scope="module")
def document(tokenizer: Tokenizer) -> str:
    """About 5,000 tokens of the tiny vocabulary's whole words (one token each), over 20,000 characters."""
    words = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and len(w) >= 4)
    rng = random.Random(0)
    text = " ".join(rng.choice(words) for _ in range(5_000))
    assert len(tokenizer.encode(text, add_special_tokens=False).ids) == 5_000
    assert len(text) > 20_000  # over the plain per-input character limit
    return text


def content_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def window_count(tokenizer: Tokenizer, text: str, overlap: int = OVERLAP) -> int:
    return chunking.count_windows(len(content_ids(tokenizer, text)), MAX_LENGTH - 2, overlap)


# -- the windows -----------------------------------------------------------------------------------
@pytest.mark.parametrize("overlap", [0, 1, 32, 61])
def test_windows_start_every_w_minus_n_tokens_and_the_last_reaches_the_end(tokenizer, text_tokenizer, overlap):
    text = " ".join(["the plot makes no sense", "a delightful comedy with a great cast"] * 12)
    ids, size = content_ids(tokenizer, text), MAX_LENGTH - 2
    windows = chunking.cut(text_tokenizer, [text], overlap, max_windows=10_000)[0]
    step, cls, sep = size - overlap, tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    for k, window in enumerate(windows):
        expected = ids[k * step: k * step + size]
        assert window.ids.tolist() == [cls, *expected, sep] and window.tokens == len(expected)
    assert (len(windows) - 1) * step + windows[-1].tokens == len(ids)  # the last one ends the text
    assert (len(windows) - 2) * step + size < len(ids)  # the one before it did not
    assert len(windows) == chunking.count_windows(len(ids), size, overlap)


def test_spans_map_back_to_the_text(tokenizer, text_tokenizer, document):
    windows = chunking.cut(text_tokenizer, [document], 7, max_windows=10_000)[0]
    for window in windows:
        assert content_ids(tokenizer, document[window.start: window.stop]) == window.ids[1:-1].tolist()
    assert windows[0].start == 0 and windows[-1].stop == len(document)


def test_a_short_text_is_one_window_its_usual_encoding(tokenizer, text_tokenizer):
    [window] = chunking.cut(text_tokenizer, [SHORT], 32, max_windows=1)[0]
    assert window.ids.tolist() == text_tokenizer.encode([SHORT], truncate=False)[0].ids.tolist()
    assert (window.start, window.stop, window.tokens) == (0, len(SHORT), len(content_ids(tokenizer, SHORT)))
    [empty] = chunking.cut(text_tokenizer, [""], 0, max_windows=1)[0]
    assert empty.tokens == 0 and empty.length == 2  # the special tokens only


def test_the_default_overlap_is_32_or_half_a_window_too_small_for_it():
    assert [chunking.default_overlap(size) for size in (510, 62, 33, 32, 18, 1)] == [32, 32, 32, 16, 9, 0]


def test_pool_weights_windows_by_content_tokens_and_keeps_one_window_exact():
    values = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    windows = [chunking.Window(np.zeros(5, np.int64), 0, 1, 3), chunking.Window(np.zeros(3, np.int64), 1, 2, 1)]
    np.testing.assert_allclose(chunking.pool(values, windows), [0.75, 0.25])
    one = np.random.default_rng(0).standard_normal((1, 7)).astype(np.float32)
    assert chunking.pool(one, windows[:1]).tobytes() == one[0].tobytes()


# -- pooled vectors against eager PyTorch ------------------------------------------------------------
def eager_windows(tiny_checkpoint: Path, text: str, overlap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """By hand: cut the content ids, wrap each window in [CLS] ... [SEP], run eager PyTorch one window at a
    time; returns each window's pre-normalisation pooled vector (K, D), logits (K, C) and content counts (K,)."""
    import torch

    from model.encoder import mean_pool
    from model.load import load_model

    loaded = load_model(tiny_checkpoint)
    assert loaded.encoder.config.pooling == "mean"
    ids = loaded.tokenizer.encode(text, add_special_tokens=False).ids
    cls, sep = loaded.tokenizer.token_to_id("[CLS]"), loaded.tokenizer.token_to_id("[SEP]")
    size, vectors, logits, counts = MAX_LENGTH - 2, [], [], []
    start = 0
    while True:
        piece = ids[start: start + size]
        input_ids = torch.tensor([[cls, *piece, sep]])
        with torch.no_grad():
            out = loaded.encoder(input_ids)
        vectors.append(mean_pool(out.token_states, torch.ones_like(input_ids))[0].numpy())
        logits.append(out.logits[0].numpy())
        counts.append(len(piece))
        if start + size >= len(ids):
            return np.array(vectors), np.array(logits), np.array(counts, dtype=np.float64)
        start += size - overlap


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_pooled_vector_and_logits_equal_the_hand_computation(tiny_bundle, tiny_checkpoint, document):
    text = document[:3_000]
    vectors, logits, counts = eager_windows(tiny_checkpoint, text, OVERLAP)  # the request names no overlap
    assert len(counts) > 5
    expected = (counts / counts.sum()) @ vectors.astype(np.float64)  # (D,) before normalisation
    async with serving(tiny_bundle, intra_op_threads=1) as (_, client):
        embed = await client.post("/embed", json={"inputs": text, "chunking": "mean"})
        openai = await client.post("/v1/embeddings", json={"input": text, "chunking": "mean"})
        classify = await client.post("/classify", json={"inputs": text, "chunking": "mean", "raw_scores": True})
        windows = await client.post("/embed", json={"inputs": text, "chunking": "windows", "normalize": False})
    served = np.array(embed.json()[0])
    assert cosine(served, expected) >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(served), 1, atol=1e-6)  # /embed normalises by default
    raw = np.array(openai.json()["data"][0]["embedding"])  # the tiny model does not normalise: the mean itself
    assert cosine(raw, expected) >= 0.99999 and np.allclose(raw, expected, atol=1e-5)
    served_logits = {s["label"]: s["score"] for s in classify.json()[0]}
    expected_logits = (counts / counts.sum()) @ logits  # (C,) labels neg, pos
    np.testing.assert_allclose([served_logits["neg"], served_logits["pos"]], expected_logits, atol=1e-5)
    per_window = np.array([w["embedding"] for w in windows.json()[0]])
    np.testing.assert_allclose(per_window, vectors, atol=1e-5)
    assert [w["tokens"] for w in windows.json()[0]] == counts.tolist()


async def test_a_5000_token_document_embeds_pooled_and_per_window(tiny_bundle, document):
    size, step = MAX_LENGTH - 2, MAX_LENGTH - 2 - OVERLAP
    expected_windows = 1 + -(-(5_000 - size) // step)
    async with serving(tiny_bundle, intra_op_threads=1) as (_, client):
        truncated = await client.post("/embed", json={"inputs": document})
        assert_error(truncated, 422, "input_too_long")  # the plain character limit still holds without chunking
        pooled = await client.post("/embed", json={"inputs": document, "chunking": "mean"})
        windows = await client.post("/embed", json={"inputs": document, "chunking": "windows"})
        openai_pooled = await client.post("/v1/embeddings", json={"input": [document, SHORT], "chunking": "mean"})
        openai_windows = await client.post("/v1/embeddings", json={"input": document, "chunking": "windows"})
    assert pooled.status_code == windows.status_code == 200, (pooled.text, windows.text)
    assert openai_pooled.status_code == openai_windows.status_code == 200
    assert np.array(pooled.json()).shape == (1, 32)
    assert len(windows.json()[0]) == expected_windows
    data = openai_windows.json()["data"]
    assert [d["index"] for d in data] == list(range(expected_windows)) and {d["input_index"] for d in data} == {0}
    run = 5_000 + expected_windows * 2 + (expected_windows - 1) * OVERLAP  # content, special and shared tokens
    assert openai_windows.json()["usage"]["prompt_tokens"] == run
    assert [d["index"] for d in openai_pooled.json()["data"]] == [0, 1]
    vectors = np.array([w["embedding"] for w in windows.json()[0]])
    tokens = np.array([w["tokens"] for w in windows.json()[0]], dtype=np.float64)
    by_hand = (tokens / tokens.sum()) @ np.array([d["embedding"] for d in data], dtype=np.float64)
    assert cosine(np.array(openai_pooled.json()["data"][0]["embedding"]), by_hand) >= 0.99999
    assert vectors.shape == (expected_windows, 32)


async def test_a_short_text_is_unchanged_bit_for_bit(tiny_bundle):
    async with serving(tiny_bundle, intra_op_threads=1) as (_, client):
        for path, key in (("/embed", "inputs"), ("/v1/embeddings", "input"), ("/classify", "inputs")):
            plain = await client.post(path, json={key: SHORT})
            for mode in ("mean", "windows"):
                chunked = await client.post(path, json={key: SHORT, "chunking": mode, "chunk_overlap": 0})
                assert chunked.status_code == 200, chunked.text
                if mode == "mean":
                    assert chunked.content == plain.content, path
        windows = (await client.post("/embed", json={"inputs": SHORT, "chunking": "windows"})).json()[0]
        assert [windows[0]["embedding"]] == (await client.post("/embed", json={"inputs": SHORT})).json()
        ids = [t["id"] for t in (await client.post("/tokenize", json={"inputs": SHORT})).json()[0]]
        by_ids = await client.post("/v1/embeddings", json={"input": ids, "chunking": "mean"})
        assert by_ids.json()["data"] == (await client.post("/v1/embeddings", json={"input": ids})).json()["data"]


async def test_token_id_inputs_are_cut_as_given_into_max_length_windows(tiny_bundle):
    ids = list(range(5, 105))  # 100 ids, no special tokens added
    async with serving(tiny_bundle, intra_op_threads=1) as (_, client):
        response = await client.post("/v1/embeddings", json={"input": ids, "chunking": "windows", "chunk_overlap": 4})
    spans = [(d["start"], d["stop"], d["tokens"]) for d in response.json()["data"]]
    assert spans == [(0, 64, 64), (60, 100, 40)]


# -- limits ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, key", [("/embed", "inputs"), ("/v1/embeddings", "input"), ("/classify", "inputs")])
async def test_overlap_must_be_below_the_window(tiny_bundle, path, key):
    async with serving(tiny_bundle, intra_op_threads=1) as (_, client):
        for overlap in (0, 61):
            ok = await client.post(path, json={key: SHORT * 20, "chunking": "windows", "chunk_overlap": overlap})
            assert ok.status_code == 200, ok.text
        error = assert_error(await client.post(path, json={key: SHORT, "chunking": "mean", "chunk_overlap": 62}),
                             422, "out_of_range")
        assert "62 tokens" in error["message"]
        assert_error(await client.post(path, json={key: SHORT, "chunking": "mean", "chunk_overlap": -1}),
                     422, "validation_error")
        assert_error(await client.post(path, json={key: SHORT, "chunking": "all"}), 422, "validation_error")


async def test_windows_per_input_cap_names_its_setting(tiny_bundle, tokenizer, document):
    assert window_count(tokenizer, document[:1_000]) > 3
    async with serving(tiny_bundle, intra_op_threads=1, max_windows_per_input=3) as (app, client):
        runs = graph_runs(app)
        body = {"inputs": [SHORT, document[:1_000]], "chunking": "mean"}
        error = assert_error(await client.post("/embed", json=body), 422, "input_too_long")
        assert "ATTNSERVE_MAX_WINDOWS_PER_INPUT" in error["message"] and "input 1" in error["message"]
        assert graph_runs(app) == runs  # refused before any work


async def test_chunked_inputs_have_their_own_character_limit(tiny_bundle, document):
    async with serving(tiny_bundle, intra_op_threads=1, max_chunked_input_chars=25_000) as (_, client):
        error = assert_error(await client.post("/embed", json={"inputs": document, "chunking": "mean"}),
                             422, "input_too_long")
        assert "ATTNSERVE_MAX_CHUNKED_INPUT_CHARS" in error["message"]
        fits = await client.post("/embed", json={"inputs": document[:25_000], "chunking": "mean"})
        assert fits.status_code == 200, fits.text


async def test_a_document_at_the_default_chunked_limit_passes_the_default_payload_limit(tiny_bundle, document):
    defaults = Settings(bundle=tiny_bundle)
    most = defaults.request_limits().for_model(MAX_LENGTH).max_chunked_input_chars  # the model's default
    assert most is not None and defaults.payload_limit_bytes >= 6 * most + 1024  # \uXXXX escapes
    text = (document * 5)[:most]
    async with serving(tiny_bundle, intra_op_threads=1, max_windows_per_input=2_000) as (_, client):
        response = await client.post("/embed", json={"inputs": text, "chunking": "mean"})
    assert response.status_code == 200, response.text


async def test_admission_counts_windows(tiny_bundle, tokenizer, document):
    text = document[:1_000]
    windows = window_count(tokenizer, text)
    assert windows >= 4
    queue = windows + 1  # room for the plug and this text's windows, no more
    async with serving(tiny_bundle, wrap=GatedBundle.around, intra_op_threads=1, max_queue=queue) as (app, client):
        batcher = app.state.models.default.batcher
        error = assert_error(await client.post("/embed", json={"inputs": [text, SHORT, SHORT], "chunking": "mean"}),
                             422, "too_many_inputs")  # windows + 2 permits can never fit the queue
        assert "ATTNSERVE_MAX_QUEUE" in error["message"]
        async with held(app, client) as plug:
            chunked = asyncio.create_task(client.post("/embed", json={"inputs": text, "chunking": "windows"}))
            await until(lambda: batcher.in_flight == 1 + windows)  # the plug, then one permit per window
            assert_error(await client.post("/embed", json={"inputs": SHORT}), 429, "overloaded")
        assert (await plug).status_code == 200
        assert len((await chunked).json()[0]) == windows
        assert batcher.in_flight == 0


async def test_tokenising_a_long_document_runs_off_the_event_loop(tiny_bundle, document):
    threads: list[str] = []

    class Spy(TextTokenizer):
        def content(self, texts, prompt=""):  # records where the work runs, then does it
            threads.append(threading.current_thread().name)
            return super().content(texts, prompt)

    def wrap(runtime):
        spy = Spy.__new__(Spy)
        spy.__dict__.update(runtime.tokenizer.__dict__)
        runtime.tokenizer = spy
        return runtime

    async with serving(tiny_bundle, wrap=wrap, intra_op_threads=1) as (_, client):
        response = await client.post("/embed", json={"inputs": document, "chunking": "mean"})
    assert response.status_code == 200
    assert threads and threads[0].startswith("attnserve-cpu"), threads  # the engine's CPU executor
