"""The one door for every model source: a directory in any layout of model/layouts.py's registry (our checkpoints,
ColBERT, bge-m3, sentence-transformers, Hugging Face), optionally read as an LLM reranker by a recipe
(model/lm_scorer.py) and with PEFT LoRA adapters stacked over it (model/peft.py, model/adapters.py).

Everything that can be refused without loading the base is refused first: an unknown recipe or a base that is not a
causal LM, adapter names, and each adapter directory (read onto the base's module names from its config.json).
`check_config` refuses, from a directory's small files alone, what its architecture makes unloadable, so that a
download (attnserve pull) stops before it fetches the weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bundle.preprocessing import FILE_NAME, read_processing
from model.adapters import with_adapters
from model.checkpoint import LoadedModel
from model.families import family_of
from model.families.towers import PAIRS
from model.layouts import layout_of, load_base
from model.lm_scorer import as_reranker, check_recipe
from model.peft import Adapter, AdapterError, check_names, read_adapter
from model.sentence import read_json
from model.towers import TOWER_NAMES, tower_config

__all__ = ["check_config", "load_model"]


def load_model(path: Path | str, adapters: Mapping[str, Path | str] | None = None,
               reranker: str | None = None, tower: str | None = None) -> LoadedModel:
    """The model at `path`; with `reranker` (a key of model.lm_scorer.RECIPES) its causal LM as a one-label
    cross-encoder; with `adapters` (name -> PEFT directory trained on `path`) those adapters stacked as indices
    1..N in this order; with `tower` ("vision", "text") that tower of a CLIP or SigLIP checkpoint (model/towers.py)."""
    path = Path(path)
    if reranker is not None:
        check_recipe(path, reranker)
    read = read_adapters(path, adapters or {})
    loaded = load_base(path, tower)
    if reranker is not None:
        loaded = as_reranker(loaded, reranker)
    if read and loaded.adapters:
        raise AdapterError(f"{path} carries its own adapters ({', '.join(a.name for a in loaded.adapters)}, "
                           f"{loaded.kind}); PEFT adapters are stacked over a bare base only")
    return with_adapters(loaded, read) if read else loaded


def check_config(path: Path | str, reranker: str | None = None) -> None:
    """ValueError for what `load_model(path, reranker=reranker)` would refuse from config.json (and the few small
    files a layout is recognised by): a directory in no layout, a model_type or architecture of no family in
    model/families/ (a colbert-ai checkpoint's HF_ColBERT reads as its base model's), body fields the family does not
    read (a position kind, a rope type), a recipe that does not fit; an image model (or a CLIP or SigLIP pair) whose
    preprocessor_config.json the export cannot carry (export.images). A pair is checked tower by tower."""
    path = Path(path)
    layout = layout_of(path)
    if layout.name == "peft":
        layout.load(path)  # an adapter is never served alone: this refuses it
    if reranker is not None:
        check_recipe(path, reranker)
    if layout.name != "attnserve":  # every other layout reads its family from config.json
        config = read_json(path / "config.json")
        towers = TOWER_NAMES if config.get("model_type") in PAIRS else (None,)
        for tower in towers:
            hf = tower_config(config, tower)
            family, _ = family_of({**hf, "architectures": None} if layout.name == "colbert-ai" else hf)
            family.config(hf)  # the body's fields: what config.json alone refuses (positions, rope types)
            if family.modality != "text":
                check_processing(path)


def check_processing(path: Path) -> None:
    """ValueError where an image model's preprocessor_config.json is missing or is not one the bundle can carry:
    steps bundle.preprocessing does not read, or images of more than one size (export.images)."""
    file = path / FILE_NAME
    if not file.is_file():
        raise ValueError(f"{path} is an image model without {FILE_NAME}: a bundle carries how its images are "
                         "prepared, so the export needs the checkpoint's image processor config")
    if read_processing(read_json(file)).size is None:
        raise ValueError(f"{file}: a shortest-edge resize without a centre crop gives images of many sizes; a "
                         "bundle serves one")


def read_adapters(path: Path, adapters: Mapping[str, Path | str]) -> list[Adapter]:
    """Each PEFT directory read onto the modules of the base at `path`, its name checked first."""
    check_names(list(adapters))
    return [read_adapter(name, Path(directory), path) for name, directory in adapters.items()]
