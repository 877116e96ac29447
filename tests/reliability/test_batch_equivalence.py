"""Batching changes nothing: 200 texts of 1 to about 200 tokens (generated deterministically from a word
list; the tiny model cuts at 64) embedded alone, then inside requests with partners of very different
lengths in shuffled positions, sent concurrently so the batcher mixes requests too. Every output equals
its single result (cosine >= 0.9999, and closer to it than to any other text's), and identical requests
give identical bytes.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np

from tests.helpers.serving import graph_runs, serving
from tests.helpers.tiny import SENTENCES

WORDS = sorted({word for sentence in SENTENCES for word in sentence.split()})
COUNT = 200


def texts(count: int = COUNT, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lengths = [1 + (i * 199) // (count - 1) for i in range(count)]  # 1 .. 200 words, evenly spread
    rng.shuffle(lengths)
    return [" ".join(rng.choices(WORDS, k=n)) for n in lengths]


def groups(indices: list[int], seed: int) -> list[list[int]]:
    """Shuffled indices cut into requests of 1 to 16 inputs."""
    rng = random.Random(seed)
    order = list(indices)
    rng.shuffle(order)
    out = []
    while order:
        size = rng.randint(1, 16)
        out.append(order[:size])
        order = order[size:]
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


async def test_batched_equals_single_and_order_is_kept(tiny_bundle: Path) -> None:
    corpus = texts()
    async with serving(tiny_bundle, max_batch_size=32) as (app, client):
        async def embed(inputs: list[str]) -> np.ndarray:
            response = await client.post("/embed", json={"inputs": inputs, "normalize": False})
            assert response.status_code == 200, response.text
            return np.asarray(response.json(), dtype=np.float64)  # (N, D)

        single = np.concatenate([await embed([text]) for text in corpus])  # (200, D), one run each
        runs, sent = graph_runs(app), 0
        for seed in (1, 2):
            requests = groups(list(range(COUNT)), seed)
            sent += len(requests)
            results = await asyncio.gather(*(embed([corpus[i] for i in request]) for request in requests))
            batched = np.zeros_like(single)
            for request, result in zip(requests, results, strict=True):
                assert result.shape[0] == len(request)
                batched[request] = result
            assert cosine(batched, single).min() >= 0.9999
            # output i is input i's: nearer its own single result than any other text's
            distances = np.linalg.norm(batched[:, None, :] - single[None, :, :], axis=-1)  # (200, 200)
            own = np.diag(distances)
            same_text = np.array([[a == b for b in corpus] for a in corpus])
            assert (own[:, None] < np.where(same_text, np.inf, distances)).all()
        assert graph_runs(app) - runs < sent, "concurrent requests never shared a graph run"


async def test_identical_requests_give_identical_bytes(tiny_bundle: Path) -> None:
    inputs = texts(24, seed=3)
    async with serving(tiny_bundle) as (_, client):
        for route, body in (("/embed", {"inputs": inputs}), ("/classify", {"inputs": inputs}),
                            ("/v1/embeddings", {"input": inputs}), ("/attention", {"inputs": inputs[:4]})):
            first = await client.post(route, json=body)
            assert first.status_code == 200, first.text
            for _ in range(2):
                again = await client.post(route, json=body)
                assert again.content == first.content, route
