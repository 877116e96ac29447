"""A sentence-transformers directory's modules, read as sentence-transformers applies them.

modules.json lists the pipeline: Transformer (the encoder; its sentence_bert_config.json gives
max_seq_length, or sentence-transformers 6's tokenizer_config.json), Pooling (one mode, model.pooling),
Dense modules (a projection with its activation, weights under linear.*; EmbeddingGemma chains two) and Normalize.
config_sentence_transformers.json carries the model's prompts ("query: ", an instruction, ...) and its
default prompt name. Anything else in modules.json, several pooling modes at once, or a Pooling that
leaves the prompt out (include_prompt false) is refused with the reason, rather than embedded
differently from sentence-transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from model.weights import load_weights

__all__ = ["SentenceModules", "load_weights", "read_json", "read_sentence_modules"]

MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
# sentence-transformers' legacy Pooling flags -> our pooling mode
_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len", "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_MODES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
          "weightedmean": "weightedmean", "lasttoken": "lasttoken"}
# torch.nn activation classes a Dense config names -> ours (model.layers.activate)
_DENSE_ACTIVATIONS = {"Tanh": "tanh", "Identity": "identity", "ReLU": "relu", "GELU": "gelu", "SiLU": "silu"}


@dataclass
class SentenceModules:
    pooling: str = "mean"
    normalize: bool = False
    max_seq_length: int = 0
    projection: dict[str, Any] = field(default_factory=dict)  # EncoderConfig projection_* fields
    projection_weights: dict[str, Tensor] = field(default_factory=dict)  # ours: projection.linear.*, then.{i}.*
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def read_sentence_modules(path: Path) -> SentenceModules | None:
    """The modules of the sentence-transformers directory `path`; None when it has no modules.json."""
    if not (path / "modules.json").is_file():
        return None
    found = SentenceModules()
    for module in read_json(path / "modules.json"):
        kind, where = module["type"].rsplit(".", 1)[-1], path / module.get("path", "")
        if kind not in MODULES:
            raise ValueError(f"{path}: sentence-transformers module {kind!r} is not supported; "
                             f"supported: {', '.join(MODULES)}")
        _read_module(found, kind, where)
    found.prompts, found.default_prompt_name = _prompts(path)
    return found


def _read_module(found: SentenceModules, kind: str, where: Path) -> None:
    if kind == "Transformer":
        found.max_seq_length = max_seq_length(where)
    elif kind == "Pooling":
        found.pooling = pooling_mode(read_json(where / "config.json"), where)
    elif kind == "Dense":
        _add_dense(found, where)
    elif kind == "Normalize":
        found.normalize = True


def max_seq_length(where: Path) -> int:
    """sentence_bert_config.json's max_seq_length; sentence-transformers 6 keeps it as the tokenizer's
    model_max_length in tokenizer_config.json instead. 0 when neither says (the loader caps it at the
    position limit)."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        value = read_json(where / name).get(key) if (where / name).is_file() else None
        if isinstance(value, (int, float)) and value > 0:
            return int(min(value, 1 << 31))
    return 0


def pooling_mode(config: dict[str, Any], where: Path) -> str:
    """The one pooling mode of a Pooling config, in the current (pooling_mode) or the legacy (flags) form."""
    if config.get("include_prompt", True) is False:
        raise ValueError(f"{where}: Pooling with include_prompt false (prompt tokens left out) is not supported")
    modes = config.get("pooling_mode") or [mode for flag, mode in _LEGACY_POOLING.items() if config.get(flag)]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1 or modes[0] not in {*_MODES, *_MODES.values()}:
        raise ValueError(f"{where}: exactly one pooling mode of {', '.join(_MODES)} is supported, got {modes}")
    return _MODES.get(modes[0], modes[0])


def _add_dense(found: SentenceModules, where: Path) -> None:
    """The first Dense is the projection; each later one joins its chain (projection_chain, weights then.{i})."""
    fields, weights = _dense(where)
    if not found.projection:
        found.projection = fields
        found.projection_weights = {f"projection.{k}": v for k, v in weights.items()}
        return
    chain = found.projection.setdefault("projection_chain", [])
    prefix = f"projection.then.{len(chain)}."
    chain.append((fields["projection_size"], fields["projection_activation"], fields["projection_bias"]))
    found.projection_weights |= {prefix + k: v for k, v in weights.items()}


def _dense(where: Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    config = read_json(where / "config.json")
    if config.get("use_residual"):
        raise ValueError(f"{where}: a Dense module with use_residual is not supported")
    name = str(config.get("activation_function", "torch.nn.modules.activation.Tanh")).rsplit(".", 1)[-1]
    if name not in _DENSE_ACTIVATIONS:
        raise ValueError(f"{where}: Dense activation {name!r} is not supported; "
                         f"supported: {', '.join(_DENSE_ACTIVATIONS)}")
    weights = load_weights(where)
    fields = dict(projection_size=int(config["out_features"]), projection_activation=_DENSE_ACTIVATIONS[name],
                  projection_bias=bool(config.get("bias", True)))
    return fields, weights


def _prompts(path: Path) -> tuple[dict[str, str], str | None]:
    config_file = path / "config_sentence_transformers.json"
    if not config_file.is_file():
        return {}, None
    config = read_json(config_file)
    prompts = {str(k): str(v) for k, v in (config.get("prompts") or {}).items()}
    default = config.get("default_prompt_name") or None
    if default is not None and default not in prompts:
        raise ValueError(f"{config_file}: default_prompt_name {default!r} is not one of its prompts {sorted(prompts)}")
    return prompts, default
