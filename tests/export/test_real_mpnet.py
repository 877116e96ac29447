"""The real all-mpnet-base-v2 (12 layers x 768; tests/helpers/mpnet.py) exports with the default variants and gates
(export.bundle.export_bundle: fast fp32 and fp32-opt, attention fp32), each figure within its gate, and its bundle,
run through the torch-free inference core, gives every text the vector transformers' MPNetModel + mean pooling +
normalisation gives it (its sentence-transformers modules: Transformer, Pooling mean, Normalize), at cosine >= 0.99999,
through either variant. Each exact graph's error from a float64 run of the model is within 8 x eager float32's own
plus the floor (export/gates.py), and its diffs from eager float32 stay within 1e-5 x their scale (the maps': 1e-4;
they differ by about 2.3e-5, which an absolute 1e-5 refused). docs/export.md ("The exact gates") has the figures;
tests/export/test_gates.py and test_gate_mistakes.py show the gate still catches a wrong graph.

The export takes 5 to 10 minutes on 2 cores (5 min 16 s here, the whole module 5 min 48 s), most of it timing
each graph for the manifest (export.measure), so the module is `heavy` (make reliability); it exports once, in a
module-scoped fixture.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from bundle.manifest import Manifest
from export.bundle import export_bundle
from inference.options import ServingOptions
from inference.registry import ServedBundle, load_bundles
from inference.tasks import embed
from tests.helpers.mpnet import mpnet_dir
from tests.helpers.serving import core
from tests.helpers.tokenizers import MULTILINGUAL

pytestmark = pytest.mark.heavy
# Latin, Cyrillic, CJK, emoji and white space; a short one; one cut at the model's 384 tokens.
TEXTS = [*MULTILINGUAL[:2], MULTILINGUAL[4], MULTILINGUAL[7], MULTILINGUAL[9], "ok",
         "A three-hour cinema master class.", " ".join(MULTILINGUAL[8:9] * 40)]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mpnet") / "bundle"
    export_bundle(mpnet_dir(), out)  # the default variants, the default gates: raises ParityError on a miss
    return out


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    """(N, 768) unit vectors: transformers' MPNetModel, mean over real tokens, L2-normalised."""
    source = mpnet_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    model = transformers.MPNetModel.from_pretrained(source).eval()
    feeds = tokenizer(TEXTS, padding=True, truncation=True, max_length=384, return_tensors="pt")
    with torch.no_grad():
        states = model(**feeds).last_hidden_state  # (N, T, D)
    mask = feeds["attention_mask"][..., None].float()  # (N, T, 1)
    return torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy()


def test_every_graph_is_within_the_default_gates(bundle: Path) -> None:
    manifest = Manifest.read(bundle)
    assert manifest.max_length == 384 and manifest.normalize and manifest.pooling == "mean"
    built = {(g.kind, g.variant): g.parity for g in manifest.graphs}
    assert set(built) == {("fast", "fp32"), ("fast", "fp32-opt"), ("attention", "fp32")}, built
    for (kind, variant), parity in built.items():
        for output in ("embeddings", "token_embeddings", *(["attentions"] if kind == "attention" else [])):
            error, limit = parity[f"{output}_float64_error"], parity[f"{output}_float64_limit"]
            assert 0 < error <= limit, (kind, variant, output, error, limit)
        for output in ("embeddings", "token_embeddings"):
            diff, bound = parity[f"{output}_max_abs_diff"], 1e-5 * max(1.0, parity[f"{output}_max_abs"])
            assert 0 < diff <= bound, (kind, variant, output, diff, bound)
    assert 0 < built["attention", "fp32"]["attentions_max_abs_diff"] <= 1e-4, built["attention", "fp32"]


async def served(bundle: Path, variant: str) -> np.ndarray:
    """TEXTS' vectors from the inference core serving `bundle`'s `variant` (no HTTP)."""
    options = ServingOptions(variant=variant, intra_op_threads=2)
    async with core(load_bundles([ServedBundle(path=bundle)], options)[0], options, "mpnet") as model:
        assert model.bundle.variants["fast"] == variant
        return (await embed.embed(model, TEXTS, truncate=True)).vectors


@pytest.mark.parametrize("variant", ["fp32", "fp32-opt"])
async def test_served_vectors_equal_transformers(bundle: Path, expected: np.ndarray, variant: str) -> None:
    got = await served(bundle, variant)
    cosine = (got * expected).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert got.shape == expected.shape and cosine.min() >= 0.99999, (variant, cosine)
