"""jina-embeddings-v3 as released (jinaai/jina-embeddings-v3, custom code jinaai/xlm-roberta-flash-implementation):
its task LoRAs live inside the checkpoint; they load here as adapters named after config.json's lora_adaptations
(as if each were given as `--adapter NAME=DIR`), each task prompted by its task_instructions entry.

Shape letters: N tasks, r lora_rank, I a projection's input width, O its output width, V vocabulary, D d_model.

The custom code (modeling_lora.py) registers a torch parametrization (LoRAParametrization) on every nn.Linear and
nn.Embedding under `roberta.`, so each of those weights is saved as

    <module>.parametrizations.weight.original    the base weight
    <module>.parametrizations.weight.0.lora_A    stacked over the tasks (first axis: the index in lora_adaptations)
    <module>.parametrizations.weight.0.lora_B

and task t's weight is the base plus a low-rank delta at s = lora_alpha / lora_rank (no task: the base weights):

    nn.Linear      lora_A (N, r, I), lora_B (N, O, r):  W + s · B[t] A[t]      here: A[t], s · B[t] (PEFT's pair)
    nn.Embedding   lora_A (N, V, r), lora_B (N, r, D):  E + s · A[t] B[t]      the product swapped (the table is
                                                                               (V, D)); here: A[t]ᵀ, (s · B[t])ᵀ

How each module that carries LoRA is served:

    word_embeddings, mixer.Wqkv, mixer.out_proj, mlp.fc1, mlp.fc2
                            onto our token embedding and projections (model.peft.our_pairs: Wqkv's B cut in three
                            over its one A)
    token_type_embeddings   type_vocab_size 1, so every token has type 0 and gets that row's delta
                            c_t = s · A[t][0] B[t] (D,): folded exactly into the token embedding's adapter as one
                            more rank, a column of ones in Aᵀ and c_t in B (every row of the table moves by c_t).
                            With more token types the fold is not exact: refused, naming the module
    pooler.dense            its output is no part of the embedding (sentence-transformers pools the token states):
                            left out with the base pooler, as the family leaves out every pooler

A LoRA on any other module is refused by the adapter reader's checks (model.peft). Tensors are read in float32
whatever their dtype (bfloat16 as released), so the products are taken in float32.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from model.adapters import with_adapters
from model.checkpoint import LoadedModel
from model.config_rules import EMBEDDING_TARGET
from model.families import Family, family_of, full_table
from model.families.rotary import jina_released
from model.hf import is_hf_dir, load_sentence_transformers
from model.peft import Adapter, AdapterError, adapter_of, check_names, our_pairs
from model.sentence import read_json
from model.weights import load_weights

__all__ = ["is_jina_lora_dir", "load_jina_lora", "split_parametrizations"]

ORIGINAL = ".parametrizations.weight.original"
LORA = {"lora_A": ".parametrizations.weight.0.lora_A", "lora_B": ".parametrizations.weight.0.lora_B"}
TOKEN_TYPE = "embeddings.token_type"
Lora = dict[str, dict[str, Tensor]]  # checkpoint module -> {"lora_A": (N, ...), "lora_B": (N, ...)}


def is_jina_lora_dir(path: Path) -> bool:
    return is_hf_dir(path) and jina_released(read_json(path / "config.json"))


def load_jina_lora(path: Path) -> LoadedModel:
    """The released directory at `path`: its base (the .original weights) as a sentence-transformers model, one
    adapter per task in lora_adaptations order, and the tasks' instructions among its prompts."""
    path = Path(path)
    hf = read_json(path / "config.json")
    tasks = _tasks(hf)
    base, lora = split_parametrizations({key: value.float() for key, value in load_weights(path).items()})
    loaded = load_sentence_transformers(path, base)
    loaded = replace(loaded, prompts=task_prompts(hf, loaded.prompts))
    family, _ = family_of(hf)
    table = full_table(family, "none", hf)
    return with_adapters(loaded, [task_adapter(hf, name, index, lora, family, table)
                                  for index, name in enumerate(tasks)])


def split_parametrizations(weights: dict[str, Tensor]) -> tuple[dict[str, Tensor], Lora]:
    """(the base weights under their plain names, the LoRA tensors by module); a module must hold its original and
    both LoRA tensors."""
    base: dict[str, Tensor] = {}
    lora: Lora = {}
    for key, value in weights.items():
        part = next((name for name, suffix in LORA.items() if key.endswith(suffix)), None)
        if part is not None:
            lora.setdefault(key.removesuffix(LORA[part]), {})[part] = value
        else:
            base[f"{key.removesuffix(ORIGINAL)}.weight" if key.endswith(ORIGINAL) else key] = value
    incomplete = [m for m, ab in lora.items() if len(ab) != 2 or f"{m}.weight" not in base]
    if incomplete or not lora:
        raise AdapterError(f"jina-embeddings-v3's released layout holds each task LoRA as {ORIGINAL}, "
                           f"{LORA['lora_A']} and {LORA['lora_B']}; "
                           + (f"incomplete: {', '.join(incomplete)}" if incomplete else "the weights hold none"))
    return base, lora


def task_prompts(hf: dict[str, Any], prompts: dict[str, str]) -> dict[str, str]:
    """The sentence-transformers prompts with task_instructions (task -> prefix) added; a task whose instruction
    differs from a prompt of the same name is refused (which one the task takes would be a guess)."""
    instructions = {str(k): str(v) for k, v in (hf.get("task_instructions") or {}).items()}
    if unknown := sorted(set(instructions) - set(hf["lora_adaptations"])):
        raise AdapterError(f"task_instructions names tasks that lora_adaptations does not: {', '.join(unknown)}")
    if differ := sorted(name for name, text in instructions.items() if prompts.get(name, text) != text):
        raise AdapterError(f"task_instructions and config_sentence_transformers.json's prompts differ for "
                           f"{', '.join(differ)}")
    return {**prompts, **instructions}


def task_adapter(hf: dict[str, Any], name: str, index: int, lora: Lora, family: Family,
                 table: dict[str, Any]) -> Adapter:
    """Task `index` of every module's stacked LoRA as our adapter `name` (scaling folded in, the token-type
    embedding's folded into the token embedding's, the pooler's left out)."""
    alpha, rank = float(hf.get("lora_alpha", 1)), int(hf.get("lora_rank", 4))
    by_module = {}
    for module, ab in lora.items():
        body = family.body_name(module)
        if body.startswith(family.ignored):  # the pooler: no part of the embedding
            continue
        down, up = _pair(module, ab, index, rank, len(hf["lora_adaptations"]), table.get(body))
        by_module[body] = (down, up * (alpha / rank))  # (r, I), (O, r)
    by_module = fold_token_type(by_module, table, int(hf["vocab_size"]))
    return adapter_of(name, our_pairs(name, by_module, family, table), alpha, alpha / rank, False,
                      hf.get("_name_or_path"))


def _pair(module: str, ab: dict[str, Tensor], index: int, rank: int, tasks: int,
          target: Any) -> tuple[Tensor, Tensor]:
    """Task `index`'s (A (r, I), B (O, r)) of a module in PEFT's orientation: an embedding's swapped product
    (A (V, r), B (r, D): E + A B) turned into A ᵀ (r, V) and Bᵀ (D, r)."""
    a, b = ab["lora_A"], ab["lora_B"]  # (N, r, I), (N, O, r); an embedding: (N, V, r), (N, r, D)
    embedding = target in (EMBEDDING_TARGET, TOKEN_TYPE)
    r = a.shape[2] if embedding else a.shape[1]
    if a.shape[0] != tasks or b.shape[0] != tasks or r != rank:
        raise AdapterError(f"{module}: LoRA of shapes A {tuple(a.shape)}, B {tuple(b.shape)} do not stack "
                           f"{tasks} tasks (lora_adaptations) of rank {rank} (lora_rank)")
    return (a[index].T, b[index].T) if embedding else (a[index], b[index])


def fold_token_type(by_module: dict[str, tuple[Tensor, Tensor]], table: dict[str, Any],
                    vocab_size: int) -> dict[str, tuple[Tensor, Tensor]]:
    """The token-type embedding's pair folded into the token embedding's: with one token type its delta is one
    vector c (D,) added to every token, which is one more rank of the token embedding's adapter, a row of ones in
    its Aᵀ (r + 1, V) and c in its B (D, r + 1). More token types: refused."""
    token_type = next((m for m in by_module if table.get(m) == TOKEN_TYPE), None)
    if token_type is None:
        return by_module
    by_module = dict(by_module)
    down, up = by_module.pop(token_type)  # (r, types), (D, r)
    if down.shape[1] != 1:
        raise AdapterError(f"{token_type} carries LoRA over {down.shape[1]} token types: served only folded into "
                           "the token embedding's, which is exact with one token type (type_vocab_size 1)")
    shift = up @ down[:, 0]  # (D,): s · A[t][0] B[t]
    word = next(key for key, value in table.items() if value == EMBEDDING_TARGET)
    word_down, word_up = by_module.get(word, (up.new_zeros(0, vocab_size), up.new_zeros(up.shape[0], 0)))
    by_module[word] = (torch.cat([word_down, word_down.new_ones(1, vocab_size)]),  # (r + 1, V)
                       torch.cat([word_up, shift[:, None]], dim=1))  # (D, r + 1)
    return by_module


def _tasks(hf: dict[str, Any]) -> list[str]:
    tasks = hf.get("lora_adaptations")
    if not isinstance(tasks, list) or not tasks:
        raise AdapterError(f"lora_adaptations must list the task names; got {tasks!r}")
    check_names([str(task) for task in tasks])
    return [str(task) for task in tasks]
