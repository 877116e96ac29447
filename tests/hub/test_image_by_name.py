"""An image model by name: a DINOv2 repository laid out as facebook/dinov2-small is (config.json trained at one size,
preprocessor_config.json cropping another, model.safetensors; random weights at a tiny shape) on the loopback hub;
`attnserve serve --model NAME` downloads its small files first (check_config reads the preprocessor file before the
weights), exports an image bundle into the cache and serves it; its vectors over HTTP equal transformers' on the same
image bytes; a second start needs no torch. A repository whose processor gives images of many sizes is refused before
its weights are downloaded.
"""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import transformers
from PIL import Image
from transformers.image_utils import load_image

from bench.procs import Server, terminate
from tests.helpers.hub import FakeHub, hub_env, serve_by_name, torch_blocked
from tests.helpers.vision import save_vision

REPO = "org/dinov2-tiny"
CROP = {"height": 24, "width": 24}  # the model's table covers 32 pixels: the graph resamples its positions


def photo(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(41, 57, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


PHOTOS = [photo(0), photo(1)]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("image-by-name")


@pytest.fixture(scope="module")
def hub(work: Path) -> Iterator[tuple[FakeHub, np.ndarray]]:
    """The hub with the repository published, and transformers' vectors of PHOTOS."""
    directory = work / "repository"
    model = save_vision(directory, "dinov2")
    transformers.BitImageProcessor(size={"shortest_edge": 24}, crop_size=CROP).save_pretrained(directory)
    processor = transformers.AutoImageProcessor.from_pretrained(directory, use_fast=False)
    pixels = processor([load_image(Image.open(io.BytesIO(p))) for p in PHOTOS], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        expected = model(pixel_values=pixels).pooler_output.numpy()
    fake = FakeHub()
    fake.publish(REPO, directory)
    fake.start()
    yield fake, expected
    fake.stop()


def vectors(server: Server) -> np.ndarray:
    items = [f"data:image/jpeg;base64,{base64.b64encode(p).decode()}" for p in PHOTOS]
    response = httpx.post(server.url + "/v1/embeddings", json={"model": REPO, "input": items}, timeout=60)
    assert response.status_code == 200, response.text
    return np.asarray([row["embedding"] for row in response.json()["data"]], dtype=np.float32)


def test_an_image_model_is_served_by_its_name_then_without_torch(hub: tuple[FakeHub, np.ndarray], work: Path) -> None:
    fake, expected = hub
    for env, ready_s in ((hub_env(fake, work), 300.0), (hub_env(fake, work, **torch_blocked(work)[0]), 60.0)):
        server = serve_by_name(work, env, REPO, ready_s)
        try:
            got = vectors(server)
            assert got.shape == expected.shape and float(np.abs(got - expected).max()) <= 1e-5
            info = httpx.get(server.url + "/info").json()
            assert info["modalities"] == ["image"] and (info["image"]["height"], info["image"]["width"]) == (24, 24)
        finally:
            assert terminate(server) == 0
    assert not torch_blocked(work)[1].exists()  # the second start imported no torch


def test_a_processor_of_many_sizes_is_refused_before_the_weights(hub: tuple[FakeHub, np.ndarray], work: Path) -> None:
    fake, _ = hub
    directory = work / "many-sizes"
    save_vision(directory, "vit")
    transformers.CLIPImageProcessor(do_center_crop=False).save_pretrained(directory)
    fake.publish("org/vit-many-sizes", directory)
    asked = len(fake.asked)
    argv = [sys.executable, "-m", "attnserve", "pull", "org/vit-many-sizes", "--variants", "fp32", "--cache-dir",
            str(work / "cache")]
    result = subprocess.run(argv, env=hub_env(fake, work), capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode != 0 and "many sizes" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    fetched = [a.path for a in fake.asked[asked:] if a.method == "GET" and "/resolve/" in a.path]
    assert any(p.endswith("/preprocessor_config.json") for p in fetched)
    assert not any(p.endswith("/model.safetensors") for p in fetched)
