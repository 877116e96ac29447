"""The exact answer cache (inference.scheduling.cache, ServedModel.submit): a hit is the graph's answer bit for bit, for
every variant the tiny model can be served as; another model's fingerprint never hits; repeats within a
request run once; hits never queue; the cache stays within its bytes; what the metrics and headers say. Its
speed is measured in tests/reliability/test_cache.py."""

from __future__ import annotations

import asyncio
import base64
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inference.options import LoadOptions
from inference.runtime.graphs import FAST, TOKENS, TokenSequence
from inference.runtime.loading import load_bundle
from inference.runtime.tokenize import Encoded, TextTokenizer
from inference.scheduling.cache import ENTRY_BYTES, IDS, AnswerCache, frozen
from inference.scheduling.cache import key as entry_key
from inference.served import INLINE_TOKENIZE_CHARS
from tests.helpers.fakes import GatedBundle, held, until
from tests.helpers.metrics import sample
from tests.helpers.serving import graph_runs, serving
from tests.helpers.tiny import SENTENCES

CPU_VARIANTS = ("fp32", "fp32-opt", "int8", "int8-dynamic")


async def vectors_bytes(client, text: str) -> tuple[bytes, bytes, int]:  # noqa: ANN001
    """One text alone: its pooled vector (base64 float32, as the graph returned it and not normalised, since
    OpenAI's route normalises as the manifest says: compare the bytes served), its per-token vectors, and
    how many of the inputs were answered from the cache."""
    pooled = await client.post("/v1/embeddings", json={"input": text, "encoding_format": "base64"})
    tokens = await client.post("/embed_all", json={"inputs": text})
    assert pooled.status_code == tokens.status_code == 200, (pooled.text, tokens.text)
    cached = int(pooled.headers["x-cached-inputs"]) + int(tokens.headers["x-cached-inputs"])
    return base64.b64decode(pooled.json()["data"][0]["embedding"]), tokens.content, cached


@pytest.mark.parametrize("variant", CPU_VARIANTS)
async def test_a_cached_answer_is_the_uncached_one_bit_for_bit(variants_bundle: Path, variant: str) -> None:
    texts = SENTENCES[:6]
    async with serving(variants_bundle, variant=variant, cache_bytes=0, intra_op_threads=1) as (_, client):
        uncached = [await vectors_bytes(client, t) for t in texts]
    async with serving(variants_bundle, variant=variant, intra_op_threads=1) as (app, client):
        assert app.state.models.default.bundle.variants["fast"] == variant
        first = [await vectors_bytes(client, t) for t in texts]
        again = [await vectors_bytes(client, t) for t in texts]
    for off, miss, hit in zip(uncached, first, again, strict=True):
        assert off[:2] == miss[:2] == hit[:2]  # pooled vector and token vectors, byte for byte
        assert (off[2], miss[2], hit[2]) == (0, 0, 2)


async def test_another_models_entries_never_answer_and_a_copy_of_the_model_shares_them(
    tiny_bundle: Path, tiny_hf_bundle: Path, tmp_path: Path,
) -> None:
    copy = shutil.copytree(tiny_bundle, tmp_path / "copy")
    served = [tiny_bundle, f"bert={tiny_hf_bundle}", f"copy={copy}"]
    async with serving(served, intra_op_threads=1) as (app, client):
        models = {m.name: m for m in app.state.models}
        assert models["tiny"].fingerprint == models["copy"].fingerprint != models["bert"].fingerprint
        answers = {}
        for name in ("tiny", "bert", "copy"):
            answer = await client.post("/embed", json={"inputs": SENTENCES[0], "model": name})
            assert answer.headers["x-model-fingerprint"] == models[name].fingerprint
            answers[name] = (answer.json(), int(answer.headers["x-cached-inputs"]))
        listed = (await client.get("/v1/models")).json()["data"]
        info = (await client.get("/info")).json()
    assert answers["tiny"][1] == 0 and answers["bert"][1] == 0  # bert: another model, so a miss, whatever its ids
    assert answers["copy"] == (answers["tiny"][0], 1)  # the same model build: the same entry
    assert answers["bert"][0] != answers["tiny"][0]
    assert {m["id"]: m["fingerprint"] for m in listed} == {n: m.fingerprint for n, m in models.items()}
    assert info["fingerprint"] == models["tiny"].fingerprint and [m["fingerprint"] for m in info["models"]] == [
        models[n].fingerprint for n in ("tiny", "bert", "copy")]


def test_the_fingerprint_is_the_graph_the_tokenizer_and_the_pooling(tiny_bundle: Path, variants_bundle: Path) -> None:
    fp32, opt = (load_bundle(variants_bundle, LoadOptions(variant=v), kinds=("fast",)) for v in ("fp32", "fp32-opt"))
    tiny = load_bundle(tiny_bundle, LoadOptions(), kinds=("fast",))
    assert fp32.fingerprint != opt.fingerprint  # another graph: another build, even of the same weights
    assert tiny.fingerprint == fp32.fingerprint  # same graph, tokenizer and pooling; other name and version
    assert len(tiny.fingerprint) == 64


async def test_repeats_within_a_request_run_once_and_truncation_is_in_the_key(tiny_bundle: Path) -> None:
    long = " ".join(SENTENCES)  # past the 64-token max length: right and left truncation differ
    repeated = {"inputs": [SENTENCES[1], SENTENCES[2], SENTENCES[1]]}
    async with serving(tiny_bundle) as (app, client):
        runs = sample(app.state.metrics.render().decode(), "attnserve_batch_size_sum")
        answer = await client.post("/embed", json=repeated)
        ran = sample(app.state.metrics.render().decode(), "attnserve_batch_size_sum") - runs
        vectors = answer.json()
        assert ran == 2 and answer.headers["x-cached-inputs"] == "1" and vectors[0] == vectors[2]
        right = await client.post("/embed", json={"inputs": long})
        left = await client.post("/embed", json={"inputs": long, "truncation_direction": "Left"})
        assert left.headers["x-cached-inputs"] == "0" and left.json() != right.json()
    async with serving(tiny_bundle, cache_bytes=0) as (app, client):  # off: every input runs, repeats too
        runs = sample(app.state.metrics.render().decode(), "attnserve_batch_size_sum")
        answer = await client.post("/embed", json=repeated)
        ran = sample(app.state.metrics.render().decode(), "attnserve_batch_size_sum") - runs
        assert ran == 3 and answer.headers["x-cached-inputs"] == "0" and answer.json() == vectors


async def test_an_input_another_request_is_running_waits_for_that_run(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, GatedBundle.around) as (app, client):
        model = app.state.models.default
        gated: GatedBundle = model.bundle
        runs = graph_runs(app)
        gated.gate.clear()
        first = asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[0]}))
        await until(lambda: gated.waiting == 1)
        second = asyncio.create_task(client.post("/embed", json={"inputs": [SENTENCES[1], SENTENCES[0]]}))
        third = asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[0]}))
        # SENTENCES[1] queued; SENTENCES[0], twice, waits for the run (with their permits: 1 + 2 + 1 in flight)
        await until(lambda: model.batcher.depth == 1 and model.batcher.in_flight == 4)
        await asyncio.sleep(0.05)
        gated.gate.set()
        one, two, three = await asyncio.gather(first, second, third)
        assert graph_runs(app) - runs == 2  # SENTENCES[0] ran once, for all three requests
        assert two.json()[1] == three.json()[0] == one.json()[0] and two.headers["x-cached-inputs"] == "1"
        assert int(three.headers["x-queue-time"]) >= 50  # the wait for the other request's run, as queue time
        assert model.batcher.in_flight == 0  # the waiting input's permit came back with its answer


async def test_when_the_run_waited_for_fails_the_waiting_request_runs_the_input_itself(tiny_bundle: Path) -> None:
    failures = iter([RuntimeError("the first run fails")])

    def fail_once() -> None:
        if (error := next(failures, None)) is not None:
            raise error

    async with serving(tiny_bundle, GatedBundle.around) as (app, client):
        model = app.state.models.default
        gated: GatedBundle = model.bundle
        alone = (await client.post("/embed", json={"inputs": SENTENCES[4]})).json()  # in the cache from now on
        gated.gate.clear()
        gated.fault = fail_once
        first = asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[3]}))
        await until(lambda: gated.waiting == 1)
        runs = graph_runs(app)
        second = asyncio.create_task(client.post("/embed", json={"inputs": [SENTENCES[4], SENTENCES[3]]}))
        await until(lambda: model.batcher.in_flight == 2)  # the first's input, and the second's waiting for it
        assert model.batcher.depth == 0
        gated.gate.set()
        failed, answered = await asyncio.gather(first, second)
        assert graph_runs(app) - runs == 2  # the failed run, then the second request's own
    assert failed.status_code == 500 and answered.status_code == 200
    assert answered.json()[0] == alone[0] and answered.headers["x-cached-inputs"] == "1"  # SENTENCES[4]: a hit
    assert model.batcher.in_flight == 0


async def test_an_interactive_request_does_not_wait_for_a_bulk_requests_run(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, GatedBundle.around) as (app, client):
        model = app.state.models.default
        gated: GatedBundle = model.bundle
        gated.gate.clear()
        bulk = asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[0]}, headers={"x-priority": "bulk"}))
        await until(lambda: gated.waiting == 1)
        interactive = asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[0]}))
        await until(lambda: gated.waiting == 2)  # its own run of the same input, in the interactive lane
        gated.gate.set()
        slow, fast = await asyncio.gather(bulk, interactive)
    assert slow.json() == fast.json() and fast.headers["x-cached-inputs"] == "0"


async def test_a_run_that_timed_out_in_the_queue_times_out_those_waiting_for_it(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, GatedBundle.around, queue_timeout_s=0.5) as (app, client):
        model = app.state.models.default
        async with held(app, client) as plug:
            first = asyncio.create_task(client.post("/embed", json={"inputs": SENTENCES[0]}))
            await until(lambda: model.batcher.depth == 1)
            second = asyncio.create_task(client.post("/embed", json={"inputs": [SENTENCES[0]]}))
            await until(lambda: model.batcher.in_flight == 3)  # the plug, the first, the second waiting for it
            answers = await asyncio.gather(first, second)
            assert model.batcher.depth == 0  # the second never queued a run of its own
        assert (await plug).status_code == 200
    assert [a.status_code for a in answers] == [504, 504]


async def test_a_hit_never_waits_for_the_graph(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, GatedBundle.around) as (app, client):
        first = await client.post("/embed", json={"inputs": SENTENCES[:3]})
        async with held(app, client) as plug:
            runs = graph_runs(app)
            again = await asyncio.wait_for(client.post("/embed", json={"inputs": SENTENCES[:3]}), 30)
            assert again.json() == first.json() and again.headers["x-cached-inputs"] == "3"
            assert graph_runs(app) == runs and app.state.models.default.batcher.in_flight == 1  # the plug's
            assert int(again.headers["x-queue-time"]) == 0
        assert (await plug).status_code == 200


async def test_chunk_windows_are_cached_one_by_one(tiny_bundle: Path) -> None:
    document = " ".join(SENTENCES * 3)
    async with serving(tiny_bundle) as (_, client):
        body = {"inputs": document, "chunking": "windows"}
        first = await client.post("/embed", json=body)
        windows = len(first.json()[0])
        second = await client.post("/embed", json=body)
        other_overlap = await client.post("/embed", json={**body, "chunk_overlap": 8})
    assert windows > 2 and second.json() == first.json() and second.headers["x-cached-inputs"] == str(windows)
    assert int(other_overlap.headers["x-cached-inputs"]) < windows  # other windows: other token ids


async def test_the_metrics_count_hits_misses_evictions_and_bytes(tiny_bundle: Path) -> None:
    one_entry = ENTRY_BYTES + 32 * 4 + 2 * 4  # tiny: 32 floats pooled, 2 logits
    async with serving(tiny_bundle, cache_bytes=3 * one_entry) as (app, client):
        for ids in ([5, 6, 7], [8, 9], [5, 6, 7], [10, 11], [12]):  # token ids: answers only, no text's ids kept
            assert (await client.post("/v1/embeddings", json={"input": [ids]})).status_code == 200
        metrics = (await client.get("/metrics")).text
        answers = app.state.models.default.answers
    assert sample(metrics, "attnserve_cache_hits_total", model="tiny") == 1
    assert sample(metrics, "attnserve_cache_misses_total", model="tiny") == 4
    assert sample(metrics, "attnserve_cache_evictions_total") == 1 and len(answers) == 3
    assert sample(metrics, "attnserve_cache_bytes") == answers.bytes == 3 * one_entry


async def test_a_text_seen_before_is_not_tokenised_again_and_its_cut_and_side_are_in_the_key(tiny_bundle: Path) -> None:
    long = " ".join(SENTENCES)  # past the 64-token max length
    async with serving(tiny_bundle) as (app, client):
        encoded = tokenised(app.state.models.default.bundle.tokenizer)

        async def usage(text: str) -> tuple[list[float], int, str]:
            answer = await client.post("/v1/embeddings", json={"input": text})
            assert answer.status_code == 200, answer.text
            return answer.json()["data"][0]["embedding"], answer.json()["usage"]["prompt_tokens"], \
                answer.headers["x-cached-inputs"]

        first, again = await usage(SENTENCES[0]), await usage(SENTENCES[0])
        assert encoded == [SENTENCES[0]] and again == (first[0], first[1], "1")  # the same vector and token count
        right = await client.post("/embed", json={"inputs": long})
        left = await client.post("/embed", json={"inputs": long, "truncation_direction": "Left"})
        refused = await client.post("/embed", json={"inputs": long, "truncate": False})
        # right, left, and the refused one twice (again with the whole request, to name the input's place in it)
        assert encoded == [SENTENCES[0], long, long, long, long] and left.json()[0] != right.json()[0]
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "input_too_long", refused.text
        assert (await client.post("/embed", json={"inputs": SENTENCES[0], "truncate": False})).status_code == 200
        third = await client.post("/embed", json={"inputs": [SENTENCES[0], SENTENCES[0], long], "truncate": False})
        assert "input 2 " in third.json()["error"]["message"]  # its place in the request, the known text counted
        attention = await client.post("/attention", json={"inputs": SENTENCES[0], "layers": [0]})
        tokens = await client.post("/tokenize", json={"inputs": SENTENCES[0]})
        assert attention.json()["data"][0]["tokens"] == tokens.json()[0]  # the text's real tokens, not ids alone
    async with serving(tiny_bundle, cache_bytes=0) as (app, client):
        encoded = tokenised(app.state.models.default.bundle.tokenizer)
        for _ in range(2):
            assert (await usage(SENTENCES[0]))[0] == first[0]
        assert encoded == [SENTENCES[0], SENTENCES[0]]  # the cache off: every text tokenised


async def test_a_large_requests_texts_are_kept_too_their_keys_hashed_off_the_event_loop(tiny_bundle: Path) -> None:
    """A corpus sent in large requests, then a text of it alone: the text is not tokenised again. A large
    request's keys (up to 256 texts of 20,000 characters) are hashed off the event loop, a small one's on it."""
    texts = [f"{i}: {SENTENCES[i % len(SENTENCES)]}" for i in range(80)]
    assert sum(len(t) for t in texts) >= INLINE_TOKENIZE_CHARS  # tokenised off the event loop
    async with serving(tiny_bundle) as (app, client):
        shared = app.state.models.default._shared
        encoded, hashed_on_the_loop, keys = tokenised(app.state.models.default.bundle.tokenizer), [], shared._text_keys

        def recorded(*args: Any) -> list[bytes]:
            hashed_on_the_loop.append(threading.current_thread() is threading.main_thread())
            return keys(*args)

        shared._text_keys = recorded
        assert (await client.post("/embed", json={"inputs": texts})).status_code == 200
        assert encoded == texts and hashed_on_the_loop == [False]
        alone = await client.post("/embed", json={"inputs": texts[3]})
        assert alone.status_code == 200 and alone.headers["x-cached-inputs"] == "1"
        assert encoded == texts and hashed_on_the_loop == [False, True]  # not tokenised again
        kept = [entry[IDS] for entry in shared.cache._entries.values() if IDS in entry]
        assert len(kept) == len(texts) and all(ids.dtype == np.int32 for ids in kept)  # half of int64's bytes


def tokenised(tokenizer: TextTokenizer) -> list[str]:
    """The texts `tokenizer.encode` is called with from now on, in order."""
    texts: list[str] = []
    encode = tokenizer.encode

    def counting(batch: Sequence[str], *args: Any) -> list[Encoded]:
        texts.extend(batch)
        return encode(batch, *args)

    tokenizer.encode = counting  # type: ignore[method-assign,assignment]
    return texts


# -- the structure ------------------------------------------------------------------------------------------
def outputs(n: int) -> dict[str, np.ndarray]:
    return {"embeddings": np.arange(n, dtype=np.float32)}


def test_least_recently_used_out_first_within_the_bytes() -> None:
    cache = AnswerCache(3 * (ENTRY_BYTES + 40))
    for key in (b"a", b"b", b"c"):
        cache.put(key, frozen(outputs(10)))
    assert cache.get(b"a") is not None  # a is now the most recently used
    cache.put(b"d", frozen(outputs(10)))
    assert cache.get(b"b") is None and cache.get(b"a") is not None and cache.evictions == 1
    assert cache.bytes == 3 * (ENTRY_BYTES + 40) and len(cache) == 3
    cache.put(b"huge", frozen(outputs(1000)))  # larger than the whole cache: not kept, nothing evicted for it
    assert cache.get(b"huge") is None and len(cache) == 3


def test_off_keeps_nothing_and_entries_are_read_only_copies() -> None:
    off = AnswerCache(0)
    off.put(b"a", frozen(outputs(4)))
    assert len(off) == 0 and off.get(b"a") is None
    batch = np.arange(8, dtype=np.float32).reshape(2, 4)
    kept = frozen({"embeddings": batch[1]})["embeddings"]  # a row of a batch's output
    batch[1] = -1  # the batch's array changing does not change the entry
    assert kept.tolist() == [4, 5, 6, 7] and kept.base is None and not kept.flags.writeable


def test_a_key_tells_ids_alone_from_ids_with_type_ids_or_attended_flags() -> None:
    ids, zeros, ones = np.array([5, 6, 7]), np.zeros(3, dtype=np.int64), np.ones(3, dtype=np.int64)
    sequences = [TokenSequence(ids), TokenSequence(ids, ones), TokenSequence(ids, attended=ones),
                 TokenSequence(ids, ones, ones), TokenSequence(ids, attended=zeros)]
    keys = [entry_key("model", FAST, sequence) for sequence in sequences]
    assert len(set(keys)) == len(keys)
    assert entry_key("model", FAST, TokenSequence(ids.astype(np.int32))) == keys[0]  # equal ids, equal key
    assert entry_key("model", FAST, TokenSequence.of(ids, zeros)) == keys[0]  # a lone text's type ids are all 0
    assert entry_key("model", TOKENS, sequences[0]) != keys[0] != entry_key("model", FAST, sequences[0], adapter=1)
