"""A CLIP or SigLIP pair (CLIPModel, SiglipModel) exported as one bundle: its text tower's, holding the image tower's
bundle in `image/` (export.pairs, bundle.manifest.PairSpec), each graph equal to transformers' get_text_features and
get_image_features on the same inputs (its tokenizer's ids, its Pillow processor's pixel values) to max abs 1e-5, and
the pair's logits from the two graphs' vectors equal to the model's logits_per_image. SigLIP's text is fed as its
processor feeds it to transformers (padded to max_length, no mask) and to the graph as the service batches it (padded
to the batch's longest, masked): the graph reads it at its fixed length whatever the batch. SigLIP's tokenizer.json is
converted from its SentencePiece model. The small shape runs in make test, the realistic one (ViT-B/16 tower widths)
in the heavy tier.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
import transformers
from PIL import Image
from tokenizers import Tokenizer

from bundle.feeds import pad
from bundle.manifest import SCHEMA_VERSION, Manifest
from bundle.verify import BundleError, verify_bundle
from export.bundle import export_bundle
from export.refusals import ExportError
from inference.runtime.images import load_processing, pixel_values
from tests.helpers.vision import reference_model, save_clip, save_clip_tokenizer, save_pair, save_siglip, shared_bundle

TOLERANCE = 1e-5
TEXTS = ["a photo of a cat", "a red square.", "the sky and the sea with stripes on a blue dog picture", "a"]


def photos(count: int = 3) -> list[bytes]:
    rng = np.random.default_rng(3)
    out = []
    for index in range(count):
        buffer = io.BytesIO()
        pixels = rng.integers(0, 256, size=(30 + 11 * index, 41 + 7 * index, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def run(bundle: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The bundle's fast fp32 graph's embeddings (B, E)."""
    session = ort.InferenceSession(str(bundle / "fast-fp32.onnx"), providers=["CPUExecutionProvider"])
    return session.run(["embeddings"], feeds)[0]


def text_reference(pair: str, source: Path, length: int) -> dict[str, Any]:
    """transformers' text inputs as its processor makes them: CLIP's tokenizer.json padded to the longest with its
    mask; SigLIP's SiglipTokenizer padded to max_length, no mask."""
    if pair == "clip":
        tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(source / "tokenizer.json"),
                                                         pad_token="<pad>")
        return dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    tokenizer = transformers.SiglipTokenizer.from_pretrained(source)
    return {"input_ids": tokenizer(TEXTS, padding="max_length", max_length=length, truncation=True,
                                   return_tensors="pt")["input_ids"]}


@pytest.mark.parametrize("pair", ["clip", "siglip"])
@pytest.mark.parametrize("shape", [pytest.param("small"), pytest.param("realistic", marks=pytest.mark.heavy)])
def test_a_pair_is_one_bundle_of_two_towers_equal_to_transformers(tmp_path: Path,
                                                                  tmp_path_factory: pytest.TempPathFactory, pair: str,
                                                                  shape: str) -> None:
    """Each pair's fp32 export; the small CLIP's is the run's shared one (tests.helpers.vision.shared_bundle)."""
    if pair == "clip" and shape == "small":
        source, bundle = shared_bundle(tmp_path_factory, "clip")
        reference, manifest = reference_model("clip", source), verify_bundle(bundle)
    else:
        source, bundle = tmp_path / "source", tmp_path / "bundle"
        reference = (save_clip if pair == "clip" else save_siglip)(source, shape)
        manifest = export_bundle(source, bundle, variants=["fp32"])
    tower = bundle / "image"
    clip = pair == "clip"
    assert manifest.schema_version == SCHEMA_VERSION == 6 and manifest.modality == "text"
    assert manifest.pooling == ("end_token" if clip else "last_position") and manifest.pad_to_max_length is not clip
    assert manifest.pair is not None and manifest.pair.image_tower == "image"
    assert manifest.pair.scoring == ("softmax" if clip else "sigmoid")
    assert manifest.pair.logit_scale == pytest.approx(2.3)
    assert manifest.pair.logit_bias == (None if clip else pytest.approx(-3.0))
    image_manifest = verify_bundle(tower)
    assert image_manifest.modality == "image" and image_manifest.pair is None
    assert image_manifest.embedding_size == manifest.embedding_size

    batch = text_reference(pair, source, manifest.max_length)
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    images = photos()
    theirs = processor([Image.open(io.BytesIO(data)) for data in images], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        text_expected = features(reference.get_text_features(**batch))
        image_expected = features(reference.get_image_features(pixel_values=theirs))
        logits = reference(**batch, pixel_values=theirs).logits_per_image.numpy()  # (N images, M texts)
    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    tokenizer.enable_truncation(manifest.max_length)  # as the service cuts them
    ids = [e.ids for e in tokenizer.encode_batch(TEXTS)]
    texts = run(bundle, pad(ids, manifest.pad_id))  # as the service batches them: to the longest, masked
    ours = np.stack([pixel_values(data, load_processing(tower)) for data in images])  # without torch
    assert np.abs(ours - theirs.numpy()).max() <= 1e-6
    pictures = run(tower, {"pixel_values": ours})
    assert np.abs(texts - text_expected).max() <= TOLERANCE
    assert np.abs(pictures - image_expected).max() <= TOLERANCE
    unit = [v / np.linalg.norm(v, axis=-1, keepdims=True) for v in (pictures, texts)]
    scores = unit[0] @ unit[1].T * np.exp(manifest.pair.logit_scale) + (manifest.pair.logit_bias or 0.0)
    assert np.abs(scores - logits).max() <= 1e-4  # logits about 10x the cosines


def features(output: Any) -> np.ndarray:
    return getattr(output, "pooler_output", output).numpy()  # transformers 5: an output object; 4: the tensor


def test_what_a_pair_export_refuses_and_verify_checks(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    source, shared = shared_bundle(tmp_path_factory, "clip")
    with pytest.raises(ExportError, match="int8 are not built for a two-tower model"):
        export_bundle(source, tmp_path / "out", variants=["fp32", "int8"])
    with pytest.raises(ExportError, match="without --adapter and --reranker"):
        export_bundle(source, tmp_path / "out", variants=["fp32"], reranker="qwen3")
    assert not (tmp_path / "out").exists()
    shutil.copytree(shared, tmp_path / "bundle")  # the run's shared export (tests.helpers.vision), a copy to break
    (tmp_path / "bundle" / "image" / "fast-fp32.onnx").write_bytes(b"not a graph")
    with pytest.raises(BundleError, match="fast-fp32.onnx: sha256"):
        verify_bundle(tmp_path / "bundle")
    manifest = Manifest.read(tmp_path / "bundle")
    assert Manifest.model_validate_json(manifest.to_json()) == manifest
    with pytest.raises(ValueError, match="not a plain file name"):
        Manifest.model_validate({**manifest.model_dump(by_alias=True),
                                 "pair": {**manifest.pair.model_dump(), "image_tower": "../elsewhere"}})


def test_a_text_tower_alone_is_a_text_bundle(tmp_path: Path) -> None:
    """CLIPTextModelWithProjection without its image tower: a text bundle with no pair section, pooled at the end token,
    its graph equal to transformers' text_embeds."""
    reference = save_pair(tmp_path / "source", "clip", "text")
    save_clip_tokenizer(tmp_path / "source")
    manifest = export_bundle(tmp_path / "source", tmp_path / "bundle", variants=["fp32"])
    assert manifest.modality == "text" and manifest.pair is None and manifest.pooling == "end_token"
    assert not (tmp_path / "bundle" / "image").exists()
    tokenizer = Tokenizer.from_file(str(tmp_path / "bundle" / "tokenizer.json"))
    tokenizer.enable_truncation(manifest.max_length)
    feeds = pad([e.ids for e in tokenizer.encode_batch(TEXTS)], manifest.pad_id)
    with torch.no_grad():
        expected = reference(input_ids=torch.from_numpy(feeds["input_ids"]),
                             attention_mask=torch.from_numpy(feeds["attention_mask"])).text_embeds.numpy()
    assert np.abs(run(tmp_path / "bundle", feeds) - expected).max() <= TOLERANCE
