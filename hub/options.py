"""What a named model's bundle is made with and where it is kept: the options `attnserve serve --model` and
`attnserve pull` share, each a flag and an ATTNSERVE_* variable (attnserve.flags), and what they make of one named
model (`Wanted`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import NoDecode

from attnserve.flags import split_items
from bundle.variants import DEFAULT_VARIANTS, chosen_variants
from hub.cache import BundleCache, shape_key
from hub.names import ModelName


@dataclass(frozen=True)
class Wanted:
    """A named model and what its bundle is exported with."""

    name: ModelName
    variants: tuple[str, ...]
    reranker: str | None = None

    @property
    def shape(self) -> str:
        return shape_key(self.variants, self.reranker)


class HubOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cache_dir: Path | None = Field(
        None, description="Directory of the bundle cache: the bundles of named models (--model, attnserve pull) by "
        "repository, commit and what shaped them (bundle schema, variants, reranker recipe), and the commit each "
        "served revision resolved to. Default: $XDG_CACHE_HOME/attnserve, else ~/.cache/attnserve.",
    )
    export: bool = Field(
        True, description="Make the bundle of a --model the cache does not hold: download it and, for a checkpoint, "
        "export it in a subprocess (attnserve pull; minutes for a large model). --no-export serves only what the "
        "cache holds and refuses to start otherwise.",
    )
    variants: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_VARIANTS), description="Graph variants a named checkpoint is exported "
        "in, as attnserve export --variants takes them (fp32 is always built; more variants, a longer export); "
        "part of the cache key. A repository that holds a bundle is served with the variants it has.",
    )
    reranker: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="`[NAME=]RECIPE`: export the named model NAME (as it is served; without "
        "NAME, the only one) as an LLM reranker by RECIPE, as attnserve export --reranker (qwen3: Qwen3-Reranker); "
        "part of the cache key.",
    )

    @field_validator("variants", "reranker", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return split_items(value) if isinstance(value, str | list) else value

    @field_validator("variants")
    @classmethod
    def _known_variants(cls, value: list[str]) -> list[str]:
        return chosen_variants(value)

    def cache(self) -> BundleCache:
        return BundleCache.at(self.cache_dir)

    def wanted(self, name: ModelName, models: int) -> Wanted:
        """`name` (one of `models` named models) with the variants and its reranker recipe, if it has one."""
        return Wanted(name, tuple(self.variants), self._recipe(name.served_name, models))

    def check_rerankers(self, served_names: Sequence[str]) -> None:
        """ValueError for a reranker that names no model: a bare RECIPE beside several, or a NAME served by none."""
        for item in self.reranker:
            name, equals, _ = item.rpartition("=")
            if not equals and len(served_names) != 1:
                raise ValueError(f"reranker {item!r}: with {len(served_names)} named models, say which as NAME=RECIPE")
            if equals and name not in served_names:
                raise ValueError(f"reranker {item!r}: no named model is served as {name!r}")

    def _recipe(self, served_name: str, models: int) -> str | None:
        for item in self.reranker:
            name, equals, recipe = item.rpartition("=")
            if name == served_name or (not equals and models == 1):
                return recipe
        return None
