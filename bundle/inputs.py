"""The manifest's sections on what a bundle reads besides token ids (bundle.manifest, schema 5 and 6): an image model's
`image` section (the preprocessor file and the one size its graphs read) and a two-tower model's `pair` section (its
image tower's directory and how the pair scores); and what every manifest section shares: strict fields, plain names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())


class ImageSpec(Strict):
    """What an image model's graphs read (schema 5): images prepared by the bundle's preprocessor file
    (bundle.preprocessing) into pixel values of one size, and the tokens each becomes."""

    preprocessor: str = "preprocessor_config.json"
    preprocessor_sha256: str
    channels: int = Field(gt=0)
    height: int = Field(gt=0)
    width: int = Field(gt=0)
    patch_size: int = Field(gt=0)
    tokens: int = Field(gt=0)  # per image: the class token, registers and one per patch

    @field_validator("preprocessor")
    @classmethod
    def _plain_preprocessor(cls, value: str) -> str:
        return check_plain_name(value)


class PairSpec(Strict):
    """A two-tower model's image tower and the pair's scoring (schema 6): logits = exp(logit_scale) * the cosine of an
    image's and a text's embeddings + logit_bias, read per image as a softmax over the texts (CLIP) or each through a
    sigmoid (SigLIP), as transformers' CLIPModel and SiglipModel score."""

    image_tower: str = "image"  # a directory inside this bundle, itself a bundle (modality image)
    logit_scale: float
    logit_bias: float | None = None
    scoring: Literal["softmax", "sigmoid"]

    @field_validator("image_tower")
    @classmethod
    def _plain_directory(cls, value: str) -> str:
        return check_plain_name(value)


def check_plain_name(value: str) -> str:
    """Bundle files are plain names: no directories, no way out of the bundle."""
    if not value or value in (".", "..") or "/" in value or "\\" in value or "\x00" in value:
        raise ValueError(f"{value!r} is not a plain file name inside the bundle")
    return value
