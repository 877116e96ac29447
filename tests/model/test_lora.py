"""LoRA adapters in the encoder (model/lora.py, read by model/peft.py) against transformers + PEFT 0.21.

Each base is a random transformers model saved as a Hugging Face directory; each adapter a PEFT LoRA over it with a
random lora_B (tests/helpers/adapters.py), saved with save_pretrained. Our encoder with adapter index k must give
what PeftModel gives with that adapter active (set_adapter; the base with disable_adapter()): hidden states on real
tokens, the pooled vector and the attention maps, to max abs 1e-5; a batch mixing the base and the adapters row by
row must give each row what the reference gives it alone.

Shape letters: B batch, T sequence, L layers, H heads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from torch import Tensor

from model.adapters import adapted_encoder
from model.load import load_model
from model.lora import LoRALinear
from model.peft import read_adapter
from tests.helpers.adapters import peft_reference, run_reference, save_adapter
from tests.helpers.decoders import save_decoder
from tests.helpers.families import save_hf, save_random, tokenizer_for

TOLERANCE = 1e-5
CHANGED = 1e-3  # an adapter must move the states by more than this, or it proves nothing
# adapter 1: attention only, rank 4; adapter 2: the MLP (and, as PEFT matches "output.dense" by suffix, the
# attention's output dense too), rank 8 with rsLoRA, one layer at rank 2 through rank_pattern
BERT_ADAPTERS = {
    "attention": dict(r=4, lora_alpha=8, target_modules=["query", "key", "value", "attention.output.dense"]),
    "mlp": dict(r=8, lora_alpha=16, use_rslora=True, target_modules=["intermediate.dense", "output.dense"],
                rank_pattern={"layer.1.intermediate.dense": 2}),
}


def bert_loader(path: Path) -> torch.nn.Module:
    return transformers.BertModel.from_pretrained(path, attn_implementation="eager")


def save_bert(directory: Path, shape: str) -> None:
    """tiny: the families' small BERT; realistic: 4 layers, head width 64, 256 positions."""
    if shape == "tiny":
        save_hf(directory, "bert", "Model", "small")
        return
    tokenizer = tokenizer_for("bert")
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=128, num_attention_heads=2,
                                     num_hidden_layers=4, intermediate_size=256, max_position_embeddings=256)
    save_random(directory, transformers.BertModel, config, tokenizer, seed=0)


def batch(vocab: int, length: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """(3, T) random ids and a mask with a right-padded row and a short row."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, length), generator=generator)  # (B, T)
    mask = torch.ones_like(ids)
    mask[1, length * 2 // 3:] = 0
    mask[2, 5:] = 0
    return ids, mask


def adapted(base_dir: Path, adapters: dict[str, Path]) -> torch.nn.Module:
    base = load_model(base_dir).encoder
    return adapted_encoder(base, {name: read_adapter(name, path, base_dir).pairs
                                  for name, path in adapters.items()}).eval()


def assert_rows_match(ours: Any, theirs: Any, mask: Tensor, rows: slice | list[int] = slice(None)) -> None:
    """Hidden states on real tokens, the [CLS] vector (a bare BertModel's pooled vector here) and the attention
    rows of real queries, to TOLERANCE."""
    real = mask.bool()
    states = theirs.last_hidden_state
    assert (ours.token_states[rows][real] - states[real]).abs().max() <= TOLERANCE
    assert (ours.embedding[rows] - states[:, 0]).abs().max() <= TOLERANCE
    maps = torch.stack(theirs.attentions, dim=1)  # (B, L, H, T, T)
    query_rows = real[:, None, None, :].expand(maps.shape[:-1])  # (B, L, H, T)
    assert (ours.attentions[rows][query_rows] - maps[query_rows]).abs().max() <= TOLERANCE


@pytest.fixture(scope="module", params=["tiny", "realistic"])
def bert(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp(f"bert-{request.param}")
    save_bert(root / "base", request.param)
    adapters = {name: save_adapter(root / "base", root / name, bert_loader, seed=seed, **lora)
                for seed, (name, lora) in enumerate(BERT_ADAPTERS.items(), start=1)}
    return root / "base", adapters


def test_each_adapter_equals_peft(bert: tuple[Path, dict[str, Path]]) -> None:
    base_dir, adapters = bert
    ours, reference = adapted(base_dir, adapters), peft_reference(base_dir, bert_loader, adapters)
    length = 200 if ours.config.d_model == 128 else 24
    ids, mask = batch(ours.config.vocab_size, length)
    base_states = None
    for index, name in enumerate([None, *adapters]):
        with torch.no_grad():
            out = ours(ids, mask, output_attentions=True, adapter=torch.full((3,), index))
        assert_rows_match(out, run_reference(reference, name, input_ids=ids, attention_mask=mask,
                                             output_attentions=True), mask)
        if base_states is None:
            base_states = out.token_states
        else:  # the adapter changes the outputs
            assert (out.token_states - base_states)[mask.bool()].abs().max() > CHANGED


def test_a_mixed_batch_equals_each_row_alone(bert: tuple[Path, dict[str, Path]]) -> None:
    base_dir, adapters = bert
    ours, reference = adapted(base_dir, adapters), peft_reference(base_dir, bert_loader, adapters)
    ids, mask = batch(ours.config.vocab_size, 40, seed=1)
    rows = torch.tensor([1, 0, 2])  # adapter "attention", the base, adapter "mlp"
    with torch.no_grad():
        out = ours(ids, mask, output_attentions=True, adapter=rows)
    for row, index in enumerate(rows.tolist()):
        alone = run_reference(reference, [None, *adapters][index], input_ids=ids[row:row + 1],
                              attention_mask=mask[row:row + 1], output_attentions=True)
        assert_rows_match(out, alone, mask[row:row + 1], [row])


def test_the_base_rows_are_the_plain_encoder(bert: tuple[Path, dict[str, Path]]) -> None:
    """Index 0 and no index at all give the unadapted encoder's outputs, bit for bit."""
    base_dir, adapters = bert
    ours, plain = adapted(base_dir, adapters), load_model(base_dir).encoder.eval()
    ids, mask = batch(ours.config.vocab_size, 16)
    with torch.no_grad():
        expected = plain(ids, mask).token_states
        assert torch.equal(ours(ids, mask, adapter=torch.zeros(3, dtype=torch.long)).token_states, expected)
        assert torch.equal(ours(ids, mask).token_states, expected)


def test_different_ranks_are_padded_to_the_largest(bert: tuple[Path, dict[str, Path]]) -> None:
    base_dir, adapters = bert
    ours = adapted(base_dir, adapters)
    q_proj = ours.blocks[0].attention.q_proj
    assert isinstance(q_proj, LoRALinear) and ours.config.adapter_rank == 8
    assert q_proj.down.shape == (3, 8, ours.config.d_model)  # (N + 1, R, I)
    assert not q_proj.down[0].any() and not q_proj.up[0].any()  # index 0: the base
    assert not q_proj.down[1, 4:].any() and not q_proj.down[2].any()  # rank 4 padded; "mlp" leaves q alone


DECODER_ADAPTERS = {
    "all": dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                   "down_proj"]),
    # gate_proj without up_proj (the other half of our joined `ffn.up` gets zero rows), at rank 2 by rank_pattern,
    # down_proj at rank 6 with its own alpha, in layers 0 and 2 only
    "mlp": dict(r=6, lora_alpha=12, target_modules=["gate_proj", "down_proj"],
                rank_pattern={"gate_proj": 2}, alpha_pattern={"down_proj": 3}, layers_to_transform=[0, 2],
                layers_pattern="layers"),
}


def qwen3_loader(path: Path) -> torch.nn.Module:
    return transformers.Qwen3Model.from_pretrained(path, attn_implementation="eager")


def test_a_decoder_adapter_equals_peft(tmp_path: Path) -> None:
    """Qwen3 (grouped heads, q/k norms, a causal mask): q/k/v/o and gate/up/down, gate and up joined in ffn.up."""
    save_decoder(tmp_path / "base", "qwen3", "Model", "wide")
    adapters = {name: save_adapter(tmp_path / "base", tmp_path / name, qwen3_loader, seed=seed, **lora)
                for seed, (name, lora) in enumerate(DECODER_ADAPTERS.items(), start=1)}
    _assert_body_equals_peft(tmp_path / "base", adapters, qwen3_loader)


def modernbert_loader(path: Path) -> torch.nn.Module:
    return transformers.ModernBertModel.from_pretrained(path, attn_implementation="eager")


def test_a_fused_qkv_adapter_equals_peft(tmp_path: Path) -> None:
    """ModernBERT's Wqkv is our q, k and v: one A, B split in three; Wi is our whole gated ffn.up."""
    save_hf(tmp_path / "base", "modernbert", "Model", "wide")
    adapters = {"fused": save_adapter(tmp_path / "base", tmp_path / "fused", modernbert_loader, r=4,
                                      target_modules=["Wqkv", "Wo", "Wi"])}
    _assert_body_equals_peft(tmp_path / "base", adapters, modernbert_loader)


def _assert_body_equals_peft(base_dir: Path, adapters: dict[str, Path],
                             loader: Callable[[Path], torch.nn.Module]) -> None:
    ours, reference = adapted(base_dir, adapters), peft_reference(base_dir, loader, adapters)
    ids, mask = batch(ours.config.vocab_size, 20)
    mask[2, 5:] = 1  # a decoder reads its last real token: keep the rows right-padded and long
    real = mask.bool()
    plain = None
    for index, name in enumerate([None, *adapters]):
        with torch.no_grad():
            out = ours(ids, mask, output_attentions=True, adapter=torch.full((3,), index))
        theirs = run_reference(reference, name, input_ids=ids, attention_mask=mask, output_attentions=True)
        assert (out.token_states[real] - theirs.last_hidden_state[real]).abs().max() <= TOLERANCE
        maps = torch.stack(theirs.attentions, dim=1)  # (B, L, H, T, T)
        query_rows = real[:, None, None, :].expand(maps.shape[:-1])  # (B, L, H, T)
        assert (out.attentions[query_rows] - maps[query_rows]).abs().max() <= TOLERANCE
        if plain is None:
            plain = out.token_states
        else:
            assert (out.token_states - plain)[real].abs().max() > CHANGED
