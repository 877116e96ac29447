"""Exported bundles of every family, made once per test session (tests/fixtures.py `family_export`) and shared by
the export tests (tests/export/test_families.py: the graphs against transformers) and the serving tests
(tests/service/test_families.py: the served answers against transformers).

    family_export("xlm-roberta-scorer") -> Exported(arch, head, source, bundle, reference)

Each case is a random-weight checkpoint (tests/helpers/families.py, decoders.py, rotary.py) or sentence-transformers
directory (tests/helpers/sentence.py) exported fp32 (a decoder or a rotary encoder also fp32-opt, where its attention
fuses) with export.bundle.export_bundle, as `attnserve export` does. CamemBERT
loads through the same family code and table as XLM-RoBERTa (model/families/) and ships the same kind of
tokenizer (Unigram), so XLM-RoBERTa stands for it here; tests/model/test_families.py checks every registered family
in PyTorch, one row each (tests/helpers/family_cases.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tests.helpers.decoders import DECODERS, save_decoder
from tests.helpers.families import save_hf
from tests.helpers.rotary import ARCHES as ROTARY
from tests.helpers.rotary import save_rotary
from tests.helpers.sentence import load_reference, save_sentence_transformer
from tests.helpers.shared import reloaded

CASES = {  # name: (architecture, head class, shape) -- "sentence": a sentence-transformers directory; a
    # "scorer" is a sequence classifier with one label, as cross-encoders (bge-reranker is XLM-RoBERTa) are
    "bert-classifier": ("bert", "ForSequenceClassification", "small"),
    "bert-masked-lm": ("bert", "ForMaskedLM", "small"),
    "roberta-classifier": ("roberta", "ForSequenceClassification", "small"),
    "xlm-roberta-scorer": ("xlm-roberta", "ForSequenceClassification", "small"),
    "distilbert-classifier": ("distilbert", "ForSequenceClassification", "small"),
    "distilbert-tokens": ("distilbert", "ForTokenClassification", "small"),
    "mpnet-classifier": ("mpnet", "ForSequenceClassification", "small"),
    "mpnet-sentence": ("mpnet", "sentence", "small"),
    "modernbert-classifier": ("modernbert", "ForSequenceClassification", "wide"),
    # decoders (tests/helpers/decoders.py): causal Qwen3 with grouped heads, q/k norms and sliding layers; a
    # bidirectional Gemma3 scorer with EmbeddingGemma's switches (sandwich norms, two rotary bases, windows)
    "qwen3-classifier": ("qwen3", "ForSequenceClassification", "wide"),
    "embeddinggemma-scorer": ("embeddinggemma", "ForSequenceClassification", "wide"),
    # Qwen3-Embedding as sentence-transformers runs it: last-token pooling, Normalize, its instruction prompt
    "qwen3-sentence": ("qwen3", "sentence", "wide"),
    # rotary encoders (tests/helpers/rotary.py): NomicBERT (SwiGLU, no biases), GTE with its checkpoints' linear
    # (static NTK) rotary scaling, jina-embeddings-v3 (XLM-R with rotary); GTE's dynamic scaling, whose base grows
    # with the input inside the graph, is exported at two shapes in tests/export/test_families.py
    "nomicbert-classifier": ("nomic_bert", "ForSequenceClassification", "tiny"),
    "gte-classifier": ("gte", "ForSequenceClassification", "tiny"),
    "jina-classifier": ("jina_v3", "ForSequenceClassification", "tiny"),
}
QWEN3_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\n"
                          "Query:", "document": ""}
SCORER_LABELS = {0: "relevant"}
CLASSIFIERS = tuple(name for name, (_, head, _) in CASES.items() if head == "ForSequenceClassification")


@dataclass
class Exported:
    arch: str
    head: str
    source: Path
    bundle: Path
    reference: torch.nn.Module  # transformers' model (for "sentence", the one under the ST directory)

    def __getstate__(self) -> dict[str, Any]:  # tests.helpers.shared.reloaded says why
        return {**self.__dict__, "reference": type(self.reference)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, reference=reloaded(state["reference"], state["source"]))


def pooled(states: torch.Tensor, mask: torch.Tensor, arch: str) -> torch.Tensor:
    """(B, T, D) states -> (B, D): the loader's pooling of a checkpoint without sentence-transformers modules, the
    first real token's state for an encoder, the last real token's for a decoder (either padding side)."""
    real = mask.bool()
    pos = torch.arange(mask.size(1))
    index = torch.where(real, pos, -1).amax(1) if arch in DECODERS else torch.where(real, pos, mask.size(1)).amin(1)
    return states[torch.arange(len(states)), index]


def export_case(name: str, root: Path) -> Exported:
    """Case `name` saved under root/"source" and exported (fp32 only) to root/"bundle"."""
    from export.bundle import export_bundle

    arch, head, shape = CASES[name]
    if head == "sentence" and arch in DECODERS:
        source = save_sentence_transformer(root / "source", arch, "lasttoken", None, denses=0, prompts=QWEN3_PROMPTS,
                                           shape=shape, max_seq_length=160, max_position_embeddings=256)
        reference = load_reference(source)[0].model.eval()  # type: ignore[index]  # the transformers model inside
    elif head == "sentence":
        source = save_sentence_transformer(root / "source", arch, "weightedmean", "tanh", default_prompt_name="query")
        reference = load_reference(source)[0].model.eval()  # type: ignore[index]  # the transformers model inside
    else:
        source = root / "source"
        extra = {"id2label": SCORER_LABELS} if name.endswith("-scorer") else {}
        save = save_decoder if arch in DECODERS else save_rotary if arch in ROTARY else save_hf
        reference = save(source, arch, head, shape, **extra)
    # the decoders' and rotary encoders' graphs also through the fused fp32-opt variant and its gate (rotary q/k,
    # grouped heads), asked for as `attnserve export` asks: built where their attention fuses (the rotary encoders,
    # EmbeddingGemma's shape), left out where only their norms do (export.variants.NothingFused)
    export_bundle(source, root / "bundle", variants=asked_variants(arch), name=name)
    return Exported(arch, head, source, root / "bundle", reference)


def asked_variants(arch: str) -> tuple[str, ...]:
    """The variants a shared case's bundle is exported with (fp32-opt for the decoders and rotary encoders)."""
    return ("fp32", "fp32-opt") if arch in DECODERS or arch in ROTARY else ("fp32",)
