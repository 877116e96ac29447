"""Long inputs end to end with random-weight ModernBERTs (tests/helpers/families.py): a bundle reads its whole
max length in one window, its fast graph attends over bands in the local layers, and the core truncates at
manifest.max_length or, when asked, chunks past it; every figure against transformers to max abs 1e-5.

Shape letters: B batch, T sequence, D hidden.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from bundle.feeds import selected
from bundle.manifest import Manifest
from bundle.session import open_session
from export.bundle import export_bundle
from model.load import load_model
from model.tokenizer import token_ids
from tests.helpers.exports import Exported as Case
from tests.helpers.families import save_hf
from tests.helpers.serving import serving
from tests.helpers.tokenizers import MULTILINGUAL

TOLERANCE = 1e-5
LONG = 2048  # max_position_embeddings of the long model: four times 512, with local_attention 16 (8 each side)


@dataclass
class Exported:
    bundle: Path
    reference: torch.nn.Module  # transformers' ModernBertModel on the same weights
    cls: int
    sep: int


def export(root: Path, **config: int) -> Exported:
    reference = save_hf(root / "source", "modernbert", "Model", "small", **config)
    export_bundle(root / "source", root / "bundle")
    tokenizer = load_model(root / "source").tokenizer
    return Exported(root / "bundle", reference, tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"))


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    return export(tmp_path_factory.mktemp("long"), max_position_embeddings=LONG, local_attention=16)


@pytest.fixture(scope="module")
def short_model(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    return export(tmp_path_factory.mktemp("short"))  # 64 positions, local_attention 4


def random_ids(model: Exported, tokens: int, seed: int) -> list[int]:
    """[CLS], tokens - 2 random ids past the special ones, [SEP]."""
    vocab = model.reference.config.vocab_size
    body = np.random.default_rng(seed).integers(5, vocab, tokens - 2).tolist()
    return [model.cls, *body, model.sep]


def transformers_states(model: Exported, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.reference(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, D)


def test_a_modernbert_bundle_reads_its_whole_max_length_in_one_window(long_model: Exported) -> None:
    """A 2,048-token input and a 1,001-token one padded beside it: token states and pooled embeddings ([CLS]) of
    the fast graph equal transformers'."""
    assert Manifest.read(long_model.bundle).max_length == LONG
    ids = torch.tensor([random_ids(long_model, LONG, 0), random_ids(long_model, LONG, 1)])  # (2, T)
    mask = torch.ones_like(ids)
    mask[1, 1001:] = 0
    session = open_session(long_model.bundle / "fast-fp32.onnx")
    pooled, states = session.run(["embeddings", "token_embeddings"], {"input_ids": ids.numpy(),
                                                                      "attention_mask": mask.numpy()})
    expected = transformers_states(long_model, ids, mask)  # (B, T, D)
    real = mask.bool().numpy()
    assert np.abs(states[real] - expected.numpy()[real]).max() <= TOLERANCE
    assert np.abs(pooled - expected[:, 0].numpy()).max() <= TOLERANCE


def softmax_ranks(path: Path) -> list[int]:
    """The rank of each Softmax's input in the graph, in graph order."""
    graph = onnx.shape_inference.infer_shapes(onnx.load(str(path))).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in [*graph.value_info, *graph.input, *graph.output]}
    return [ranks[node.input[0]] for node in graph.node if node.op_type == "Softmax"]


def test_the_fast_graph_attends_over_bands_in_local_layers(long_model: Exported) -> None:
    """Layer 0 global: streamed by onnxruntime's MultiHeadAttention (no Softmax of ours); layer 1 local: softmax over
    (B, H, N, W, 3W) bands. The attention graph runs its layers the same way, then one softmax more over the chosen
    maps, (l, B, h, T, T)."""
    for kind, ranks in (("fast", [5]), ("attention", [5, 5])):
        path = long_model.bundle / f"{kind}-fp32.onnx"
        assert softmax_ranks(path) == ranks
        assert [n.op_type for n in onnx.load(str(path)).graph.node if n.domain == "com.microsoft"] == \
            ["MultiHeadAttention"]


def square_outputs(path: Path, tokens: int, chosen: dict[str, np.ndarray] | None = None) -> list[tuple[str, list[int]]]:
    """Run the graph once on two rows of `tokens` tokens (one padded; `chosen`: the maps' layers and heads, fed)
    with onnxruntime's profiler on: each node's output (op, shape) that has two axes of length `tokens` -- a (T, T)
    tensor, as the profiler saw it allocated."""
    options = ort.SessionOptions()
    options.enable_profiling, options.profile_file_prefix = True, str(path.parent.parent / f"profile-{path.stem}")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ids = np.full((2, tokens), 7, dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, tokens // 2:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()} | (chosen or {}))
    events = json.loads(Path(session.end_profiling()).read_text())
    shapes = [(e["args"]["op_name"], next(iter(out.values()))) for e in events if e.get("cat") == "Node"
              for out in e["args"].get("output_type_shape", [])]
    return [(op, shape) for op, shape in shapes if shape.count(tokens) >= 2]


@pytest.mark.parametrize("case", ["modernbert-classifier", "qwen3-classifier", "embeddinggemma-scorer"])
def test_the_fast_graph_holds_no_sequence_by_sequence_tensor(family_export: Callable[[str], Case], case: str) -> None:
    """Every node output of the fast graph, at its real shapes for 43 tokens, has at most one axis of the sequence's
    length: global and causal layers go through the streaming kernels (ModernBERT's and EmbeddingGemma's global
    layers MultiHeadAttention, Qwen3's causal and causal sliding ones GroupQueryAttention), the bidirectional local
    layers over bands. The attention graph, which holds the maps, has (T, T) outputs: the check can fail."""
    bundle = family_export(case).bundle
    assert square_outputs(bundle / "fast-fp32.onnx", 43) == []
    assert square_outputs(bundle / "attention-fp32.onnx", 43) != []


async def test_the_core_serves_the_whole_length_and_truncates_past_it(long_model: Exported) -> None:
    tokenizer = load_model(long_model.bundle.parent / "source").tokenizer
    text = " ".join(MULTILINGUAL * 8)
    assert len(tokenizer.encode(text).ids) > LONG
    ids = [random_ids(long_model, LONG, 2), random_ids(long_model, LONG + 100, 3)]
    async with serving(long_model.bundle, intra_op_threads=1) as (_, client):
        by_ids = await client.post("/v1/embeddings", json={"input": ids})
        by_text = await client.post("/embed", json={"inputs": text, "normalize": False})
    assert by_ids.status_code == by_text.status_code == 200, (by_ids.text, by_text.text)
    assert by_ids.json()["usage"]["prompt_tokens"] == 2 * LONG
    served = np.array([d["embedding"] for d in by_ids.json()["data"]] + by_text.json())  # (3, D)
    cut = [ids[0], ids[1][:LONG], *token_ids(tokenizer, [text], LONG)]  # the core cuts at max_length
    assert all(len(x) == LONG for x in cut)
    expected = transformers_states(long_model, torch.tensor(cut), torch.ones(3, LONG, dtype=torch.long))[:, 0]
    assert np.abs(served - expected.numpy()).max() <= TOLERANCE


def by_hand(model: Exported, content: list[int], size: int, overlap: int) -> tuple[np.ndarray, np.ndarray]:
    """Each window of `size` content ids (every size - overlap), wrapped in [CLS] ... [SEP], through transformers:
    ([CLS] states (K, D), content counts (K,))."""
    vectors, counts, start = [], [], 0
    while True:
        piece = content[start: start + size]
        window = torch.tensor([[model.cls, *piece, model.sep]])
        vectors.append(transformers_states(model, window, torch.ones_like(window))[0, 0].numpy())
        counts.append(len(piece))
        if start + size >= len(content):
            return np.array(vectors), np.array(counts, dtype=np.float64)
        start += size - overlap


async def test_chunking_still_cuts_inputs_longer_than_a_short_max_length(short_model: Exported) -> None:
    """64 positions: a text of some 400 tokens is truncated to 64 by default, or cut into windows of 62 content
    tokens (overlap 8) whose vectors, and their token-weighted mean, equal transformers' on the same windows."""
    tokenizer = load_model(short_model.bundle.parent / "source").tokenizer
    text = " ".join(MULTILINGUAL * 3)
    content = tokenizer.encode(text, add_special_tokens=False).ids
    async with serving(short_model.bundle, intra_op_threads=1) as (_, client):
        plain = await client.post("/embed", json={"inputs": text, "normalize": False})
        windows = await client.post("/embed", json={"inputs": text, "normalize": False, "chunking": "windows",
                                                     "chunk_overlap": 8})
        mean = await client.post("/embed", json={"inputs": text, "normalize": False, "chunking": "mean",
                                                  "chunk_overlap": 8})
    assert plain.status_code == windows.status_code == mean.status_code == 200, (windows.text, mean.text)
    vectors, counts = by_hand(short_model, content, 62, 8)
    first = torch.tensor([[short_model.cls, *content[:62], short_model.sep]])
    truncated = transformers_states(short_model, first, torch.ones_like(first))[0, 0].numpy()
    assert np.abs(np.array(plain.json()[0]) - truncated).max() <= TOLERANCE
    served = np.array([w["embedding"] for w in windows.json()[0]])
    assert served.shape == vectors.shape and len(vectors) > 4
    assert [w["tokens"] for w in windows.json()[0]] == counts.tolist()
    assert np.abs(served - vectors).max() <= TOLERANCE
    assert np.abs(np.array(mean.json()[0]) - (counts / counts.sum()) @ vectors).max() <= TOLERANCE


@pytest.mark.parametrize("case", ["modernbert-classifier", "qwen3-classifier"])
def test_the_attention_graph_holds_only_the_chosen_maps(family_export: Callable[[str], Case], case: str) -> None:
    """Asked for one head of one layer, no node of the attention graph outputs more than one (T, T) map per row
    (the chosen one, and its mask): the layers ran the fast way, the other maps were never computed. Unfed, the
    graph computes every layer's and head's: the check can fail."""
    bundle = family_export(case).bundle
    config = Manifest.read(bundle)
    one = square_outputs(bundle / "attention-fp32.onnx", 43, selected([1], [0]))
    assert one and max(math.prod(shape) for _, shape in one) <= 2 * 43 * 43
    every = square_outputs(bundle / "attention-fp32.onnx", 43)
    assert max(math.prod(shape) for _, shape in every) == 2 * config.num_layers * config.num_heads * 43 * 43
