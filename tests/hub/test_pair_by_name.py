"""A two-tower model by name: a SigLIP repository laid out as google/siglip-base-patch16-224 is (config.json of the
pair, spiece.model and tokenizer_config.json and no tokenizer.json, preprocessor_config.json, model.safetensors;
random weights at a tiny shape) on the loopback hub; `attnserve serve --model NAME` downloads it, converts its
tokenizer, exports both towers into one bundle in the cache and serves it: texts and images over HTTP equal
transformers' features. The bundle, published as a repository of its own, is fetched with its image tower's
directory, verified and served as it is. About 45 s on 2 cores, so the heavy tier's (make reliability); a pair's
export, serving and explorer keep their tests in make test, and a model by name its own
(tests/hub/test_serve_by_name.py, tests/hub/test_image_by_name.py).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import transformers
from PIL import Image

from bench.procs import Server, terminate
from export.bundle import export_bundle
from tests.helpers.hub import FakeHub, hub_env, serve_by_name
from tests.helpers.vision import save_siglip

pytestmark = pytest.mark.heavy
REPO, BUNDLE_REPO = "org/siglip-tiny", "org/siglip-tiny-attnserve"
TEXTS = ["a photo of a cat", "two dogs on the street"]


def photo() -> bytes:
    pixels = np.random.default_rng(5).integers(0, 256, size=(37, 45, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def embeddings(server: Server, inputs: list[str]) -> np.ndarray:
    response = httpx.post(server.url + "/v1/embeddings", json={"input": inputs}, timeout=60)
    assert response.status_code == 200, response.text
    return np.asarray([row["embedding"] for row in response.json()["data"]], dtype=np.float32)


def test_a_siglip_pair_by_name_and_its_bundle_as_a_repository(tmp_path: Path) -> None:
    source = tmp_path / "repository"
    model = save_siglip(source, max_position_embeddings=64)
    assert not (source / "tokenizer.json").exists() and (source / "spiece.model").is_file()
    ids = transformers.SiglipTokenizer.from_pretrained(source)(TEXTS, padding="max_length", max_length=64,
                                                               return_tensors="pt")["input_ids"]
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    pixels = processor([Image.open(io.BytesIO(photo()))], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        texts = getattr(out := model.get_text_features(input_ids=ids), "pooler_output", out).numpy()
        image = getattr(out := model.get_image_features(pixel_values=pixels), "pooler_output", out).numpy()
    export_bundle(source, tmp_path / "bundle", variants=["fp32"])
    fake = FakeHub()
    fake.publish(REPO, source)
    fake.publish(BUNDLE_REPO, tmp_path / "bundle")
    fake.start()
    try:
        for repo in (REPO, BUNDLE_REPO):
            server = serve_by_name(tmp_path, hub_env(fake, tmp_path), repo, 300.0)
            try:
                assert np.abs(embeddings(server, TEXTS) - texts).max() <= 1e-5
                uri = f"data:image/png;base64,{base64.b64encode(photo()).decode()}"
                assert np.abs(embeddings(server, [uri]) - image).max() <= 1e-5
                info = httpx.get(server.url + "/info").json()
                assert info["modalities"] == ["text", "image"] and info["pair"]["scoring"] == "sigmoid"
            finally:
                assert terminate(server) == 0
        fetched = [a.path for a in fake.asked if a.method == "GET" and BUNDLE_REPO in a.path and "/resolve/" in a.path]
        assert any(path.endswith("/image/manifest.json") for path in fetched)
    finally:
        fake.stop()
