"""`attnserve train --init DIR` on a base model of each family (tests/helpers/families.py), a few steps with the
family's own classification head (`--head pooler`): the checkpoint it writes is that family's
...ForSequenceClassification, weight for weight. Its weights, mapped back through the family's table
(model/families.py), load into transformers' own class for two labels, whose logits equal ours to 1e-5.
RoBERTa and CamemBERT share XLM-RoBERTa's family code, table and head, so XLM-RoBERTa stands for the three. The
rotary families (NomicBERT, GTE, jina-embeddings-v3: tests/helpers/rotary.py) are trained the same way.

Shape letters: B batch, C labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from torch import Tensor

from model.families import family_of, hf_layers
from model.load import load_model
from model.training.cli import main
from tests.helpers import rotary
from tests.helpers.families import hf_config, model_class, padded_batches, save_hf, tokenizer_for
from tests.model.test_train import toy_pairs, write_data

TOLERANCE = 1e-5
LABELS = {0: "neg", 1: "pos"}  # the toy task's labels, in the order training numbers them


def transformers_weights(ours: dict[str, Tensor], hf: dict[str, object], names: set[str]) -> dict[str, Tensor]:
    """Our state dict under the checkpoint's names, by the family's body and sequence-head tables (a fused
    q/k/v joined again, part k of a tensor several of theirs make, "ffn.up#k", cut out again); `names` are the
    reference's own, which say whether a head module sits under the body's prefix (BERT's pooler) or not (every
    classifier). A table may also map a checkpoint layout the reference's class does not hold (the rotary families'
    released names beside transformers' own): those are left out, and the caller's missing-names check still holds."""
    family, _ = family_of(hf)
    table = {**family.table, **family.heads["sequence"]}
    out = {}
    for layer in range(hf_layers(hf)):
        for theirs, mine in table.items():
            theirs = theirs.format(i=layer)
            parts = [mine] if isinstance(mine, str) else list(mine)
            for param in ("weight", "bias"):
                tensors = [_part(ours, table, p.format(i=layer), param) for p in parts]
                name = next((n for n in (f"{family.prefix}{theirs}.{param}", f"{theirs}.{param}") if n in names), None)
                if name is not None and all(t is not None for t in tensors):
                    out[name] = torch.cat(tensors)  # type: ignore[arg-type]
    return out


def _part(ours: dict[str, Tensor], table: dict, mine: str, param: str) -> Tensor | None:
    """Our tensor for `mine`, or its part k for "module#k" (cut into as many parts as the table names)."""
    module, _, part = mine.partition("#")
    tensor = ours.get(f"{module}.{param}")
    if tensor is None or not part:
        return tensor
    whole = module.split(".", 2)[-1]  # without blocks.{i}.
    count = len({str(v) for v in table.values() if isinstance(v, str) and v.partition("#")[0].endswith(whole)})
    return tensor.chunk(count)[int(part)]


@pytest.mark.parametrize("arch", ["bert", "xlm-roberta", "distilbert", "mpnet", "modernbert"])
def test_train_init_gives_the_familys_own_classifier(tmp_path: Path, arch: str) -> None:
    shape = "wide" if arch == "modernbert" else "small"  # wide: ModernBERT's mean pooling, biases, tanh GELU
    save_hf(tmp_path / "base", arch, "Model", shape)
    config = hf_config(arch, shape, tokenizer_for(arch).get_vocab_size(), id2label=LABELS)
    reference = model_class(arch, "ForSequenceClassification")(config).eval()
    assert_trained_classifier_is_the_familys(tmp_path, reference, tokenizer_for(arch))


@pytest.mark.parametrize("arch", ["nomic_bert", "gte", "jina_v3"])
def test_train_init_gives_the_rotary_familys_own_classifier(tmp_path: Path, arch: str) -> None:
    rotary.save_rotary(tmp_path / "base", arch)
    config = rotary.rotary_config(arch, "tiny", rotary.tokenizer_for(arch).get_vocab_size(), id2label=LABELS)
    reference = rotary.model_class(arch, "ForSequenceClassification")(config).eval()
    assert_trained_classifier_is_the_familys(tmp_path, reference, rotary.tokenizer_for(arch))


def assert_trained_classifier_is_the_familys(tmp_path: Path, reference: torch.nn.Module, tokenizer: Tokenizer) -> None:
    """`attnserve train --init tmp_path/base --head pooler` writes a classifier whose weights, put into the family's
    own ...ForSequenceClassification (`reference`, two labels), give its logits."""
    data = write_data(tmp_path / "data.jsonl", toy_pairs(24))
    args = ["--data", str(data), "--init", str(tmp_path / "base"), "--head", "pooler", "--epochs", "1",
            "--batch-size", "8", "--max-length", "32", "--no-progress", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    trained = load_model(tmp_path / "out").encoder.eval()
    hf = json.loads((tmp_path / "base" / "config.json").read_text())
    weights = transformers_weights(trained.state_dict(), hf, set(reference.state_dict()))
    missing, unexpected = reference.load_state_dict(weights, strict=False)
    assert not unexpected and all(name.endswith("position_ids") for name in missing), (missing, unexpected)
    for ids, mask in padded_batches(tokenizer)[::2]:
        with torch.no_grad():
            diff = trained(ids, mask).logits - reference(input_ids=ids, attention_mask=mask).logits  # (B, C)
        assert diff.abs().max() <= TOLERANCE
