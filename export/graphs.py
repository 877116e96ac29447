"""PyTorch -> ONNX: the two graph kinds the bundle carries, exported with the dynamo exporter.

Shape letters: B batch, T sequence, D hidden, E pooled width, C labels, V vocabulary, L layers, H heads,
M multi-vector width.

The dynamo exporter (torch.onnx.export(dynamo=True)) is used: batch and sequence are Dim objects
that torch.export checks, so the graph cannot silently specialise to the example's length (a trace
can: shapes that Python computes with become constants), and it emits a compact graph (Gelu,
LayerNormalization) that matches eager PyTorch to float rounding.

The exporter's own graph optimiser (onnxscript, optimize=True) is switched off: it merges the mask's
two Unsqueeze ops into one, and onnxruntime's BERT Attention fusion (export.variants.optimize) only
recognises the mask as Unsqueeze -> Unsqueeze -> Cast -> Sub -> Mul -> Add, so the fused Attention
needs the unmerged graph. onnxruntime folds the constants and Identity ops the optimiser would have
removed when it loads the graph, so the plain fp32 graph runs as fast either way (docs/export.md).

Outputs by the model's head (its manifest `task`): logits for a sequence classifier, token_logits for a
token classifier, and for a masked-LM head `sparse`, SPLADE's vector, so the (B, T, V) logits never
leave the graph. A multi-vector model (config.multi_vector_size, token_weights) adds, in both kinds, after those and
before `attentions`: multi_vectors (B, T, M), every token's raw vector, and token_weights (B, T), every token's
relu(token_weight) (bge-m3's sparse weights before the per-id max): one run gives every output the model has.

A model with two token types (BERT's segments A and B) takes token_type_ids as a third input (token_types,
on by default), so a cross-encoder reads (query, document) pairs with their segment embeddings; a lone text
is all segment A (type ids 0), exactly as before. Every caller feeds what a graph entry's `inputs` lists
(bundle.feeds.pad(..., names=...)); models with one token type or none take input_ids and attention_mask.

A model with LoRA adapters (config.adapters, model/lora.py) takes one more input, after the others: `adapter`
(B,) int64, each row's adapter index (0: the bare base). A model without adapters has no such input and no
adapter ops.

A vision model (config.vision, model/vision.py) takes pixel_values (B, C, H, W) float32 alone, at the one image size its
bundle serves (its preprocessing's, bundle.preprocessing: `image_size` here), batch the only dynamic axis: every
image has the same T = config.image_tokens(H, W) tokens, all real, and its outputs have that fixed T.

The attention graph takes, last, `layers` (l,) and `heads` (h,) int64, the indices of the maps it computes (attentions
(B, l, h, T, T)); each is an initializer too, every layer's and every head's index (bundle.feeds: onnxruntime's
overridable initializers), so a caller that feeds only the token inputs gets every map. Its layers run the fast way
(banded, streamed), keeping the chosen heads' queries and keys, and only the chosen maps are computed
(model.encoder.Encoder.attention_maps): a request for one head of one layer at 8,192 tokens holds one (T, T) map.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import onnx_ir as ir
import torch
from onnx_ir.passes.common import RemoveUnusedNodesPass
from torch import Tensor, nn

from bundle.feeds import ADAPTER, INPUT_NAMES, PIXEL_VALUES, SELECTION, TOKEN_TYPE_IDS
from export import onnxfiles
from export.folding import fold_weight_transposes
from model.config import EncoderConfig
from model.config_rules import SEQUENCE_HEADS
from model.encoder import Encoder
from model.heads import sparse_vector

log = logging.getLogger(__name__)

KINDS = ("fast", "attention")
HEAD_OUTPUTS = {"tokens": "token_logits", "mlm": "sparse", **{head: "logits" for head in SEQUENCE_HEADS}}
TASKS = {"none": "embed", "tokens": "tokens", "mlm": "sparse", **{head: "classify" for head in SEQUENCE_HEADS}}


def task(config: EncoderConfig) -> str:
    """The manifest's task for the model's head: embed, classify, tokens or sparse."""
    return TASKS[config.head]


def takes_token_types(config: EncoderConfig) -> bool:
    """Whether token_type_ids can mean anything: only with two or more token types (BERT's segments)."""
    return config.type_vocab_size >= 2


ImageSize = tuple[int, int]  # (height, width) of the images a vision graph reads


def input_names(config: EncoderConfig, token_types: bool = True) -> list[str]:
    """The graph's inputs: input_ids, attention_mask, token_type_ids when asked for and meaningful, and adapter
    when the model has adapters; a vision model's pixel_values alone."""
    if config.vision:
        return [PIXEL_VALUES]
    return [*INPUT_NAMES, *([TOKEN_TYPE_IDS] if token_types and takes_token_types(config) else []),
            *([ADAPTER] if config.adapters else [])]


def input_shapes(config: EncoderConfig, token_types: bool = True,
                 image_size: ImageSize | None = None) -> dict[str, list[str | int]]:
    """Symbolic shape of each input: (batch, sequence), the adapter indices (batch,); pixel values (batch, C, H, W)."""
    if config.vision:
        return {PIXEL_VALUES: ["batch", config.num_channels, *served_size(config, image_size)]}
    return {name: ["batch"] if name == ADAPTER else ["batch", "sequence"] for name in input_names(config, token_types)}


def output_names(config: EncoderConfig, kind: str) -> list[str]:
    """Output names of a graph kind, in graph order (see bundle.manifest for their meaning)."""
    if kind not in KINDS:
        raise ValueError(f"unknown graph kind {kind!r}; expected one of {', '.join(KINDS)}")
    names = ["embeddings", "token_embeddings"]
    if config.head != "none":
        names.append(HEAD_OUTPUTS[config.head])
    names += multi_vector_outputs(config)
    if kind == "attention":
        names.append("attentions")
    return names


def multi_vector_outputs(config: EncoderConfig) -> list[str]:
    """The multi-vector outputs a model has: multi_vectors when it has per-token vectors, token_weights when it has
    per-token weights."""
    names = ["multi_vectors"] if config.multi_vector_size else []
    return names + (["token_weights"] if config.token_weights else [])


def served_size(config: EncoderConfig, image_size: ImageSize | None) -> ImageSize:
    """The (height, width) a vision graph reads: `image_size`, else the config's square (the positions' own grid)."""
    return image_size or (config.image_size, config.image_size)


def output_shapes(config: EncoderConfig, kind: str, image_size: ImageSize | None = None) -> dict[str, list[str | int]]:
    """Symbolic shape of each output: named axes are dynamic, integers are fixed (a vision graph's tokens)."""
    T: str | int = config.image_tokens(*served_size(config, image_size)) if config.vision else \
        config.max_length if config.pad_to_max_length else "sequence"  # SigLIP's text: its fixed length
    shapes: dict[str, list[str | int]] = {
        "embeddings": ["batch", config.embedding_size],
        "token_embeddings": ["batch", T, config.d_model],
        "logits": ["batch", config.num_labels],
        "token_logits": ["batch", T, config.num_labels],
        "sparse": ["batch", config.vocab_size],
        "multi_vectors": ["batch", T, config.multi_vector_size],
        "token_weights": ["batch", T],
        "attentions": ["batch", *SELECTION, T, T],  # the chosen layers and heads
    }
    return {name: shapes[name] for name in output_names(config, kind)}


class GraphModule(nn.Module):
    """Wraps the encoder with the graph's IO: pooled embedding BEFORE L2 normalisation.

    The service normalises in numpy (manifest.normalize and the request decide), so the graph must
    hand out the raw pooled vector even for models configured with normalize=True.
    """

    def __init__(self, encoder: Encoder, kind: str, token_types: bool = True) -> None:
        super().__init__()
        self.encoder = encoder
        self.names = output_names(encoder.config, kind)
        self.input_names = input_names(encoder.config, token_types)  # fed by callers (attention: + SELECTION)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, adapter: Tensor | None = None, layers: Tensor | None = None,
                heads: Tensor | None = None, pixel_values: Tensor | None = None) -> tuple[Tensor, ...]:
        if self.encoder.config.pad_to_max_length:
            assert input_ids is not None and attention_mask is not None
            input_ids, attention_mask = fixed_length(input_ids, attention_mask, self.encoder.config)
        out = self.encoder(input_ids, attention_mask, token_type_ids, output_attentions="attentions" in self.names,
                           adapter=adapter, layers=layers, heads=heads, pixel_values=pixel_values)
        if attention_mask is None:  # an image's tokens: every one real
            attention_mask = out.token_states.new_ones(out.token_states.shape[:2], dtype=torch.long)  # (B, T)
        pooled = self.encoder.pooled(out.token_states, attention_mask, input_ids)  # (B, E), not normalised
        values = {"embeddings": pooled, "token_embeddings": out.token_states, "logits": out.logits,
                  "token_logits": out.logits, "attentions": out.attentions, "multi_vectors": out.multi_vectors,
                  "token_weights": out.token_weights}
        if "sparse" in self.names:
            values["sparse"] = sparse_vector(out.logits, attention_mask)  # type: ignore[arg-type]  # (B, V)
        return tuple(values[name] for name in self.names)  # type: ignore[misc]


def fixed_length(input_ids: Tensor, attention_mask: Tensor, config: EncoderConfig) -> tuple[Tensor, Tensor]:
    """(B, T) ids -> (B, P) ids padded with pad_token_id to the config's max_length P, every position attended: a text
    tower trained on texts padded to max_length and read with no mask (SigLIP's, as its processor feeds it), read so
    whatever padding a batch brings (padding positions get pad_token_id, then the row goes on to P)."""
    ids = torch.where(attention_mask.bool(), input_ids, config.pad_token_id)  # (B, T)
    ids = nn.functional.pad(ids, (0, config.max_length - ids.shape[1]), value=config.pad_token_id)  # (B, P)
    return ids, torch.ones_like(ids)


def example_inputs(config: EncoderConfig, token_types: bool = True,
                   image_size: ImageSize | None = None) -> dict[str, Tensor]:
    """(2, 8) int64 ids and mask with one padded row (and type ids; adapters: the base and the last adapter):
    sizes above 1 so no axis is specialised; by input name, in graph order. A vision model's: two images."""
    if config.vision:
        size = served_size(config, image_size)
        return {PIXEL_VALUES: torch.randn(2, config.num_channels, *size, generator=torch.Generator().manual_seed(0))}
    length = min(8, config.position_limit)
    ids = torch.arange(length).repeat(2, 1) % config.vocab_size  # (B, T)
    mask = torch.ones_like(ids)
    mask[1, length // 2:] = 0
    types = (torch.arange(length) >= length // 2).long().repeat(2, 1) * mask  # (B, T): segments A, B
    adapter = torch.tensor([0, len(config.adapters)])  # (B,)
    values = {"input_ids": ids, "attention_mask": mask, TOKEN_TYPE_IDS: types, ADAPTER: adapter}
    return {name: values[name] for name in input_names(config, token_types)}


def selection_examples(config: EncoderConfig) -> dict[str, Tensor]:
    """Two layer and two head indices (the first and last: sizes above 1, so neither axis is specialised)."""
    return {name: torch.tensor([0, count - 1])
            for name, count in zip(SELECTION, (config.num_layers, config.num_heads), strict=True)}


def export_graph(encoder: Encoder, kind: str, path: Path, token_types: bool = True,
                 image_size: ImageSize | None = None) -> None:
    """Export one graph kind of `encoder` (put in eval mode) to `path`: a single .onnx file, or with its weights
    in an external data file beside it when they pass export.onnxfiles.EXTERNAL_DATA_BYTES. A vision model's reads
    images of `image_size` (module docstring)."""
    # torch.onnx's op registry warns once per torchvision op when torchvision is absent: noise for a text model
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    module = GraphModule(encoder.eval(), kind, token_types).eval()
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=encoder.config.position_limit)
    axes = {0: batch, 1: sequence}
    examples = example_inputs(encoder.config, token_types, image_size)
    shapes: dict[str, dict[int, torch.export.Dim]] = {
        name: {0: batch} if name in (ADAPTER, PIXEL_VALUES) else axes for name in examples}
    if kind == "attention":
        examples |= selection_examples(encoder.config)
        shapes |= {name: {0: torch.export.Dim(name)} for name in SELECTION}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, (), kwargs=examples, dynamo=True, optimize=False, verbose=False,
            input_names=list(examples), output_names=module.names, dynamic_shapes=shapes,
        )
    if program is None:
        raise RuntimeError("torch.onnx.export returned no program")
    if kind == "attention":
        select_all_by_default(program, encoder.config)
    fold_weight_transposes(program.model.graph)  # W^T stored as MatMul reads it (export.folding)
    large = onnxfiles.is_large(initializer_bytes(program))
    onnxfiles.clear(path)
    program.save(str(path), external_data=large)  # large: tensors in onnxfiles.data_name(path), as torch names it
    log.info("exported %s graph to %s%s", kind, path, " (weights in an external data file)" if large else "")


def fast_from_attention(attention: Path, fast: Path) -> None:
    """The fast graph, written at `fast`, from the attention graph at `attention`: the same graph without its maps.

    The attention graph's layers run the fast way and only keep, beside, the chosen heads' queries and keys for the
    maps (model.encoder.Encoder.forward), so dropping the `attentions` output and the `layers` and `heads` inputs
    leaves, once the ops nothing reads are removed, the op for op graph a fast export gives (tests/export/
    test_fast_from_attention.py): one dynamo export per model instead of two, the slowest step of an export. A large
    graph's fast copy names the attention graph's data file for its weights (onnx's external data, by location) until
    export.shared_weights rewrites both to read one file."""
    model = ir.load(attention)  # its external data, if any, is read only when a tensor's bytes are asked for
    graph = model.graph
    for output in [value for value in graph.outputs if value.name == "attentions"]:
        graph.outputs.remove(output)
    for selection in [value for value in graph.inputs if value.name in SELECTION]:
        graph.inputs.remove(selection)  # and, unread now, their initializers go with the ops below
    RemoveUnusedNodesPass()(model)
    onnxfiles.clear(fast)
    ir.save(model, fast)
    log.info("derived the fast graph %s from %s", fast, attention)


def select_all_by_default(program: torch.onnx.ONNXProgram, config: EncoderConfig) -> None:
    """Make the layers and heads inputs initializers too, every index: their defaults when not fed."""
    graph = program.model.graph
    for value in graph.inputs:
        if value.name in SELECTION:
            count = config.num_layers if value.name == SELECTION[0] else config.num_heads
            value.const_value = ir.tensor(np.arange(count, dtype=np.int64), name=value.name)
            graph.register_initializer(value)


def initializer_bytes(program: torch.onnx.ONNXProgram) -> int:
    """Bytes of the exported graph's weights (its initializers)."""
    return sum(v.const_value.nbytes for v in program.model.graph.initializers.values() if v.const_value is not None)
