"""jina-embeddings-v3's released layout (model/jina_lora.py) through the one door, model.load.load_model: the base
and every task equal transformers' JinaEmbeddingsV3Model with that task's LoRA merged into its weights
(tests/helpers/jina.py), token states and the sentence-transformers embedding (mean, Normalize), at a tiny and a
realistic shape, from bfloat16 weights; each way of misreading the stacked LoRAs misses that reference; what cannot be
served exactly is refused, naming it.

Shape letters: B batch, T sequence, D hidden.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor

from model.load import check_config, load_model
from model.peft import AdapterError
from tests.helpers.family_checks import TOLERANCE
from tests.helpers.hub_repos import JINA_TASKS
from tests.helpers.jina import LORA_A, LORA_B, Released, merged, save_released
from tests.helpers.rotary import batches

TASKS = list(JINA_TASKS)


@pytest.fixture(scope="module", params=["tiny", "realistic"])
def released(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Released:
    return save_released(tmp_path_factory.mktemp(request.param) / "jina", request.param)


def reference(released: Released, task: int | None, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """The native model as task `task` (None: the base): its last hidden state (B, T, D) and its mean-pooled,
    normalised embedding (B, D), as the repository's sentence-transformers modules pool."""
    with torch.no_grad(), merged(released.native, released.lora, task):
        states = released.native(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, D)
    weights = mask[..., None].float()  # (B, T, 1)
    return states, F.normalize((states * weights).sum(1) / weights.sum(1), dim=-1)


def ours(loaded, task: int | None, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[no-untyped-def]
    """Our token states (B, T, D) and embedding (B, D) with every row's adapter the task's."""
    adapter = torch.full((ids.size(0),), 0 if task is None else task + 1)  # (B,): index 0 is the base
    with torch.no_grad():
        out = loaded.encoder(ids, mask, adapter=adapter)
    return out.token_states, out.embedding


def misses(loaded, released: Released) -> float:  # type: ignore[no-untyped-def]
    """The largest difference, over the tasks and batches, between `loaded` and the reference."""
    worst = 0.0
    for ids, mask in batches(loaded.tokenizer, "tiny"):
        for task in range(len(TASKS)):
            worst = max(worst, float((ours(loaded, task, ids, mask)[0] - reference(released, task, ids, mask)[0])
                                     [mask.bool()].abs().max()))
    return worst


@pytest.mark.parametrize("task", [None, *range(len(TASKS))], ids=["base", *TASKS])
def test_the_base_and_each_task_equal_the_merged_reference(released: Released, task: int | None) -> None:
    loaded = load_model(released.directory)
    assert loaded.encoder.config.adapters == tuple(TASKS)
    shape = "tiny" if released.native.config.hidden_size == 32 else "realistic"
    for ids, mask in batches(loaded.tokenizer, shape):
        states, embedding = ours(loaded, task, ids, mask)
        want_states, want = reference(released, task, ids, mask)
        real = mask.bool()
        assert (states[real] - want_states[real]).abs().max() <= TOLERANCE
        assert (embedding - want).abs().max() <= TOLERANCE


def test_the_tasks_are_adapters_with_their_instructions_as_prompts(tmp_path: Path) -> None:
    """With its sentence-transformers files: mean pooling and Normalize from them, each task an adapter (the
    embedding's rank one more than lora_rank: the token-type fold), its instruction a prompt of the same name."""
    loaded = load_model(save_released(tmp_path / "jina", sentence=True).directory)
    config = loaded.encoder.config
    assert (config.pooling, config.normalize) == ("mean", True)
    assert [a.name for a in loaded.adapters] == TASKS
    assert {name: loaded.prompts[name] for name in TASKS} == JINA_TASKS  # beside sentence-transformers' own
    assert {a.rank for a in loaded.adapters} == {5} and loaded.adapters[0].scaling == 0.25
    assert set(loaded.adapters[0].targets) == {"embeddings.token", "attention.q_proj", "attention.k_proj",
                                               "attention.v_proj", "attention.out_proj", "ffn.up", "ffn.down"}


def rewrite(directory: Path, change) -> None:  # type: ignore[no-untyped-def]
    """model.safetensors with `change(weights)` applied."""
    weights = load_file(str(directory / "model.safetensors"))
    change(weights)
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})


def _reverse_tasks(weights: dict[str, Tensor]) -> None:
    for key in [k for k in weights if k.endswith((LORA_A, LORA_B))]:
        weights[key] = weights[key].flip(0).contiguous()


def _drop_token_type(weights: dict[str, Tensor]) -> None:
    key = "roberta.embeddings.token_type_embeddings" + LORA_B
    weights[key] = torch.zeros_like(weights[key])


def _rotate_qkv(weights: dict[str, Tensor]) -> None:
    for key in [k for k in weights if k.endswith("mixer.Wqkv" + LORA_B)]:
        weights[key] = weights[key].roll(weights[key].shape[1] // 3, dims=1).contiguous()


@pytest.mark.parametrize("mistake", [_reverse_tasks, _drop_token_type, _rotate_qkv],
                         ids=["task order", "token-type LoRA dropped", "q/k/v parts rotated"])
def test_a_wrong_mapping_misses_the_reference(tmp_path: Path, mistake) -> None:  # type: ignore[no-untyped-def]
    """The checkpoint as a reader making the mistake would see it: its vectors miss the reference by far more than
    the tolerance, so the equality above is not vacuous on any of these."""
    released = save_released(tmp_path / "jina", sentence=False)
    assert misses(load_model(released.directory), released) <= TOLERANCE
    rewrite(released.directory, mistake)
    assert misses(load_model(released.directory), released) > 100 * TOLERANCE


def test_an_embedding_product_read_unswapped_is_refused(tmp_path: Path) -> None:
    """The word embedding's LoRA stored as a linear layer's (A (N, r, V), B (N, D, r): the product not swapped)
    does not fit the stacked shapes of an embedding: refused, naming the module, never served."""
    released = save_released(tmp_path / "jina", sentence=False)
    name = "roberta.embeddings.word_embeddings"
    rewrite(released.directory, lambda w: w.update({name + LORA_A: w[name + LORA_A].transpose(1, 2).contiguous(),
                                                   name + LORA_B: w[name + LORA_B].transpose(1, 2).contiguous()}))
    with pytest.raises(AdapterError, match=f"{name}: LoRA of shapes"):
        load_model(released.directory)


def test_lora_over_several_token_types_is_refused(tmp_path: Path) -> None:
    released = save_released(tmp_path / "jina", sentence=False)
    name = "roberta.embeddings.token_type_embeddings"
    rewrite(released.directory, lambda w: w.update({name + LORA_A: w[name + LORA_A].repeat(1, 2, 1).contiguous()}))
    with pytest.raises(AdapterError, match="carries LoRA over 2 token types"):
        load_model(released.directory)


def test_peft_adapters_over_the_released_layout_are_refused(tmp_path: Path) -> None:
    """config.json alone reads as jina's (what attnserve pull asks before the weights); a PEFT adapter that fits
    the body is still refused over the tasks the checkpoint carries."""
    released = save_released(tmp_path / "jina", sentence=False)
    check_config(released.directory)
    peft = tmp_path / "peft"
    peft.mkdir()
    (peft / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 4}))
    save_file({"base_model.model.layers.0.mlp.fc1.lora_A.weight": torch.ones(4, 32),
               "base_model.model.layers.0.mlp.fc1.lora_B.weight": torch.ones(64, 4)},
              str(peft / "adapter_model.safetensors"))
    with pytest.raises(AdapterError, match="carries its own adapters"):
        load_model(released.directory, adapters={"extra": peft})


def test_int8_is_refused_for_the_tasks_the_checkpoint_carries(tmp_path: Path) -> None:
    """As with --adapter directories, the int8 variants (calibrated and gated on the base) are not built over the
    checkpoint's own tasks: refused once they are read, before any graph."""
    from export.bundle import export_bundle
    from export.refusals import ExportError

    released = save_released(tmp_path / "jina", sentence=False)
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"text number {i}" for i in range(400)))
    with pytest.raises(ExportError, match="int8 are not built with adapters"):
        export_bundle(released.directory, tmp_path / "bundle", ["fp32", "int8"], calibration_data=texts)
    assert not (tmp_path / "bundle").exists()
