"""jina-embeddings-v3 laid out as its released repository is (custom code jinaai/xlm-roberta-flash-implementation,
model/jina_lora.py describes the layout), built from a random-weight transformers JinaEmbeddingsV3Model with random
task LoRAs, and the reference: that native model with task t's LoRA merged into a copy of its weights.

    released = save_released(directory, "tiny", seed=7)     config.json, model.safetensors (bfloat16), tokenizer,
                                                            sentence-transformers' files (mean, Normalize, prompts)
    with merged(model, released.lora, task): ...            a native model (or a SentenceTransformer's) as task t

Every tensor is rounded to bfloat16 first (the released dtype), so the float32 reference holds exactly what the
checkpoint holds. The mapping onto the released names is written out here by hand, from the custom code's module
names, not from attnserve's tables. Every lora_B is non-zero (as trained, not as initialised), on every module the
custom code adapts: the word and token-type embeddings, Wqkv, out_proj, fc1, fc2 and the pooler.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor

from tests.helpers.hub_repos import JINA_TASKS, XLMR_TOKENS, write_json
from tests.helpers.rotary import save_rotary

RANK, ALPHA = 4, 1  # jina-embeddings-v3's lora_rank and lora_alpha
SCALING = ALPHA / RANK
ORIGINAL, LORA_A, LORA_B = (".parametrizations.weight.original", ".parametrizations.weight.0.lora_A",
                            ".parametrizations.weight.0.lora_B")
EMBEDDINGS = ("embeddings.word_embeddings", "embeddings.token_type_embeddings")
# the custom code's names (under roberta.) for the native model's, per layer
LAYER = {"self_attn.o_proj": "mixer.out_proj", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2",
         "post_attention_layernorm": "norm1", "post_mlp_layernorm": "norm2"}
QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")


@dataclass
class Released:
    directory: Path
    native: torch.nn.Module  # transformers' JinaEmbeddingsV3Model with the base weights (eval, eager attention)
    lora: dict[str, tuple[Tensor, Tensor]]  # released module (no roberta.) -> (lora_A, lora_B), stacked over tasks
    sentence: Path | None  # the same sentence-transformers directory over the native model (the reference's)


def save_released(directory: Path, shape: str = "tiny", seed: int = 7, tasks: dict[str, str] = JINA_TASKS,
                  sentence: bool = True) -> Released:
    """The released layout at `directory`: with `sentence`, its sentence-transformers files (mean pooling,
    Normalize, the task instructions as prompts) around it, as the repository holds them (modules.json naming the
    custom Transformer module, custom_st.Transformer)."""
    source = directory.parent / f"{directory.name}-native"
    native = save_rotary(source, "jina_v3", "Model", shape, seed)
    with torch.no_grad():
        for parameter in native.parameters():
            parameter.copy_(parameter.to(torch.bfloat16).float())
    native.save_pretrained(source)
    write_json(source / "tokenizer_config.json", XLMR_TOKENS)
    reference = directory.parent / f"{directory.name}-sentence" if sentence else None
    if reference is not None:
        from tests.helpers.hub_repos import MAX_SEQ
        from tests.helpers.sentence import wrap_sentence_transformer

        wrap_sentence_transformer(reference, source, "mean", max_seq_length=MAX_SEQ, prompts=tasks)
        shutil.copytree(reference, directory)
        modules = json.loads((directory / "modules.json").read_text())
        write_json(directory / "modules.json", [{**modules[0], "type": "custom_st.Transformer"}, *modules[1:]])
    else:
        directory.mkdir(parents=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(source / name, directory / name)
    lora = random_lora(native, len(tasks), seed)
    save_file(released_state(native, lora), str(directory / "model.safetensors"), metadata={"format": "pt"})
    write_json(directory / "config.json", released_config(json.loads((source / "config.json").read_text()), tasks))
    return Released(directory, native, lora, reference)


def released_config(native: dict, tasks: dict[str, str]) -> dict:
    """The native config.json as the released one says it: XLMRobertaModel with rotary positions, its tasks."""
    kept = {k: v for k, v in native.items() if k not in ("rope_parameters", "rope_theta", "architectures",
                                                          "model_type", "dtype", "torch_dtype")}
    return {**kept, "model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"],
            "auto_map": {"AutoConfig": "jinaai/xlm-roberta-flash-implementation--configuration_xlm_roberta."
                                       "XLMRobertaFlashConfig",
                         "AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_lora.XLMRobertaLoRA"},
            "position_embedding_type": "rotary", "rotary_emb_base": native["rope_parameters"]["rope_theta"],
            "lora_adaptations": list(tasks), "task_instructions": tasks, "lora_rank": RANK, "lora_alpha": ALPHA,
            "lora_dropout_p": 0.0, "lora_main_params_trainable": False, "load_trained_adapters": True,
            "use_flash_attn": True, "torch_dtype": "bfloat16", "_name_or_path": "jinaai/jina-embeddings-v3"}


def lora_modules(native: torch.nn.Module) -> dict[str, tuple[int, int, bool]]:
    """Every module the custom code parametrizes (released name -> (fan_in, fan_out, embedding)): each nn.Linear
    and nn.Embedding, in native shapes (Wqkv: q, k and v stacked)."""
    width, vocab = native.config.hidden_size, native.config.vocab_size
    modules = {"embeddings.word_embeddings": (vocab, width, True),
               "embeddings.token_type_embeddings": (native.config.type_vocab_size, width, True),
               "pooler.dense": (width, width, False)}
    for i, layer in enumerate(native.layers):
        modules[f"encoder.layers.{i}.mixer.Wqkv"] = (width, 3 * width, False)
        for ours, theirs in LAYER.items():
            module = layer.get_submodule(ours)
            if isinstance(module, torch.nn.Linear):
                modules[f"encoder.layers.{i}.{theirs}"] = (module.in_features, module.out_features, False)
    return modules


def random_lora(native: torch.nn.Module, tasks: int, seed: int) -> dict[str, tuple[Tensor, Tensor]]:
    """Seeded LoRA stacked over `tasks`, in the custom code's shapes (linear: A (N, r, I), B (N, O, r); embedding:
    A (N, V, r), B (N, r, D)), rounded to bfloat16."""
    generator = torch.Generator().manual_seed(seed + 100)
    lora = {}
    for module, (fan_in, fan_out, embedding) in lora_modules(native).items():
        shapes = ((tasks, fan_in, RANK), (tasks, RANK, fan_out)) if embedding else (
            (tasks, RANK, fan_in), (tasks, fan_out, RANK))
        lora[module] = tuple(  # type: ignore[assignment]
            (0.2 * torch.randn(shape, generator=generator)).to(torch.bfloat16).float() for shape in shapes)
    return lora


def released_state(native: torch.nn.Module, lora: dict[str, tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """The native weights under the released names (roberta., emb_ln, mixer.Wqkv, norm1, ...), each parametrized
    module's weight as its .original beside its lora_A and lora_B, all in bfloat16."""
    state = native.state_dict()
    out = {f"embeddings.{n}.weight": state[f"embeddings.{n}.weight"] for n in ("word_embeddings",
                                                                                "token_type_embeddings")}
    out |= {f"emb_ln.{p}": state[f"embeddings.LayerNorm.{p}"] for p in ("weight", "bias")}
    out |= {f"pooler.dense.{p}": state[f"pooler.dense.{p}"] for p in ("weight", "bias")}
    for i in range(len(native.layers)):
        out |= {f"encoder.layers.{i}.mixer.Wqkv.{p}": torch.cat([state[f"layers.{i}.{q}.{p}"] for q in QKV])
                for p in ("weight", "bias")}
        out |= {f"encoder.layers.{i}.{theirs}.{p}": state[f"layers.{i}.{ours}.{p}"]
                for ours, theirs in LAYER.items() for p in ("weight", "bias")}
    for module, (a, b) in lora.items():
        out[module + ORIGINAL] = out.pop(f"{module}.weight")
        out[module + LORA_A], out[module + LORA_B] = a, b
    return {f"roberta.{name}": value.to(torch.bfloat16).contiguous() for name, value in out.items()}


def delta(module: str, a: Tensor, b: Tensor, task: int) -> Tensor:
    """Task `task`'s change of the module's weight, as LoRAParametrization computes it: an embedding's product
    swapped (A B, (V, D)), a linear layer's B A ((O, I)), times lora_alpha / lora_rank."""
    return SCALING * (a[task] @ b[task] if module.startswith(EMBEDDINGS) else b[task] @ a[task])


def native_targets(module: str) -> list[str]:
    """The native model's weight(s) a released module's weight is (Wqkv: q, k and v, in that order)."""
    if ".mixer.Wqkv" in module:
        prefix = module.split(".mixer")[0].replace("encoder.layers", "layers")
        return [f"{prefix}.{q}.weight" for q in QKV]
    if module.startswith("encoder.layers."):
        i, rest = module.removeprefix("encoder.layers.").split(".", 1)
        ours = next(o for o, t in LAYER.items() if t == rest)
        return [f"layers.{i}.{ours}.weight"]
    return [f"{module}.weight"]


@contextmanager
def merged(model: torch.nn.Module, lora: dict[str, tuple[Tensor, Tensor]], task: int | None) -> Iterator[None]:
    """`model` (a native JinaEmbeddingsV3Model) as task `task` (None: the base) inside the block: each module's
    delta added to a copy of its weights, the base weights put back after."""
    saved = {name: value.clone() for name, value in model.state_dict().items()}
    if task is not None:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for module, (a, b) in lora.items():
                targets = native_targets(module)
                for name, part in zip(targets, delta(module, a, b, task).chunk(len(targets)), strict=True):
                    params[name].add_(part)
    try:
        yield
    finally:
        model.load_state_dict(saved)
