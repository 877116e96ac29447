"""A two-tower model's (CLIP, SigLIP) own scoring of an image against label texts, as transformers'
zero-shot-image-classification pipeline scores it: each label written into the hypothesis template, the image and
the texts embedded by their towers (`inference.tasks.embed.embed_images`), logits = exp(logit_scale) * cosine +
logit_bias, read as a softmax over the labels (CLIP) or each through a sigmoid (SigLIP), the manifest's `pair`
section saying which. Answered as the pipeline answers: the labels by score, highest first.

Shape letters: C labels, E the shared space's width.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inference.errors import InvalidRequest, Unsupported
from inference.served import ServedModel
from inference.tasks.embed import embed_images

DEFAULT_TEMPLATE = "This is a photo of {}."  # the pipeline's default hypothesis_template


async def zero_shot(
    model: ServedModel, image: bytes, labels: Sequence[str], template: str = DEFAULT_TEMPLATE,
) -> list[tuple[str, float]]:
    """(label, score) per label, highest score first (a stable sort: ties keep the labels' order)."""
    pair = model.bundle.manifest.pair
    if pair is None:
        raise Unsupported(f"model {model.name} is not a two-tower model (CLIP, SigLIP): it has no texts and images "
                          "in one space to score against each other (GET /info: `pair`)")
    vectors = (await embed_images(model, [image, *hypotheses(template, labels)], normalize=True)).vectors  # (1+C, E)
    logits = vectors[1:] @ vectors[0] * np.exp(pair.logit_scale) + (pair.logit_bias or 0.0)  # (C,)
    scores = _sigmoid(logits) if pair.scoring == "sigmoid" else _softmax(logits)
    order = np.argsort(-scores, kind="stable")
    return [(labels[i], float(scores[i])) for i in order]


def hypotheses(template: str, labels: Sequence[str]) -> list[str]:
    """Each label in the template, as the pipeline writes them (str.format); InvalidRequest for a template that does
    not hold exactly one `{}` to fill."""
    if template.count("{}") != 1:
        raise InvalidRequest("hypothesis_template must hold exactly one {} (where each label goes), e.g. "
                             f"{DEFAULT_TEMPLATE!r}")
    try:
        return [template.format(label) for label in labels]
    except (IndexError, KeyError, ValueError):
        raise InvalidRequest("hypothesis_template must hold no braces but its one {} (double them: {{ }})") from None


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))
