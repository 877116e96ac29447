"""An image model's export: its checkpoint's preprocessor_config.json, read (bundle.preprocessing) and copied into the
bundle with the manifest's image section (`image_inputs`), and the images its graphs are gated on (export.parity), as
parity_texts are a text model's: fixed, seeded pictures at the bundle's one image size, prepared as its preprocessor's
last steps prepare a decoded image (rescale, then normalise: bundle.preprocessing), cut into batches of mixed sizes.

Shape letters: C channels, H, W the served image's height and width.

The pictures span what photographs hold: black, white, smooth colour gradients, hard edges (a checkerboard of the
patch size's half, so neighbouring patches differ) and noise; each is uint8 RGB before the steps, so the pixel values
are exactly the ones a decoded image of those bytes gets.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bundle.files import sha256_file
from bundle.inputs import ImageSpec
from bundle.preprocessing import FILE_NAME, ImageProcessing, read_processing
from model.config import EncoderConfig

# Batch sizes the parity images are cut into, in order: a lone image, then mixed batches (images share one size, so
# no padding: only the batch size varies).
IMAGE_BATCHES = (1, 3, 2)


class ImageExportError(ValueError):
    """An image model's preprocessor file is missing, refused, or gives images of no one size."""


@dataclass(frozen=True)
class ImageInputs:
    """What an image model's export reads its inputs by: the steps, the one size they give, the manifest's section."""

    processing: ImageProcessing
    size: tuple[int, int]  # (height, width)
    spec: ImageSpec


def image_inputs(source: Path, config: EncoderConfig, bundle_dir: Path) -> ImageInputs:
    """The checkpoint's preprocessor_config.json at `source`, read, checked to give one image size, and copied into
    `bundle_dir`; ImageExportError naming the file otherwise."""
    path = source / FILE_NAME
    try:
        processing = read_processing(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ImageExportError(f"{source} is an image model without {FILE_NAME}: the bundle carries how images are "
                               "prepared, so the export needs the checkpoint's image processor config") from None
    except ValueError as error:
        raise ImageExportError(f"{path}: {error}") from None
    size = processing.size
    if size is None:
        raise ImageExportError(f"{path}: a shortest-edge resize without a centre crop gives images of many sizes; "
                               "a bundle serves one (do_center_crop with a crop_size, or a {height, width} size)")
    if min(size) < config.patch_size:
        raise ImageExportError(f"{path}: images of {size[0]} x {size[1]} pixels hold no {config.patch_size}-pixel "
                               "patch")
    shutil.copyfile(path, bundle_dir / FILE_NAME)
    spec = ImageSpec(preprocessor=FILE_NAME, preprocessor_sha256=sha256_file(bundle_dir / FILE_NAME),
                     channels=config.num_channels, height=size[0], width=size[1], patch_size=config.patch_size,
                     tokens=config.image_tokens(*size))
    return ImageInputs(processing, size, spec)


def parity_images(processing: ImageProcessing, size: tuple[int, int]) -> list[list[np.ndarray]]:
    """IMAGE_BATCHES batches of (C, H, W) float32 pixel values at `size` (height, width)."""
    pictures = [_prepared(picture, processing) for picture in _pictures(*size)]
    batches, start = [], 0
    for count in IMAGE_BATCHES:
        batches.append(pictures[start:start + count])
        start += count
    return batches


def _pictures(height: int, width: int) -> list[np.ndarray]:
    """(H, W, 3) uint8 pictures: black, white, two gradients, a checkerboard and noise."""
    rows = np.linspace(0, 255, height)[:, None, None]  # (H, 1, 1)
    cols = np.linspace(0, 255, width)[None, :, None]  # (1, W, 1)
    noise = np.random.default_rng(0).integers(0, 256, size=(height, width, 3))
    board = ((np.arange(height)[:, None] // 4 + np.arange(width)[None, :] // 4) % 2)[..., None] * 255  # (H, W, 1)
    shapes = [np.zeros((height, width, 3)), np.full((height, width, 3), 255.0),
              np.concatenate([rows + 0 * cols, cols + 0 * rows, 255 - rows + 0 * cols], axis=-1),
              np.concatenate([cols + 0 * rows, 0.5 * (rows + cols), np.full((height, width, 1), 60.0)], axis=-1),
              np.broadcast_to(board, (height, width, 3)), noise]
    return [np.clip(np.rint(p), 0, 255).astype(np.uint8) for p in shapes]


def _prepared(picture: np.ndarray, processing: ImageProcessing) -> np.ndarray:
    """The rescale and normalise steps (inference/runtime/images.py's), on an image already at its size."""
    x: np.ndarray = picture.astype(np.float32)  # (H, W, C)
    if processing.rescale_factor is not None:
        x = (picture.astype(np.float64) * processing.rescale_factor).astype(np.float32)
    if processing.mean is not None and processing.std is not None:
        x = (x - np.asarray(processing.mean, dtype=np.float32)) / np.asarray(processing.std, dtype=np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))  # (C, H, W)
