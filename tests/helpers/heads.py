"""Random-weight transformers models of each head, exported once per test session (tests/fixtures.py,
`head_bundles`), with transformers' own tokenizer and model as their reference:

    bert-ce        BertForSequenceClassification, one label (a cross-encoder; token type ids for pairs)
    xlmr-ce        XLMRobertaForSequenceClassification, one label (<s> A </s></s> B </s>, no token types)
    modernbert-ce  ModernBertForSequenceClassification, one label ([CLS] A [SEP] B [SEP], no token types;
                   the "wide" shape: mean pooling, local layers shorter than a pair)
    bert-mlm       BertForMaskedLM (SPLADE's sparse vectors)
    xlmr-mlm       XLMRobertaForMaskedLM (a Unigram vocabulary: bge-m3's family)
    bert-ner       BertForTokenClassification, BIO labels (transformers' token-classification pipeline)
    xlmr-ner       XLMRobertaForTokenClassification (no "##" subwords: the pipeline's word heuristic)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

from export.bundle import export_bundle
from tests.helpers.families import ENTITIES, MAX_POSITIONS, RELEVANCE, save_hf
from tests.helpers.shared import reloaded

WIDE = 0.2  # initializer_range: weights wide enough that a cross-encoder's score moves with its input
CASES = {"bert-ce": ("bert", "ForSequenceClassification", RELEVANCE, "small"),
         "xlmr-ce": ("xlm-roberta", "ForSequenceClassification", RELEVANCE, "small"),
         "modernbert-ce": ("modernbert", "ForSequenceClassification", RELEVANCE, "wide"),
         "bert-mlm": ("bert", "ForMaskedLM", RELEVANCE, "small"),
         "xlmr-mlm": ("xlm-roberta", "ForMaskedLM", RELEVANCE, "small"),
         "bert-ner": ("bert", "ForTokenClassification", ENTITIES, "small"),
         "xlmr-ner": ("xlm-roberta", "ForTokenClassification", ENTITIES, "small")}
SPECIALS = {"bert": dict(unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                         mask_token="[MASK]"),
            "xlm-roberta": dict(unk_token="<unk>", pad_token="<pad>", cls_token="<s>", sep_token="</s>",
                                mask_token="<mask>", bos_token="<s>", eos_token="</s>"),
            "modernbert": dict(unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                               mask_token="[MASK]")}


class Case:
    """One exported head: its source directory, bundle, and transformers' model and tokenizer."""

    def __init__(self, arch: str, source: Path, bundle: Path, model: torch.nn.Module) -> None:
        self.arch, self.source, self.bundle, self.model = arch, source, bundle, model
        self.tokenizer = transformers.PreTrainedTokenizerFast(
            tokenizer_file=str(source / "tokenizer.json"), **SPECIALS[arch])

    def __getstate__(self) -> dict[str, Any]:  # tests.helpers.shared.reloaded says why
        return {**self.__dict__, "model": type(self.model)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, model=reloaded(state["model"], state["source"]))

    def logits(self, *texts: Any) -> torch.Tensor:
        """transformers' own tokenizer call (pairs: its pair template, token_type_ids where the model has two
        token types, cut longest-first to the model's positions) and model."""
        types = token_types(self.model)
        feeds = self.tokenizer(*texts, padding=True, truncation=True, max_length=MAX_POSITIONS,
                               return_token_type_ids=types, return_tensors="pt")
        with torch.no_grad():
            return self.model(**feeds).logits


def token_types(model: torch.nn.Module) -> bool:
    """Whether the model has segment types (BERT's two); RoBERTa's family has one, ModernBERT none."""
    return getattr(model.config, "type_vocab_size", 0) >= 2


def export_cases(root: Path) -> dict[str, Case]:
    made = {}
    for name, (arch, head, names, shape) in CASES.items():
        extra = {"initializer_range": WIDE} if head == "ForSequenceClassification" else {}
        model = save_hf(root / name / "source", arch, head, shape, names=names, **extra)
        export_bundle(root / name / "source", root / name / "bundle", name=name)
        made[name] = Case(arch, root / name / "source", root / name / "bundle", model)
    return made
