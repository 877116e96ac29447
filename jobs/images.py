"""Images as rows: `--images DIR` (every image file under DIR) or `--image-column` (a column of image bytes, or of
paths), embedded by an image bundle, or by a two-tower bundle's image tower (`LoadedBundle.image_tower`) into the
space its text tower embeds texts in.

A row's value is the image's bytes (a Parquet binary column), an `ImageFile` (a file of --images DIR) or a string (a
path, under --image-root). Each is checked by the server's caps before a pixel is decoded (the bytes against
max_image_bytes, a file's size before it is read; the header's width x height against max_image_pixels), then decoded
and prepared by the core's steps (`inference.runtime.images.pixel_values`, the bundle's own preprocessor file) and
queued as its tokens (`LoadedBundle.image_input`), as the server's `run_images` prepares a request's images. An image
that fails any of it (too large, not an image, truncated, an unsupported format, a file that cannot be read) is a bad
row: set aside with its reason (the core's error code first) in OUT/_rejects, as a bad text is.

Images are read and decoded lazily, as the batch queue has room: every image has the same token count, so the queue
holds one batch (`image_batching`), and memory holds one batch of pixel values besides the part's values as read.

Shape letters: N images, D hidden, C labels.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from inference.errors import InvalidImage
from inference.runtime.graphs import ImageSequence, Outputs
from inference.runtime.images import pixel_values
from inference.runtime.loading import LoadedBundle
from jobs import embedding
from jobs.batched import Batching, run_batched
from jobs.inputs import Bad, Chunk, InputError, Source
from jobs.options import ImageInput, JobError, JobOutput, OnBatch

EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".gif")  # what --images DIR reads: the server's formats
FORMAT = "images"  # a Source of --images DIR: one folder, its image files as rows
IMAGE_OUTPUT = ("normalize", "classify", "token_count")  # what an image job may ask for
TEXT_FLAGS = {"chunking": "--chunking", "sparse": "--sparse", "prompt_name": "--prompt-name",
              "instruction": "--instruction", "task": "--task", "outputs": "--outputs",
              "multi_dtype": "--multi-dtype", "input_type": "--input-type"}


@dataclass(frozen=True)
class ImageFile:
    """A row of --images DIR: its file, read only when its turn to be decoded comes (a part holds paths)."""

    path: Path


def tower(bundle: LoadedBundle) -> LoadedBundle:
    """The bundle that embeds images: a two-tower model's image tower, or an image model itself."""
    image = bundle.image_tower if bundle.image_tower is not None else bundle
    if image.images is None:
        raise JobError(f"{bundle.manifest.name} reads texts, not images: --images and --image-column need an image "
                       "model or a two-tower (CLIP, SigLIP) bundle")
    return image


def check(bundle: LoadedBundle, output: JobOutput) -> None:
    """JobError for a model that reads no images, or an output only texts have (the flags the server refuses in a
    request of images, `not_for_images`); --classify needs the image model's labels."""
    image = tower(bundle)
    plain = JobOutput(**{name: getattr(output, name) for name in IMAGE_OUTPUT})
    given = [TEXT_FLAGS[f.name] for f in fields(JobOutput) if getattr(output, f.name) != getattr(plain, f.name)]
    if given:
        raise JobError(f"{', '.join(given)}: for texts, not images")
    if output.classify and not image.manifest.labels:
        raise JobError("--classify: this image model has no classification head (manifest.json labels is empty)")


def image_batching(batching: Batching) -> Batching:
    """Images all have one length: nothing to sort, so the queue holds one batch of decoded images at most."""
    return replace(batching, window=min(batching.window, batching.max_size))


def listing(folder: Path) -> list[str]:
    """The image files under `folder`, any depth, by extension (EXTENSIONS, any case), as paths relative to it, in
    sorted path order. Names starting with '.' are skipped, folders too (a macOS `._photo.jpg` is no photo)."""
    found = []
    for top, dirs, files in os.walk(folder, onerror=_unreadable):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        base = Path(top).relative_to(folder)
        found += [(base / f).as_posix() for f in files
                  if not f.startswith(".") and os.path.splitext(f)[1].lower() in EXTENSIONS]
    return sorted(found)


def _unreadable(error: OSError) -> None:
    raise InputError(f"{error.filename}: {error.strerror or error}")


def folder_source(folder: Path) -> Source:
    """--images DIR as one source, its rows the image files `listing` finds."""
    if not folder.is_dir():
        raise InputError(f"{folder}: --images takes a directory")
    return Source(folder, FORMAT, len(listing(folder)))


def read_folder(folder: Path, chunk_rows: int, skip: int = 0) -> Iterator[Chunk]:
    """The folder's image files from row `skip` on, in chunks of at most `chunk_rows`: ids their relative paths."""
    names = listing(folder)
    if len(names) < skip:
        raise InputError(f"{folder}: holds {len(names)} images, fewer than the {skip} already written")
    for start in range(skip, len(names), chunk_rows):
        ids = names[start:start + chunk_rows]
        yield Chunk(start, list(ids), [ImageFile(folder / name) for name in ids])


def identity(folder: Path) -> dict[str, Any]:
    """--images DIR as _job.json records it: a re-run resumes only over the same files (names, sizes, times)."""
    digest = hashlib.sha256()
    names = listing(folder)
    for name in names:
        try:
            stat = (folder / name).stat()
        except OSError as error:
            raise InputError(f"{folder / name}: {error.strerror or error}") from None
        digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return {"path": str(folder.resolve()), "images": len(names), "listing_sha256": digest.hexdigest()}


def embed_part(
    bundle: LoadedBundle, part: Chunk, output: JobOutput, batching: Batching, caps: ImageInput,
    on_batch: OnBatch | None = None,
) -> tuple[list[int], list[dict[str, Any]], dict[str, np.ndarray]]:
    """The part's good rows (their offsets), a {row, id, reason} record per bad one, in row order, and the good rows'
    values (`embedding.values`: tokens are each image's). `bundle` is the image model (`tower`)."""
    kept: list[int] = []
    rejects: list[dict[str, Any]] = []
    prepared = _prepared(bundle, part, caps, kept, rejects, on_batch)
    results: dict[int, Outputs] = {}
    for batch in run_batched(bundle, prepared, image_batching(batching), bundle.graphs["fast"]):
        results.update(batch)
        if on_batch is not None:
            on_batch(len(batch))
    assert bundle.manifest.image is not None  # an image model's (`tower`)
    tokens = np.full(len(kept), bundle.manifest.image.tokens, dtype=np.int32)  # (N,)
    return kept, rejects, embedding.values(bundle.manifest, [results[i] for i in range(len(kept))], tokens, output)


def _prepared(bundle: LoadedBundle, part: Chunk, caps: ImageInput, kept: list[int], rejects: list[dict[str, Any]],
              on_batch: OnBatch | None) -> Iterator[ImageSequence]:
    """Each good row's image as the queue takes it, drawn lazily; its offset appended to `kept` (the n-th image
    yielded is row kept[n]), a bad row's record to `rejects` instead."""
    for offset, (row_id, value) in enumerate(zip(part.ids, part.texts, strict=True)):
        pixels = _pixels(bundle, row_id, value, caps)  # (3, H, W), or why the row is bad
        if isinstance(pixels, str):
            rejects.append({"row": part.start + offset, "id": row_id, "reason": pixels})
            if on_batch is not None:
                on_batch(1)
            continue
        kept.append(offset)
        yield bundle.image_input(pixels)


def _pixels(bundle: LoadedBundle, row_id: Any, value: Any, caps: ImageInput) -> np.ndarray | str:
    """The row's (3, H, W) pixel values by the bundle's steps, or why it has none: a value that is no image (the
    text job's reasons), or the core's InvalidImage (its code, then its message)."""
    assert bundle.images is not None  # an image model's (`tower`)
    if isinstance(value, Bad):
        return value.reason
    if value is None:
        return "missing image"
    if row_id is None:
        return "missing id"
    if not isinstance(value, bytes | str | ImageFile):
        return f"image is not bytes or a path ({type(value).__name__})"
    try:
        return pixel_values(_bytes(value, caps), bundle.images, caps.max_pixels)
    except InvalidImage as error:
        return f"{error.code}: {error.message}"


def _bytes(value: bytes | str | ImageFile, caps: ImageInput) -> bytes:
    """The image's bytes, within max_bytes (a file's size checked before it is read); a string is a path, under
    the root."""
    if isinstance(value, str):
        value = ImageFile(caps.root / value if caps.root is not None else Path(value))
    if isinstance(value, ImageFile):
        return _read(value.path, caps.max_bytes)
    _within(len(value), caps.max_bytes)
    return value


def _read(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, its size checked first (and the read bounded: a file may grow after its size is read)."""
    try:
        _within(path.stat().st_size, max_bytes)
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as error:
        raise InvalidImage(f"cannot read {path}: {error.strerror or error}") from None
    _within(len(data), max_bytes)
    return data


def _within(size: int, max_bytes: int) -> None:
    """The server's max_image_bytes rule (`inference.limits.check_images`), named by the job's flag."""
    if size > max_bytes:
        raise InvalidImage(f"the image has {size} bytes, over the limit of {max_bytes} (--max-image-bytes, "
                           "ATTNSERVE_MAX_IMAGE_BYTES)", code="image_too_large")
