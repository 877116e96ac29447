"""The exact gate (export/gates.py) misses each mistake a family's export can make, on small random-weight models
at a trained model's magnitudes (tests/helpers/families.trained_magnitudes: 4 layers x 128, 4 heads, weights at sd
0.06, norm vectors spread by 0.3, queries x 3; their states reach about 5 on the parity texts). Each right graph
passes (token_embeddings 3.5e-6 from float64 against a limit of 2.5e-5 for the BERT, 7.1e-6 against 6.8e-5 for the
Qwen3, 5.6e-6 against 5.6e-5 for the Gemma3), and each wrong one misses against the right model's float64 reference
on token_embeddings by the factor its test's docstring gives (its error from float64 over the limit, 8 x eager
float32's own error plus 1e-6 x the states' scale):

    eps       a BERT whose LayerNorms use MPNet's eps, 1e-5, for BERT's 1e-12
    gate/up   a Qwen3 (Llama's gated MLP and rotary layout, with per-head query and key norms) whose MLP has the
              gate and up projections swapped
    theta     the Qwen3 with the rotary base 500,000 (Llama 3's) for its 10,000
    q_norm    the Qwen3 without its query norm
    padding   the BERT, and an EmbeddingGemma-like bidirectional Gemma3 (heavy tier), whose layers attend padding
              keys

The eps, gate/up and theta graphs are the right graph with that attribute or initializer edited (the graph a copy
with it exports, without another export); q_norm and padding are exported from a changed copy of the model. All on
the parity texts (export.parity_texts, cut at 64 tokens), as an export gates them. A mistake smaller than rounding
cannot be seen and serves nothing different either: BERT's eps as 1e-11 passes. The module takes about 2 minutes
on 2 shared cores (slow), most of it the five exports (six with the heavy tier's).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
import transformers
from onnx import numpy_helper
from torch import Tensor

from export.graphs import export_graph
from export.parity import ParityError, check_graph
from export.parity_texts import parity_batches
from export.references import References
from export.rounding import Rounding, float64_references
from model.encoder import Encoder
from model.load import load_model
from tests.helpers import tokenizers
from tests.helpers.decoders import TOKENIZER_CONFIG
from tests.helpers.families import trained_magnitudes

pytestmark = pytest.mark.slow
CPU = ["CPUExecutionProvider"]
MAX_LENGTH = 64
SHAPE = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=384,
             max_position_embeddings=MAX_LENGTH, initializer_range=0.06)
DECODER = dict(num_key_value_heads=2, head_dim=32)
ROPE = {"rope_type": "default", "rope_theta": 10_000.0}
CLASSES = {"bert": transformers.BertModel, "qwen3": transformers.Qwen3Model, "gemma3": transformers.Gemma3TextModel}


@dataclass
class Right:
    """A model, its parity texts' eager references and their float64 Rounding; the graph it exports passes."""

    encoder: Encoder
    references: References
    rounding: Rounding
    graph: Path


def config(arch: str, tokenizer: Any) -> transformers.PretrainedConfig:
    if arch == "bert":
        return transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), **SHAPE)
    common = dict(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True), pad_token_id=tokenizer.token_to_id(
        "<pad>"), **SHAPE, **DECODER)
    if arch == "qwen3":
        return transformers.Qwen3Config(**common, rope_parameters=ROPE)
    return transformers.Gemma3TextConfig(  # EmbeddingGemma's switches: bidirectional, sliding layers, two bases
        **common, query_pre_attn_scalar=32, sliding_window=8, sliding_window_pattern=2,
        use_bidirectional_attention=True, rope_parameters={"full_attention": {**ROPE, "rope_theta": 1_000_000.0},
                                                           "sliding_attention": ROPE})


def save(directory: Path, arch: str) -> None:
    """A seeded random `arch` model (bert, qwen3, gemma3) at a trained model's magnitudes, with its tokenizer."""
    tokenizer = tokenizers.wordpiece() if arch == "bert" else tokenizers.byte_level_bpe()
    cls = CLASSES[arch]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = cls(config(arch, tokenizer))
        trained_magnitudes(model, query_scale=3.0)
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    if arch != "bert":
        (directory / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG))


@pytest.fixture(scope="module")
def right(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Right]:
    """The right model of an architecture, saved, loaded, referenced and exported on first use."""
    made: dict[str, Right] = {}

    def get(arch: str) -> Right:
        if arch not in made:
            root = tmp_path_factory.mktemp(arch)
            save(root / "source", arch)
            loaded = load_model(root / "source")
            references = References(loaded, parity_batches(), MAX_LENGTH, "fast")
            export_graph(loaded.encoder, "fast", root / "fast.onnx")
            made[arch] = Right(loaded.encoder, references, float64_references({arch: references})[arch],
                               root / "fast.onnx")
        return made[arch]
    return get


def missed_by(model: Right, graph: Path) -> float:
    """How many times its limit the token_embeddings error of `graph`, a wrong graph of `model`, is (it must miss)."""
    with pytest.raises(ParityError) as missed:
        check_graph(graph, "fp32", CPU, model.references, model.rounding)
    found = re.search(r"token_embeddings_float64_error ([-+.\de]+) > ([-+.\de]+)", str(missed.value))
    assert found is not None, str(missed.value)
    return float(found[1]) / float(found[2])


def exported(model: Right, change: Callable[[Encoder], None], path: Path) -> Path:
    """The graph a copy of `model` changed by `change` exports, at `path`."""
    wrong = copy.deepcopy(model.encoder)
    change(wrong)
    export_graph(wrong, "fast", path)
    return path


def edited(model: Right, edit: Callable[[onnx.ModelProto], None], path: Path) -> Path:
    """`model`'s right graph changed by `edit` (the graph a copy with that weight or attribute exports), at `path`."""
    graph = onnx.load(str(model.graph))
    edit(graph)
    onnx.save(graph, str(path))
    return path


def initializers(graph: onnx.ModelProto, suffix: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    """Every initializer whose name ends with `suffix` changed."""
    for tensor in (t for t in graph.graph.initializer if t.name.endswith(suffix)):
        tensor.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(tensor)), tensor.name))


def layer_norm_eps(eps: float) -> Callable[[onnx.ModelProto], None]:
    def edit(graph: onnx.ModelProto) -> None:
        for node in (n for n in graph.graph.node if n.op_type == "LayerNormalization"):
            next(a for a in node.attribute if a.name == "epsilon").f = eps
    return edit


@pytest.mark.parametrize("arch", ["bert", "qwen3", "gemma3"])
def test_the_right_graph_passes(right: Callable[[str], Right], arch: str) -> None:
    model = right(arch)
    measured = check_graph(model.graph, "fp32", CPU, model.references, model.rounding)
    assert measured["token_embeddings_float64_max_abs"] > 3, measured  # states of a trained model's size
    assert 0 < measured["token_embeddings_float64_error"] <= measured["token_embeddings_float64_limit"], measured


def test_a_wrong_layer_norm_eps_misses(right: Callable[[str], Right], tmp_path: Path) -> None:
    """BERT's eps 1e-12 as MPNet's 1e-5 in every LayerNorm: 7.9e-4 from float64 against a limit of 2.5e-5, 32x."""
    assert missed_by(right("bert"), edited(right("bert"), layer_norm_eps(1e-5), tmp_path / "eps.onnx")) >= 20


def test_an_eps_within_rounding_passes(right: Callable[[str], Right], tmp_path: Path) -> None:
    """1e-11 for 1e-12 changes nothing float32 keeps: the gate has nothing to see, and nothing served changes."""
    model = right("bert")
    check_graph(edited(model, layer_norm_eps(1e-11), tmp_path / "eps.onnx"), "fp32", CPU, model.references,
                model.rounding)


def test_swapped_gate_and_up_projections_miss(right: Callable[[str], Right], tmp_path: Path) -> None:
    """act(up) x gate for act(gate) x up in every block (our gated `ffn.up` is [gate_proj; up_proj], its halves
    swapped): 5.1 from float64 against 6.8e-5, 75,000x."""
    c = right("qwen3").encoder.config

    def swap(graph: onnx.ModelProto) -> None:  # the graph stores ffn.up as MatMul reads it (export.folding): (D, 2F)
        ups = [t for t in graph.graph.initializer if tuple(t.dims) == (c.d_model, 2 * c.d_ff)]
        assert len(ups) == c.num_layers  # one a block, nothing else of that shape
        for tensor in ups:
            weight = numpy_helper.to_array(tensor)
            tensor.CopyFrom(numpy_helper.from_array(np.roll(weight, weight.shape[1] // 2, axis=1), tensor.name))
    graph = edited(right("qwen3"), swap, tmp_path / "swapped.onnx")
    assert missed_by(right("qwen3"), graph) >= 1000


def test_a_wrong_rotary_base_misses(right: Callable[[str], Right], tmp_path: Path) -> None:
    """The rotary base 500,000 (Llama 3's) for 10,000: 4.6 from float64 against 6.8e-5, 68,000x."""
    def base(inv_freq: np.ndarray) -> np.ndarray:  # (d_k / 2,): 1 / theta^(2i / d_k)
        exponents = np.arange(len(inv_freq), dtype=np.float32) * 2 / (2 * len(inv_freq))
        return (1.0 / 500_000.0 ** exponents).astype(np.float32)
    graph = edited(right("qwen3"), lambda g: initializers(g, "inv_freq", base), tmp_path / "theta.onnx")
    assert missed_by(right("qwen3"), graph) >= 1000


def test_a_missing_query_norm_misses(right: Callable[[str], Right], tmp_path: Path) -> None:
    """Queries that skip their per-head RMS norm (the keys keep theirs): 5.7 from float64 against 6.8e-5, 84,000x."""
    def no_query_norm(encoder: Encoder) -> None:
        for block in encoder.blocks:
            block.attention.q_norm = torch.nn.Identity()
    assert missed_by(right("qwen3"), exported(right("qwen3"), no_query_norm, tmp_path / "q_norm.onnx")) >= 1000


@pytest.mark.parametrize("arch", ["bert", pytest.param("gemma3", marks=pytest.mark.heavy)])
def test_padding_attended_misses(right: Callable[[str], Right], tmp_path: Path, arch: str) -> None:
    """A BERT, and a bidirectional Gemma3, whose layers see every key, padding too (the pooling still skips it): the
    BERT 0.88 from float64 against 2.5e-5, 35,000x; the Gemma3 2.4 against 5.6e-5, 43,000x. The Gemma3's (a second
    export of it, about 20 s) is in the heavy tier; its right graph passes in make test."""
    def attend_padding(encoder: Encoder) -> None:
        layer_inputs = encoder.layer_inputs

        def everything(attention_mask: Tensor, adapter: Tensor | None = None) -> Any:
            return layer_inputs(torch.ones_like(attention_mask), adapter=adapter)
        encoder.layer_inputs = everything  # type: ignore[method-assign]
    assert missed_by(right(arch), exported(right(arch), attend_padding, tmp_path / "padding.onnx")) >= 1000
