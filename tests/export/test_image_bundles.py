"""Image models exported to bundles (export.images, schema 5's `image` section): ViT, DINOv2 (with registers) and
CLIP's image tower, random weights at two shapes, each gated by the export and then compared, graph by graph in
onnxruntime, with transformers on images it prepares itself from bytes (inference.runtime.images, no torch), against
transformers' own image processor and model: pixel values, pooled vectors, token states, logits and attention maps to
max abs 1e-5.

Shape letters: B batch, T tokens, L layers, H heads.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers
from PIL import Image

from bundle.manifest import SCHEMA_VERSION, Manifest
from bundle.preprocessing import FILE_NAME
from bundle.verify import verify_bundle
from export.bundle import export_bundle
from export.images import ImageExportError
from export.refusals import ExportError
from inference.runtime.images import load_processing, pixel_values
from model.load import check_config
from tests.helpers.vision import (
    HEAVY_IMAGE_CASES,
    IMAGE_CASES,
    reference_model,
    save_image_model,
    save_vision,
    shared_bundle,
)

TOLERANCE = 1e-5


def photos(count: int = 3) -> list[bytes]:
    """PNG and JPEG bytes of seeded pictures of mixed sizes."""
    rng = np.random.default_rng(1)
    out = []
    for index in range(count):
        pixels = rng.integers(0, 256, size=(40 + 17 * index, 50 + 9 * index, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG" if index % 2 == 0 else "JPEG")
        out.append(buffer.getvalue())
    return out


def reference(model: torch.nn.Module, directory: Path, images: list[bytes]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """transformers' pixel values (its Pillow processor) and its outputs under our graph's output names."""
    processor = transformers.AutoImageProcessor.from_pretrained(directory, use_fast=False)
    pixels = processor([Image.open(io.BytesIO(data)) for data in images], return_tensors="pt")["pixel_values"]
    extra = {"interpolate_pos_encoding": True} if type(model).__name__.startswith(("ViT", "CLIP")) else {}
    with torch.no_grad():
        out = model(pixel_values=pixels, output_attentions=True, output_hidden_states=True, **extra)
    if hasattr(out, "logits"):  # ViTForImageClassification: no pooler, so its class token's final state pools
        with torch.no_grad():
            states = model.vit(pixel_values=pixels, **extra).last_hidden_state  # (B, T, D), the final norm's
        values = {"embeddings": states[:, 0], "token_embeddings": states, "logits": out.logits}
    else:
        pooled = out.image_embeds if hasattr(out, "image_embeds") else out.pooler_output
        values = {"embeddings": pooled, "token_embeddings": out.last_hidden_state}
    values["attentions"] = torch.stack(out.attentions, dim=1)  # (B, L, H, T, T)
    return pixels.numpy(), {name: value.numpy() for name, value in values.items()}


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.heavy) if case in HEAVY_IMAGE_CASES else case
                                  for case in IMAGE_CASES])
def test_image_bundle_serves_transformers_numbers(tmp_path_factory: pytest.TempPathFactory, case: str) -> None:
    """The case's fp32 export (tests.helpers.vision.shared_bundle: the serving tests serve the same bundle)."""
    source, bundle = shared_bundle(tmp_path_factory, case)
    manifest = verify_bundle(bundle)
    assert manifest.schema_version == SCHEMA_VERSION == 6 and manifest.modality == "image"
    assert manifest.tokenizer is None and manifest.image is not None and (bundle / FILE_NAME).is_file()
    assert not (bundle / "tokenizer.json").exists()
    images = photos()
    theirs, expected = reference(reference_model(case, source), source, images)
    processing = load_processing(bundle)
    ours = np.stack([pixel_values(data, processing) for data in images])  # (B, C, H, W), without torch
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= 1e-6
    spec = manifest.image
    assert (spec.height, spec.width) == ours.shape[-2:] and spec.tokens == expected["token_embeddings"].shape[1]
    for entry in manifest.graphs:
        session = ort.InferenceSession(str(bundle / entry.file), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        got = dict(zip(names, session.run(names, {"pixel_values": ours}), strict=True))
        compared = [name for name in names if name in expected]
        assert set(compared) == set(expected) - ({"attentions"} if entry.kind == "fast" else set()), names
        for name in compared:
            assert got[name].shape == expected[name].shape, name
            assert np.abs(got[name] - expected[name]).max() <= TOLERANCE, (entry.file, name)
    fast = manifest.graph("fast", "fp32")
    assert fast is not None and fast.measured["cpu"].batch_invariant


def test_default_variants_gate_an_image_model_and_measure_its_speed(tmp_path: Path) -> None:
    """fp32 and fp32-opt (onnxruntime's optimiser over a ViT graph), each gated; with two fast graphs the export
    times them at IMAGE_SPEED_BATCHES images."""
    save_image_model(tmp_path / "source", "vit-small")
    manifest = export_bundle(tmp_path / "source", tmp_path / "bundle")
    fast = {e.variant: e for e in manifest.graphs if e.kind == "fast"}
    assert set(fast) == {"fp32", "fp32-opt"}
    tokens = manifest.image.tokens  # type: ignore[union-attr]
    assert set(fast["fp32-opt"].measured["cpu"].ms_per_batch) == {f"32x{tokens}", f"1x{tokens}"}


def test_what_an_image_export_refuses(tmp_path: Path) -> None:
    """No preprocessor file, one of many image sizes, int8 variants: each refused by name before a graph is built;
    check_config says the same from the small files alone."""
    save_vision(tmp_path / "source", "vit")
    with pytest.raises(ValueError, match=FILE_NAME):
        check_config(tmp_path / "source")
    with pytest.raises(ImageExportError, match=FILE_NAME):
        export_bundle(tmp_path / "source", tmp_path / "bundle", variants=["fp32"])
    transformers.CLIPImageProcessor(do_center_crop=False).save_pretrained(tmp_path / "source")
    with pytest.raises(ValueError, match="many sizes"):
        check_config(tmp_path / "source")
    with pytest.raises(ImageExportError, match="many sizes"):
        export_bundle(tmp_path / "source", tmp_path / "bundle", variants=["fp32"])
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "source")
    check_config(tmp_path / "source")
    with pytest.raises(ExportError, match="int8-dynamic"):
        export_bundle(tmp_path / "source", tmp_path / "bundle", variants=["fp32", "int8-dynamic"])
    assert not (tmp_path / "bundle").exists()


def test_manifest_says_each_modality_and_older_bundles_read_as_text(tiny_bundle: Path) -> None:
    """A schema 4 manifest reads as a text model's; an image manifest needs its image section and no tokenizer, a
    text one its tokenizer."""
    data = json.loads((tiny_bundle / "manifest.json").read_text())
    older = Manifest.model_validate({**data, "schema_version": 4})
    assert older.modality == "text" and older.input_file == (older.tokenizer, older.tokenizer_sha256)
    with pytest.raises(ValueError, match="image section"):
        Manifest.model_validate({**data, "modality": "image"})
    with pytest.raises(ValueError, match="tokenizer"):
        Manifest.model_validate({**data, "tokenizer_sha256": None})
