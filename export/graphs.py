"""PyTorch -> ONNX: the two graph kinds the bundle carries, exported with the dynamo exporter.

Shape letters: B batch, T sequence, D hidden, C labels, L layers, H heads.

The dynamo exporter (torch.onnx.export(dynamo=True)) is used: batch and sequence are Dim objects
that torch.export checks, so the graph cannot silently specialise to the example's length (a trace
can: shapes that Python computes with become constants), and it emits a compact graph (Gelu,
LayerNormalization) that matches eager PyTorch to float rounding.

The exporter's own graph optimiser (onnxscript, optimize=True) is switched off: it merges the mask's
two Unsqueeze ops into one, and onnxruntime's BERT Attention fusion (export.variants.optimize) only
recognises the mask as Unsqueeze -> Unsqueeze -> Cast -> Sub -> Mul -> Add, so the fused Attention
needs the unmerged graph. onnxruntime folds the constants and Identity ops the optimiser would have
removed when it loads the graph, so the plain fp32 graph runs as fast either way (docs/export.md).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from bundle.feeds import INPUT_NAMES
from model.config import EncoderConfig
from model.encoder import Encoder

log = logging.getLogger(__name__)

KINDS = ("fast", "attention")


def output_names(config: EncoderConfig, kind: str) -> list[str]:
    """Output names of a graph kind, in graph order (see bundle.manifest for their meaning)."""
    if kind not in KINDS:
        raise ValueError(f"unknown graph kind {kind!r}; expected one of {', '.join(KINDS)}")
    names = ["embeddings", "token_embeddings"]
    if config.head != "none":
        names.append("logits")
    if kind == "attention":
        names.append("attentions")
    return names


def output_shapes(config: EncoderConfig, kind: str) -> dict[str, list[str | int]]:
    """Symbolic shape of each output: named axes are dynamic, integers are fixed."""
    shapes: dict[str, list[str | int]] = {
        "embeddings": ["batch", config.d_model],
        "token_embeddings": ["batch", "sequence", config.d_model],
        "logits": ["batch", config.num_labels],
        "attentions": ["batch", config.num_layers, config.num_heads, "sequence", "sequence"],
    }
    return {name: shapes[name] for name in output_names(config, kind)}


class GraphModule(nn.Module):
    """Wraps the encoder with the graph's IO: pooled embedding BEFORE L2 normalisation.

    The service normalises in numpy (manifest.normalize and the request decide), so the graph must
    hand out the raw pooled vector even for models configured with normalize=True.
    """

    def __init__(self, encoder: Encoder, kind: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.names = output_names(encoder.config, kind)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        out = self.encoder(input_ids, attention_mask, output_attentions="attentions" in self.names)
        pooled = self.encoder._pooled(out.token_states, attention_mask)  # (B, D), not normalised
        values = {"embeddings": pooled, "token_embeddings": out.token_states,
                  "logits": out.logits, "attentions": out.attentions}
        return tuple(values[name] for name in self.names)  # type: ignore[misc]


def example_inputs(config: EncoderConfig) -> tuple[Tensor, Tensor]:
    """(2, 8) int64 ids and mask with one padded row: sizes above 1 so no axis is specialised."""
    length = min(8, config.max_length)
    ids = torch.arange(length).repeat(2, 1) % config.vocab_size  # (B, T)
    mask = torch.ones_like(ids)
    mask[1, length // 2:] = 0
    return ids, mask


def export_graph(encoder: Encoder, kind: str, path: Path) -> None:
    """Export one graph kind of `encoder` (put in eval mode) to `path` as a single .onnx file."""
    module = GraphModule(encoder.eval(), kind).eval()
    batch = torch.export.Dim("batch")
    sequence = torch.export.Dim("sequence", max=encoder.config.max_length)
    axes = {0: batch, 1: sequence}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, example_inputs(encoder.config), dynamo=True, optimize=False, verbose=False,
            input_names=list(INPUT_NAMES), output_names=module.names,
            dynamic_shapes={"input_ids": axes, "attention_mask": axes},
        )
    if program is None:
        raise RuntimeError("torch.onnx.export returned no program")
    program.save(str(path), external_data=False)
    log.info("exported %s graph to %s", kind, path)
