"""jina-embeddings-v3's tasks as LoRA adapters over one base, in one bundle, against transformers + PEFT 0.21.

A random JinaEmbeddingsV3Model (XLM-R with rotary q and k, model/families/rotary.py) and five PEFT LoRA adapters
named as jina's tasks: three, as jina's own, on the token embeddings (word_embeddings, PEFT's lora.Embedding) and
the attention projections (one with the MLP too), two on the attention or the MLP alone; each with random lora_B
and lora_embedding_A / _B (tests/helpers/adapters.py). Our encoder, and the graphs export_bundle(adapters=...)
writes, for each task and for one batch mixing the base and every task: hidden states on real tokens, pooled vector
and attention maps equal PeftModel's with that task's adapter active (max abs 1e-5).

Shape letters: B batch, T sequence, L layers, H heads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from bundle.feeds import pad
from bundle.manifest import Manifest
from bundle.session import open_session
from export.bundle import export_bundle
from tests.helpers import tokenizers
from tests.helpers.adapters import peft_reference, run_reference, save_adapter
from tests.helpers.families import save_random
from tests.model.test_lora import CHANGED, adapted, assert_rows_match

TOLERANCE = 1e-5
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
TASKS = {  # name -> LoRA: jina's tasks adapt the token embeddings and the attention at rank 4; two differ here so
    # that padding (rank and the embedding table's rows) is exercised
    "retrieval.query": dict(r=4, lora_alpha=1, target_modules=["word_embeddings", *ATTENTION]),
    "retrieval.passage": dict(r=4, lora_alpha=1, target_modules=["word_embeddings", *ATTENTION]),
    "separation": dict(r=8, lora_alpha=4, target_modules=ATTENTION),
    "classification": dict(r=2, lora_alpha=2, use_rslora=True, target_modules=["fc1", "fc2"]),
    "text-matching": dict(r=4, lora_alpha=1, target_modules=["word_embeddings", *ATTENTION, "fc1", "fc2"]),
}
PAD = 1  # XLM-R's <pad>


def peft_name(task: str) -> str:
    """PEFT's name for a task's adapter: torch module names cannot hold a dot (retrieval.query)."""
    return task.replace(".", "_")


def jina_loader(path: Path) -> torch.nn.Module:
    return transformers.JinaEmbeddingsV3Model.from_pretrained(path, attn_implementation="eager")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("jina")
    tokenizer = tokenizers.unigram()
    config = transformers.JinaEmbeddingsV3Config(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, num_attention_heads=2, num_hidden_layers=3,
        intermediate_size=128, max_position_embeddings=128, rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 700.0})
    save_random(root / "base", transformers.JinaEmbeddingsV3Model, config, tokenizer, seed=0)
    adapters = {name: save_adapter(root / "base", root / name, jina_loader, seed=seed, **lora)
                for seed, (name, lora) in enumerate(TASKS.items(), start=1)}
    export_bundle(root / "base", root / "bundle", adapters=adapters)
    return root / "base", root / "bundle", adapters


def batch(vocab: int, rows: int, length: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, length) random ids (row 0 holds the pad id and the vocabulary's last id among its real tokens), every
    other row right-padded to a shorter length."""
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(5, vocab, (rows, length), generator=generator)  # (B, T)
    ids[0, 2], ids[0, 3] = PAD, vocab - 1
    mask = torch.ones_like(ids)
    for row in range(1, rows, 2):
        mask[row, 10 + 3 * row:] = 0
    return ids.masked_fill(mask == 0, PAD), mask


def graph_outputs(bundle: Path, graph: str, ids: torch.Tensor, mask: torch.Tensor,
                  adapters: list[int]) -> dict[str, np.ndarray]:
    session = open_session(bundle / graph)
    rows = [row[: int(n)] for row, n in zip(ids.numpy(), mask.sum(1), strict=True)]
    feeds = pad(rows, PAD, [i.name for i in session.get_inputs()], adapters=adapters)
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def assert_row_matches(got: dict[str, np.ndarray], row: int, theirs: object) -> None:
    """Row `row` of the graph's outputs, cut to its real tokens, against the reference run on that row alone
    (its real tokens, no padding)."""
    states = theirs.last_hidden_state.numpy()[0]  # type: ignore[attr-defined]  # (T_row, D)
    length = len(states)
    assert np.abs(got["token_embeddings"][row][:length] - states).max() <= TOLERANCE
    assert np.abs(got["embeddings"][row] - states[0]).max() <= TOLERANCE  # [CLS] pooling without ST modules
    if "attentions" in got:
        maps = torch.stack(theirs.attentions, dim=1).numpy()[0]  # type: ignore[attr-defined]  # (L, H, T_row, T_row)
        assert np.abs(got["attentions"][row][:, :, :length, :length] - maps).max() <= TOLERANCE


def test_the_bundle_lists_the_tasks(exported: tuple[Path, Path, dict[str, Path]]) -> None:
    _, bundle, _ = exported
    manifest = Manifest.read(bundle)
    assert manifest.architecture == "jina"
    assert [a.name for a in manifest.adapters] == list(TASKS)
    assert [manifest.adapter_index(name) for name in TASKS] == [1, 2, 3, 4, 5]
    assert manifest.adapters[0].targets == ["attention.k_proj", "attention.out_proj", "attention.q_proj",
                                            "attention.v_proj", "embeddings.token"]
    assert manifest.adapters[2].targets == ["attention.k_proj", "attention.out_proj", "attention.q_proj",
                                            "attention.v_proj"]


@pytest.mark.parametrize("length", [40, 120])
def test_each_task_and_a_mixed_batch_equal_peft_in_pytorch(exported: tuple[Path, Path, dict[str, Path]],
                                                           length: int) -> None:
    base, _, adapters = exported
    ours = adapted(base, adapters)
    reference = peft_reference(base, jina_loader, {peft_name(task): path for task, path in adapters.items()})
    names: list[str | None] = [None, *map(peft_name, TASKS)]
    ids, mask = batch(reference.config.vocab_size, len(names), length)
    plain = None
    for index, name in enumerate(names):
        with torch.no_grad():
            out = ours(ids, mask, output_attentions=True, adapter=torch.full((len(names),), index))
        assert_rows_match(out, run_reference(reference, name, input_ids=ids, attention_mask=mask,
                                             output_attentions=True), mask)
        if plain is None:
            plain = out.token_states
        else:
            assert (out.token_states - plain)[mask.bool()].abs().max() > CHANGED
    rows = torch.tensor([3, 1, 0, 5, 2, 4])  # every task and the base, in another order
    with torch.no_grad():
        out = ours(ids, mask, output_attentions=True, adapter=rows)
    for row, index in enumerate(rows.tolist()):
        alone = run_reference(reference, names[index], input_ids=ids[row:row + 1], attention_mask=mask[row:row + 1],
                              output_attentions=True)
        assert_rows_match(out, alone, mask[row:row + 1], [row])


@pytest.mark.parametrize("graph", ["fast-fp32.onnx", "fast-fp32-opt.onnx", "attention-fp32.onnx"])
def test_each_task_and_a_mixed_batch_equal_peft(exported: tuple[Path, Path, dict[str, Path]], graph: str) -> None:
    base, bundle, adapters = exported
    reference = peft_reference(base, jina_loader, {peft_name(task): path for task, path in adapters.items()})
    names: list[str | None] = [None, *map(peft_name, TASKS)]
    ids, mask = batch(reference.config.vocab_size, 3)
    for index, name in enumerate(names):  # every row one task (or the base)
        got = graph_outputs(bundle, graph, ids, mask, [index] * 3)
        for row in range(3):
            alone = run_reference(reference, name, input_ids=ids[row:row + 1, : int(mask[row].sum())],
                                  output_attentions=True)
            assert_row_matches(got, row, alone)
    ids, mask = batch(reference.config.vocab_size, len(names))
    got = graph_outputs(bundle, graph, ids, mask, list(range(len(names))))  # the base and the five tasks, mixed
    for row, name in enumerate(names):
        length = int(mask[row].sum())
        alone = run_reference(reference, name, input_ids=ids[row:row + 1, :length], output_attentions=True)
        assert_row_matches(got, row, alone)
    plain = graph_outputs(bundle, graph, ids, mask, [0] * len(names))["token_embeddings"]
    assert all(np.abs(got["token_embeddings"][row] - plain[row]).max() > 1e-3 for row in range(1, len(names)))
