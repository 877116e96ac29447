"""The real MiniLM's default export is fused and exact; the int8 variant passes its gate on the default model
(MiniLM with a classification head), and the variant `auto` serves from that bundle gives a text the same
vector whatever its batch partners."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from bundle.manifest import BATCH_INVARIANCE_TOLERANCE
from bundle.session import open_session
from export.bundle import bundle_max_length, export_bundle
from export.calibration import rotten_tomatoes_val_fraction
from export.gates import GATES
from inference.runtime.variants import choose_variant
from model.checkpoint import save_checkpoint
from model.encoder import Encoder, mean_pool
from model.load import load_model
from model.tokenizer import encode, pad_id, token_ids
from model.training.assets import minilm_dir, rotten_tomatoes

pytestmark = pytest.mark.default_model
DEFAULT_CHECKPOINT = Path(__file__).resolve().parents[2] / "checkpoints" / "default"
HEAD_TEXTS = 200
MAX_LENGTH = 256


def fit_head(features: torch.Tensor, labels: torch.Tensor, steps: int = 200) -> torch.nn.Linear:
    """Logistic regression on frozen pooled MiniLM features: a head in well under a second."""
    torch.manual_seed(0)
    head = torch.nn.Linear(features.size(1), 2)
    optimiser = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(steps):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(head(features), labels).backward()
        optimiser.step()
    return head


def minilm_with_head(out: Path) -> Path:
    """MiniLM plus a linear head fitted on the first Rotten Tomatoes snippets, as a checkpoint."""
    loaded = load_model(minilm_dir())
    rows = rotten_tomatoes()[:HEAD_TEXTS]
    ids, mask = encode(loaded.tokenizer, [t for t, _ in rows], 128)  # (B, T)
    with torch.no_grad():
        features = mean_pool(loaded.encoder(ids, mask).token_states, mask)  # (B, D), as the head sees it
    head = fit_head(features, torch.tensor([int(label == "fresh") for _, label in rows]))
    # max_length 256 as MiniLM's sentence-transformers config says: the position table is cut to
    # match, which keeps the parity references (attentions are T x T) cheap.
    config = loaded.encoder.config.replace(
        head="linear", num_labels=2, label_names=("rotten", "fresh"), max_length=MAX_LENGTH,
    )
    body = loaded.encoder.state_dict()
    body["embeddings.position.weight"] = body["embeddings.position.weight"][:MAX_LENGTH]
    encoder = Encoder(config).eval()
    encoder.load_state_dict(body, strict=False)
    encoder.head.classifier.load_state_dict(head.state_dict())  # type: ignore[union-attr]
    save_checkpoint(out, encoder, loaded.tokenizer)
    return out


@pytest.fixture(scope="module")
def default_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if (DEFAULT_CHECKPOINT / "config.json").is_file():
        return DEFAULT_CHECKPOINT
    return minilm_with_head(tmp_path_factory.mktemp("default") / "minilm-head")


@pytest.fixture(scope="module")
def calibration_data(default_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """None for a checkpoint trained on the Rotten Tomatoes snippets (int8 calibrates on its own split); for
    the head fitted here, the snippets it was not fitted on, as --calibration-data."""
    if rotten_tomatoes_val_fraction(default_checkpoint) is not None:
        return None
    path = tmp_path_factory.mktemp("calibration") / "snippets.txt"
    path.write_text("\n".join(text for text, _ in rotten_tomatoes()[HEAD_TEXTS:]) + "\n")
    return path


def test_sentence_transformers_max_length_comes_from_its_config() -> None:
    assert bundle_max_length(load_model(minilm_dir())) == 256


@pytest.mark.heavy  # the real MiniLM's export, ~50 s: make reliability (a BERT's fusions: tests/export/test_fusion.py)
def test_minilm_default_export_is_fused_exact_and_batch_invariant(tmp_path: Path) -> None:
    """What onnxruntime's optimiser fuses in a plain transformers export of MiniLM, fp32-opt fuses too, within
    the house target of 1e-5 of PyTorch, and its vectors do not move with their batch partners."""
    manifest = export_bundle(minilm_dir(), tmp_path / "bundle")
    fused = manifest.graph("fast", "fp32-opt")
    assert fused is not None and max(v for k, v in fused.parity.items() if k.endswith("_diff")) <= 1e-5, fused.parity
    for variant in ("fp32", "fp32-opt"):
        assert manifest.graph("fast", variant).measured["cpu"].batch_invariant, variant  # type: ignore[union-attr]
    ops = Counter(n.op_type for n in onnx.load(str(tmp_path / "bundle" / fused.file)).graph.node)
    assert (ops["EmbedLayerNormalization"], ops["Attention"], ops["SkipLayerNormalization"], ops["BiasGelu"]) == (
        1, 6, 12, 6), ops


@pytest.mark.heavy  # the int8 search at full size takes minutes: `make reliability`, not `make test`
def test_int8_passes_its_gate_and_auto_serves_a_batch_invariant_variant(
    default_checkpoint: Path, calibration_data: Path | None, tmp_path: Path,
) -> None:
    manifest = export_bundle(default_checkpoint, tmp_path / "bundle", variants=("fp32", "fp32-opt", "int8"),
                             calibration_data=calibration_data)
    int8 = manifest.graph("fast", "int8")
    assert int8 is not None
    for texts in ("parity", "short", "held_out"):  # each set on its own
        assert int8.parity[f"{texts}_embeddings_min_cosine"] >= 0.99
        assert int8.parity[f"{texts}_label_agreement"] >= 0.99
    assert set(GATES["int8"]) <= set(int8.parity)
    assert int8.parity["quantized_matmuls"] >= 2 * manifest.num_layers
    sizes = {v: sum((tmp_path / "bundle" / name).stat().st_size for name in (g.file, *g.data_files))
             for v in ("fp32", "int8") if (g := manifest.graph("fast", v)) is not None}  # weights-fp32.data too
    assert sizes["int8"] < sizes["fp32"], sizes

    served = choose_variant("auto", "cpu", manifest, allow_approximate=True).variant
    assert manifest.graph("fast", served).measured["cpu"].batch_invariant  # type: ignore[union-attr]
    tokenizer = load_model(default_checkpoint).tokenizer
    session = open_session(tmp_path / "bundle" / f"fast-{served}.onnx", "cpu")
    text, partners = "A three-hour cinema master class.", ["Dull.", " ".join(["A long, rambling review."] * 30)]
    alone = _embeddings(session, tokenizer, [text], manifest.max_length)[0]
    for batch in ([text, partners[0]], [partners[1], text], [partners[0], text, partners[1]]):
        together = _embeddings(session, tokenizer, batch, manifest.max_length)[batch.index(text)]
        assert np.abs(together - alone).max() <= BATCH_INVARIANCE_TOLERANCE, batch


def _embeddings(session: object, tokenizer: object, texts: list[str], max_length: int) -> np.ndarray:
    from bundle.feeds import input_names, pad

    feed = pad(token_ids(tokenizer, texts, max_length), pad_id(tokenizer), input_names(session))  # type: ignore[arg-type]
    return session.run(["embeddings"], feed)[0]  # type: ignore[attr-defined]  # (B, D)
