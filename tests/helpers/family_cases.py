"""The family tests' table: the cases of every family in the registry (model.families.FAMILIES), read by the
PyTorch checks against transformers (tests/model/test_families.py) and the exported-graph checks
(tests/export/test_families.py). Adding a family is adding a row to CASES (and one to EXPORTS);
tests/model/test_families.py fails for a registered family, or a head kind of one, that no row covers.

A case is one architecture of the test helpers (tests/helpers/families.py, rotary.py, decoders.py) and belongs to
one registered family; a family can have several (roberta: RoBERTa, XLM-R, CamemBERT; gte: linear and dynamic
rotary scaling; gemma3: causal Gemma3 and EmbeddingGemma's bidirectional one). A row names the reference class's
head suffixes with their shapes, the checkpoints compared body to body (shape, config.json changes), the mask
each layer's maps must show, and its quirks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from model.config import EncoderConfig
from tests.helpers.decoders import save_decoder
from tests.helpers.exports import CASES as SHARED_EXPORTS
from tests.helpers.families import save_hf
from tests.helpers.rotary import save_rotary
from tests.helpers.sentence import PROMPTS

ENCODER_HEADS = ("ForSequenceClassification", "ForTokenClassification", "ForMaskedLM")


@dataclass(frozen=True)
class Body:
    """A checkpoint compared body to body: its shape and config.json changes (named by `label` in the test id)."""

    shape: str
    extra: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.shape}-{self.label}" if self.label else self.shape


@dataclass(frozen=True)
class Masks:
    """What `body`'s attention maps must show: its local layers, and whether keys after a query are masked."""

    body: Body
    local_layers: tuple[int, ...]
    causal: bool


@dataclass(frozen=True)
class Case:
    name: str  # the test helpers' architecture
    family: str  # the registry's Family.name
    save: Callable[..., torch.nn.Module]  # (directory, name, head, shape, **config changes) -> the reference
    bodies: tuple[Body, ...]
    heads: tuple[tuple[str, str], ...]  # (class suffix, shape) whose logits are compared
    body_heads: tuple[str, ...] = ()  # class suffixes that load as the body (a causal LM's head left out)
    masks: tuple[Masks, ...] = ()
    pooled: bool = False  # the CLS and mean pooled vectors are compared too
    grouped: bool = False  # fewer key/value heads than query heads, a head width other than hidden / heads
    extra_inputs: Callable[[EncoderConfig], list[tuple[Tensor, Tensor]]] = lambda config: []


def modernbert_inputs(config: EncoderConfig) -> list[tuple[Tensor, Tensor]]:
    """One input filling every position, and a 21-token batch (one row padded to 13): no multiple of a window."""
    generator = torch.Generator().manual_seed(0)
    full = torch.randint(5, config.vocab_size, (1, config.max_length), generator=generator)  # (1, T)
    ragged = torch.randint(5, config.vocab_size, (2, 21), generator=generator)  # (B, T)
    ragged_mask = torch.ones_like(ragged)
    ragged_mask[1, 13:] = 0
    return [(full, torch.ones_like(full)), (ragged, ragged_mask)]


def encoder(name: str, family: str, head_shape: str = "small", **quirks: Any) -> Case:
    bodies = quirks.pop("bodies", (Body("small"), Body("wide")))
    return Case(name, family, save_hf, bodies, tuple((h, head_shape) for h in ENCODER_HEADS), **quirks)


def rotary(name: str, family: str) -> Case:
    heads = (*((h, "tiny") for h in ENCODER_HEADS), ("ForSequenceClassification", "realistic"))
    return Case(name, family, save_rotary, (Body("tiny"), Body("realistic")), heads, pooled=True)


def decoder(name: str, family: str, causal_lm: bool = True, **quirks: Any) -> Case:
    return Case(
        name,
        family,
        save_decoder,
        quirks.pop("bodies", (Body("small"), Body("wide"))),
        (("ForSequenceClassification", "wide"),),
        ("ForCausalLM",) if causal_lm else (),
        grouped=True,
        **quirks,
    )


BIDIRECTIONAL = Body("wide", {"is_causal": False}, "bidirectional")  # transformers' switch, in config.json


def sliding(local_layers: tuple[int, ...], causal: bool = True) -> tuple[Masks, ...]:
    """A decoder's sliding layers, causal; under is_causal false, bidirectional with a window each side."""
    return Masks(Body("wide"), local_layers, causal), *((Masks(BIDIRECTIONAL, local_layers, False),) if causal else ())


CASES: tuple[Case, ...] = (
    encoder("bert", "bert"),
    encoder("roberta", "roberta"),
    encoder("xlm-roberta", "roberta"),
    encoder("camembert", "roberta"),
    encoder("distilbert", "distilbert"),
    encoder("mpnet", "mpnet"),
    # a window of 4 (two each side) in layer 1, and windows of 5 and 8 each side, wider than the 6-token batch
    encoder(
        "modernbert",
        "modernbert",
        "wide",
        extra_inputs=modernbert_inputs,
        bodies=(Body("small"), Body("wide"), *(Body("small", {"local_attention": n}, f"window{n}") for n in (10, 16))),
        masks=(Masks(Body("small"), (1,), False), Masks(Body("wide"), (1,), False)),
    ),
    rotary("nomic_bert", "nomicbert"),
    rotary("gte", "gte"),  # rope_type linear, as the released checkpoints write it
    rotary("gte-dynamic", "gte"),  # dynamic: the base grows past the original positions
    rotary("jina_v3", "jina"),
    decoder("llama", "llama"),
    decoder("mistral", "mistral"),
    decoder("qwen2", "qwen2"),
    decoder("qwen3", "qwen3", bodies=(Body("small"), Body("wide"), BIDIRECTIONAL), masks=sliding((1, 2))),
    decoder("gemma3", "gemma3", bodies=(Body("small"), Body("wide"), BIDIRECTIONAL), masks=sliding((0, 2))),
    decoder("embeddinggemma", "gemma3", causal_lm=False, masks=sliding((0, 2), causal=False)),
)
CASE = {case.name: case for case in CASES}


@dataclass(frozen=True)
class Sentence:
    """A sentence-transformers bundle's manifest facts, and the prompt its reference encodes with (None: default)."""

    manifest: dict[str, Any]
    prompt_name: str | None


@dataclass(frozen=True)
class Export:
    name: str  # the bundle's name: a tests/helpers/exports.py case, or (own) one the export tests make
    arch: str  # a CASES name
    head: str  # a class suffix, or "sentence": a sentence-transformers directory
    shape: str
    own: bool = False  # exported by tests/export/test_families.py with `attnserve export`'s default variants
    selects: bool = False  # the attention graph's chosen layers and heads are checked
    graphs: tuple[tuple[str, str], ...] = ()  # when given: the bundle's graphs, and each graph's outputs exactly
    token_types: bool = False  # the fast graph reads (query, passage) pairs with their type ids
    sentence: Sentence | None = None

    @property
    def family(self) -> str:
        return CASE[self.arch].family

    @property
    def masks(self) -> Masks | None:
        """The mask its attention graph must show: its case's at its shape, unchanged config (checkpoints only)."""
        if self.head == "sentence":
            return None
        return next((m for m in CASE[self.arch].masks if m.body == Body(self.shape)), None)


def shared(name: str, **quirks: Any) -> Export:
    return Export(name, *SHARED_EXPORTS[name], **quirks)


DEFAULT_GRAPHS = (("attention", "fp32"), ("fast", "fp32"), ("fast", "fp32-opt"))
EXPORTS: tuple[Export, ...] = (
    shared("bert-classifier", selects=True, token_types=True),
    shared("bert-masked-lm"),
    shared("roberta-classifier"),
    shared("xlm-roberta-scorer"),  # CamemBERT: the same family code, table and kind of tokenizer
    shared("distilbert-classifier"),
    shared("distilbert-tokens"),
    shared("mpnet-classifier", selects=True),
    shared(
        "mpnet-sentence",
        sentence=Sentence(
            dict(
                prompts=PROMPTS,
                default_prompt_name="query",
                embedding_size=16,
                pooling="weightedmean",
                normalize=True,
                max_length=20,
            ),
            None,
        ),
    ),
    shared("modernbert-classifier", selects=True),
    shared("qwen3-classifier", selects=True),
    shared("embeddinggemma-scorer", selects=True),
    shared(
        "qwen3-sentence", sentence=Sentence(dict(pooling="lasttoken", normalize=True, architecture="qwen3"), "query")
    ),
    shared("nomicbert-classifier"),
    shared("gte-classifier"),
    shared("jina-classifier"),
    # the graph computes the grown rotary base from each input's length (24 and 320 tokens past the original 16 and
    # 128 positions, 6 under them): the growth is in the graph, not baked in at the example's length
    Export("gte-dynamic", "gte-dynamic", "Model", "tiny", own=True, graphs=DEFAULT_GRAPHS),
    Export("gte-dynamic-realistic", "gte-dynamic", "Model", "realistic", own=True, graphs=DEFAULT_GRAPHS),
    *(
        Export(f"{arch}-classifier", arch, "ForSequenceClassification", "wide", own=True)
        for arch in ("llama", "mistral", "qwen2")
    ),
)
# Rows at a realistic width whose export alone takes tens of seconds: the heavy tier's (make reliability); each family
# keeps its small rows in make test.
HEAVY_EXPORTS = ("gte-dynamic-realistic",)
