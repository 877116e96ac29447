"""The real all-mpnet-base-v2 (12 layers, 768 wide; tests/helpers/mpnet.py) exports with the default gates and
serves equal to transformers + mean pooling + normalisation (cosine >= 0.99999 per text). Its attention maps
differ from PyTorch's by about 2.3e-5 through onnxruntime: real float32 rounding, which the gates pass
(tests/export/test_gates.py says how they still catch a wrong graph). Minutes of export: `make reliability`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from bundle.manifest import Manifest
from export.bundle import export_bundle
from model.tokenizer import encode, load_tokenizer
from tests.helpers.mpnet import mpnet_dir
from tests.helpers.serving import serving
from tests.helpers.tokenizers import MULTILINGUAL

pytestmark = pytest.mark.heavy
TEXTS = [*MULTILINGUAL, "A three-hour cinema master class.", " ".join(MULTILINGUAL * 3)]


async def test_real_mpnet_exports_and_serves_as_transformers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = mpnet_dir()
    manifest = export_bundle(source, tmp_path / "bundle")  # fp32 and fp32-opt, the default gates
    attention = manifest.graph("attention", "fp32")
    assert attention is not None and 1e-5 < attention.parity["attentions_max_abs_diff"] <= 1e-4
    model = transformers.MPNetModel.from_pretrained(source, attn_implementation="eager").eval()
    ids, mask = encode(load_tokenizer(source / "tokenizer.json"), TEXTS, Manifest.read(tmp_path / "bundle").max_length)
    with torch.no_grad():
        states = model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, D)
    pooled = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    expected = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    for variant in ("fp32", "fp32-opt"):
        async with serving(tmp_path / "bundle", intra_op_threads=2, variant=variant) as (_, client):
            got = np.asarray((await client.post("/embed", json={"inputs": TEXTS})).json())
        cosine = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)
        assert cosine.min() >= 0.99999, (variant, cosine)
