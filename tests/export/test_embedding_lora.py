"""LoRA on the token embeddings (PEFT's lora.Embedding, model.lora.LoRAEmbedding) against transformers + PEFT 0.21.

A random BertModel and PEFT adapters that target `word_embeddings`, alone or with the attention projections (as
jina-embeddings-v3's tasks do) or beside an adapter without it, every lora_embedding_A / _B random
(tests/helpers/adapters.py): our encoder with adapter index k, and the exported graphs fed index k, give what
PeftModel gives with that adapter active, per adapter and in a batch mixing the base and every adapter (hidden states
on real tokens, the pooled vector, the attention maps: max abs 1e-5). The inputs hold the pad id and the last id of
the vocabulary on real tokens, the edges of each adapter's rows in the flat table. Gemma3's scaled embed_tokens
(whose adapter PEFT saves with the base's own table beside it) likewise. The stacked table costs the graph its own
bytes, and a run at XLM-R's vocabulary (V = 250,002) no (B, V, R) copy of it. Embeddings this export does not adapt
(position, token-type) are refused, saying so, and so is a saved table that is not the base's.

Shape letters: B batch, T sequence, V vocabulary, R the padded rank, N adapters.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from bundle.manifest import Manifest
from export.bundle import export_bundle
from export.graphs import export_graph
from model.adapters import adapted_encoder
from model.load import load_model
from model.lora import LoRAEmbedding
from model.peft import AdapterError, read_adapter
from tests.export.test_adapters import assert_equals_reference, graph_sizes, onnx_outputs
from tests.helpers.adapters import peft_reference, run_reference, save_adapter
from tests.helpers.decoders import save_decoder
from tests.helpers.families import save_random, tokenizer_for
from tests.model.test_lora import CHANGED, _assert_body_equals_peft, adapted, assert_rows_match, bert_loader, save_bert

ATTENTION = ["query", "key", "value", "attention.output.dense"]
ADAPTERS = {  # the token embeddings with the attention (jina's tasks), alone, and an adapter without them
    "tokens-attention": dict(r=4, lora_alpha=8, target_modules=["word_embeddings", *ATTENTION]),
    "tokens": dict(r=2, lora_alpha=4, use_rslora=True, target_modules=["word_embeddings"]),
    "mlp": dict(r=8, lora_alpha=16, target_modules=["intermediate.dense", "output.dense"]),
}
PAD = 0  # BERT's [PAD], the embedding's padding_idx


def batch(vocab: int, length: int, rows: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, T) random ids, the pad id and the vocabulary's last id among row 0's real tokens, every odd row
    right-padded to a shorter length."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (rows, length), generator=generator)  # (B, T)
    ids[0, 2], ids[0, 3] = PAD, vocab - 1
    mask = torch.ones_like(ids)
    for row in range(1, rows, 2):
        mask[row, 6 + row:] = 0
    return ids, mask


@pytest.fixture(scope="module", params=["tiny", "realistic"])
def bert(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp(f"bert-{request.param}")
    save_bert(root / "base", request.param)
    adapters = {name: save_adapter(root / "base", root / name, bert_loader, seed=seed, **lora)
                for seed, (name, lora) in enumerate(ADAPTERS.items(), start=1)}
    return root / "base", adapters


def test_the_table_holds_each_adapter_in_its_rows(bert: tuple[Path, dict[str, Path]]) -> None:
    base_dir, adapters = bert
    ours = adapted(base_dir, adapters)
    table = ours.embeddings.token
    V, D = ours.config.vocab_size, ours.config.d_model  # noqa: N806
    assert isinstance(table, LoRAEmbedding) and ours.config.adapter_rank == 8
    assert table.down.shape == (4 * V, 8) and table.up.shape == (4, D, 8)  # ((N + 1) · V, R), (N + 1, D, R)
    assert "embeddings.token" in ours.config.adapter_targets
    pair = read_adapter("tokens", adapters["tokens"], base_dir).pairs["embeddings.token"]
    down, up = table.pair(2)
    assert torch.equal(down[:, :2], pair.down.T) and not down[:, 2:].any() and torch.equal(up[:, :2], pair.up)
    assert not table.pair(0)[0].any() and not table.pair(3)[0].any()  # the base; "mlp" leaves the table alone


def test_each_adapter_equals_peft(bert: tuple[Path, dict[str, Path]]) -> None:
    base_dir, adapters = bert
    ours, reference = adapted(base_dir, adapters), peft_reference(base_dir, bert_loader, adapters)
    ids, mask = batch(ours.config.vocab_size, 200 if ours.config.d_model == 128 else 24)
    plain = None
    for index, name in enumerate([None, *adapters]):
        with torch.no_grad():
            out = ours(ids, mask, output_attentions=True, adapter=torch.full((len(ids),), index))
        assert_rows_match(out, run_reference(reference, name, input_ids=ids, attention_mask=mask,
                                             output_attentions=True), mask)
        if plain is None:
            plain = out.token_states
        else:  # the adapter changes the outputs ("tokens": through the token embeddings alone)
            assert (out.token_states - plain)[mask.bool()].abs().max() > CHANGED


def test_a_mixed_batch_equals_each_row_alone(bert: tuple[Path, dict[str, Path]]) -> None:
    base_dir, adapters = bert
    ours, reference = adapted(base_dir, adapters), peft_reference(base_dir, bert_loader, adapters)
    ids, mask = batch(ours.config.vocab_size, 40, seed=1)
    rows = torch.tensor([2, 0, 1, 3])  # "tokens", the base, "tokens-attention", "mlp"
    with torch.no_grad():
        out = ours(ids, mask, output_attentions=True, adapter=rows)
    for row, index in enumerate(rows.tolist()):
        alone = run_reference(reference, [None, *adapters][index], input_ids=ids[row:row + 1],
                              attention_mask=mask[row:row + 1], output_attentions=True)
        assert_rows_match(out, alone, mask[row:row + 1], [row])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("embedding-bundle")
    save_bert(root / "base", "tiny")
    adapters = {name: save_adapter(root / "base", root / name, bert_loader, seed=seed, **lora)
                for seed, (name, lora) in enumerate(ADAPTERS.items(), start=1)}
    export_bundle(root / "base", root / "bundle", adapters=adapters)
    return root / "base", root / "bundle", adapters


def test_the_manifest_names_the_embedding_target(exported: tuple[Path, Path, dict[str, Path]]) -> None:
    _, bundle, _ = exported
    entries = Manifest.read(bundle).adapters
    assert entries[0].targets == ["attention.k_proj", "attention.out_proj", "attention.q_proj", "attention.v_proj",
                                  "embeddings.token"]
    assert entries[1].targets == ["embeddings.token"] and "embeddings.token" not in entries[2].targets


@pytest.mark.parametrize("graph", ["fast-fp32.onnx", "fast-fp32-opt.onnx", "attention-fp32.onnx"])
def test_each_adapter_and_a_mixed_batch_equal_peft_in_the_graphs(exported: tuple[Path, Path, dict[str, Path]],
                                                                 graph: str) -> None:
    base, bundle, adapters = exported
    reference = peft_reference(base, bert_loader, adapters)
    ids, mask = batch(reference.config.vocab_size, 24)
    ids = ids.masked_fill(mask == 0, PAD)
    names = [None, *adapters]
    plain = None
    for index, name in enumerate(names):
        got = onnx_outputs(bundle, graph, ids, mask, [index] * len(ids))
        theirs = run_reference(reference, name, input_ids=ids, attention_mask=mask, output_attentions=True)
        assert_equals_reference(got, theirs, mask, slice(None))  # type: ignore[arg-type]
        if plain is None:
            plain = got["token_embeddings"]
        else:
            assert np.abs(got["token_embeddings"] - plain)[mask.bool().numpy()].max() > CHANGED
    mixed = [2, 0, 1, 3]
    got = onnx_outputs(bundle, graph, ids, mask, mixed)
    for row, index in enumerate(mixed):
        alone = run_reference(reference, names[index], input_ids=ids[row:row + 1], attention_mask=mask[row:row + 1],
                              output_attentions=True)
        assert_equals_reference(got, alone, mask[row:row + 1], [row])


def gemma3_loader(path: Path) -> torch.nn.Module:
    return transformers.Gemma3TextModel.from_pretrained(path, attn_implementation="eager")


def test_a_scaled_decoder_embedding_equals_peft(tmp_path: Path) -> None:
    """Gemma3's embed_tokens (scaled by sqrt(d_model), which PEFT applies to the adapter's rows too) with q and v."""
    save_decoder(tmp_path / "base", "gemma3", "Model", "wide")
    adapters = {"tokens-attention": save_adapter(tmp_path / "base", tmp_path / "lora", gemma3_loader, r=4,
                                                 target_modules=["embed_tokens", "q_proj", "v_proj"]),
                "tokens": save_adapter(tmp_path / "base", tmp_path / "tokens", gemma3_loader, seed=2, r=2,
                                       target_modules=["embed_tokens"])}
    _assert_body_equals_peft(tmp_path / "base", adapters, gemma3_loader)


def test_a_saved_table_other_than_the_bases_is_refused(tmp_path: Path) -> None:
    """PEFT saves a targeted embed_tokens' own table beside its LoRA (read above: the base's, so served); one that
    differs from the base's (a retrained or resized vocabulary) would change the base for every row."""
    save_decoder(tmp_path / "base", "gemma3", "Model", "small")
    adapter = save_adapter(tmp_path / "base", tmp_path / "lora", gemma3_loader, r=4, target_modules=["embed_tokens"])
    key = "embed_tokens.base_layer.weight"
    saved = load_file(str(adapter / "adapter_model.safetensors"))[f"base_model.model.{key}"]
    assert read_adapter("lora", adapter, tmp_path / "base").targets == ("embeddings.token",)
    _add_tensors(adapter, {key: saved + 1e-3})
    with pytest.raises(AdapterError, match=f"base_model.model.{key} is a token embedding table of its own "
                                           r"\(PEFT's save_embedding_layers\), which differs from the base's"):
        read_adapter("lora", adapter, tmp_path / "base")


REFUSALS = {
    "position_embeddings": r"targets embeddings.position_embeddings \(embeddings.position here\), which is not "
                           r"supported: LoRA on the position embeddings is not served \(only the token embeddings "
                           r"take an embedding LoRA\); adapters are accepted on the token embeddings and the "
                           r"attention and MLP projections only: embeddings.word_embeddings, attention.self.query",
    "token_type_embeddings": r"targets embeddings.token_type_embeddings \(embeddings.token_type here\), which is not "
                             r"supported: LoRA on the token-type embeddings is not served",
    "LayerNorm": r"targets embeddings.LayerNorm \(embeddings.norm here\), which is not supported: adapters are "
                 r"accepted on the token embeddings and the attention and MLP projections only",
}


@pytest.mark.parametrize("target", list(REFUSALS))
def test_other_embeddings_are_refused(exported: tuple[Path, Path, dict[str, Path]], tmp_path: Path,
                                      target: str) -> None:
    """Position and token-type tables take PEFT's embedding LoRA too, and a norm its linear one; none is served."""
    base, _, _ = exported
    modules = [f"embeddings.{target}", "word_embeddings", "query"]
    if target == "LayerNorm":  # PEFT refuses a LoRA on a LayerNorm itself: write one by hand
        adapter = save_adapter(base, tmp_path / target, bert_loader, r=4, target_modules=["query"])
        _add_tensors(adapter, {"embeddings.LayerNorm.lora_A.weight": torch.ones(4, 32),
                               "embeddings.LayerNorm.lora_B.weight": torch.ones(32, 4)})
    else:
        adapter = save_adapter(base, tmp_path / target, bert_loader, r=4, target_modules=modules)
    with pytest.raises(AdapterError, match=REFUSALS[target]):
        export_bundle(base, tmp_path / "bundle", ["fp32"], adapters={target: adapter})
    assert not (tmp_path / "bundle").exists()


def test_an_embedding_pair_must_be_whole(exported: tuple[Path, Path, dict[str, Path]], tmp_path: Path) -> None:
    base, _, _ = exported
    adapter = save_adapter(base, tmp_path / "half", bert_loader, r=4, target_modules=["word_embeddings"])
    _add_tensors(adapter, {}, drop="embeddings.word_embeddings.lora_embedding_B")
    with pytest.raises(AdapterError, match="embeddings.word_embeddings holds lora_embedding_A; plain LoRA on an "
                                           r"embedding is lora_embedding_A \(r, in\) and lora_embedding_B"):
        read_adapter("half", adapter, base)


def _add_tensors(adapter: Path, extra: dict[str, torch.Tensor], drop: str | None = None) -> None:
    file = adapter / "adapter_model.safetensors"
    tensors = {k: v for k, v in load_file(str(file)).items() if k != f"base_model.model.{drop}"}
    save_file({**tensors, **{f"base_model.model.{k}": v for k, v in extra.items()}}, str(file))


XLMR_VOCAB = 250_002
RUN_SHAPE = (8, 128)  # (B, T) of the measured run


def test_at_xlmr_vocabulary_the_graph_holds_the_table_once_and_a_run_copies_none(tmp_path: Path) -> None:
    """Two rank-4 adapters on word_embeddings and the attention, V = 250,002, 64 wide, one layer: the graph's weights
    grow by the stacked table ((N + 1) · V · R floats, 12 MB), and runs of 8 x 128 tokens, mixing the base and
    both adapters, peak (VmHWM over two runs, in a fresh process) within a few MB of the bare base's runs, where one
    (B, V, R) gather of the table would take 32 MB."""
    tokenizer = tokenizer_for("bert")
    config = transformers.BertConfig(vocab_size=XLMR_VOCAB, hidden_size=64, num_attention_heads=1, num_hidden_layers=1,
                                     intermediate_size=128, max_position_embeddings=256)
    save_random(tmp_path / "base", transformers.BertModel, config, tokenizer, seed=0)
    lora = dict(r=4, target_modules=["word_embeddings", "query", "value"])
    adapters = {f"a{i}": read_adapter(f"a{i}", save_adapter(tmp_path / "base", tmp_path / f"a{i}", bert_loader,
                                                            seed=i, **lora), tmp_path / "base") for i in range(2)}
    base = load_model(tmp_path / "base").encoder
    export_graph(base, "fast", tmp_path / "plain.onnx")
    export_graph(adapted_encoder(base, {n: a.pairs for n, a in adapters.items()}), "fast", tmp_path / "adapted.onnx")
    table = 3 * XLMR_VOCAB * 4 * 4  # (N + 1) · V · R float32
    grown = graph_sizes(tmp_path / "adapted.onnx")["weights"] - graph_sizes(tmp_path / "plain.onnx")["weights"]
    assert table <= grown <= table + 64 * 1024
    plain, adapted_run = (_run_memory(tmp_path / f"{name}.onnx", adapters=name == "adapted")
                          for name in ("plain", "adapted"))
    copy = RUN_SHAPE[0] * XLMR_VOCAB * 4 * 4  # one (B, V, R) float32 copy of the table
    assert adapted_run["run_kb"] * 1024 < plain["run_kb"] * 1024 + copy / 4, (plain, adapted_run)
    assert adapted_run["session_kb"] * 1024 < plain["session_kb"] * 1024 + table + copy / 2, (plain, adapted_run)


MEASURE = """
import ctypes, json, sys
from pathlib import Path
from bundle.feeds import input_names, pad
from bundle.session import open_session

def status(key):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))
    return int(line.split()[1])

trim = ctypes.CDLL("libc.so.6").malloc_trim
session = open_session(Path(sys.argv[1]), "cpu")
batch, length, adapters = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
names = input_names(session)
rows = [i % 3 for i in range(batch)] if adapters else None  # the base and both adapters
feeds = pad([list(range(5, 5 + length))] * batch, 0, names, adapters=rows)
trim(0)
before = status("VmRSS")
Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
for _ in range(2):  # the second run plans its memory from the first's
    session.run(None, feeds)
print(json.dumps({"session_kb": before, "run_kb": status("VmHWM") - before}))
"""


def _run_memory(graph: Path, adapters: bool) -> dict[str, int]:
    """A fresh process's resident memory (kB) with a session on `graph` open, and how far two runs of RUN_SHAPE
    raise its peak."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", MEASURE, str(graph), *map(str, RUN_SHAPE), str(int(adapters))],
                         cwd=root, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
