"""Image bytes -> pixel values (3, H, W) float32, with Pillow and numpy only, equal to transformers' Pillow-based image
processors (the steps of a preprocessor_config.json: bundle/preprocessing.py).

    decode        PNG, JPEG (MPO too: a camera's multi-picture JPEG), WebP or GIF bytes (Pillow reads the header
                  first: any other format, or more pixels than the cap, is refused before a pixel is decoded); the
                  first frame of an animation; the EXIF orientation applied (Pillow's exif_transpose), as
                  transformers.image_utils.load_image does
    RGB           convert_rgb (the config's do_convert_rgb): transformers' convert_to_rgb, which lays an image with
                  transparency (an alpha band, or a palette's transparent index) onto white; otherwise Pillow's
                  convert("RGB"), load_image's, which drops the alpha band and keeps the colour under it
    resize        Pillow's resize with the config's filter, to (height, width) or by the shortest edge
    centre crop   numpy; a side shorter than the crop is padded with zeros (black) first, as transformers' center_crop
    rescale       x · rescale_factor in float64, then float32
    normalise     (x - mean) / std in float32

The reference each step is compared with (tests/inference/test_images.py) is the processor on what transformers
would hand it: with do_convert_rgb the decoded image itself, without it load_image's RGB image, so for an image
without transparency the two paths agree, and a transparent one is laid on white only where the config asks for
the conversion (a pipeline, which always calls load_image first, drops the alpha band either way). The
torchvision-based fast processors resize with torch's antialiased kernels instead of Pillow's and differ from these
(docs/vision.md says by how much).

Errors are InvalidImage, each with its code: invalid_image (bytes Pillow cannot decode, a truncated file),
unsupported_image_format, image_too_large (width x height over max_pixels, or over Pillow's own decompression-bomb
limit).
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from bundle.preprocessing import FILE_NAME, ImageProcessing, read_processing
from inference.errors import InvalidImage, StartupError

FORMATS = ("PNG", "JPEG", "MPO", "WEBP", "GIF")  # MPO: the multi-picture JPEG cameras write (its first picture)
MAX_PIXELS = 40_000_000  # 40 megapixels: 120 MB as RGB bytes, a 7,300 x 5,500 photograph
_UNREADABLE = (OSError, ValueError, SyntaxError, EOFError, struct.error, Image.DecompressionBombError)


def load_processing(directory: Path) -> ImageProcessing:
    """The preprocessor_config.json in `directory` read (bundle.preprocessing.read_processing); a StartupError naming
    the file otherwise."""
    path = Path(directory) / FILE_NAME
    try:
        return read_processing(json.loads(path.read_text()))
    except (OSError, ValueError) as error:  # json.JSONDecodeError is a ValueError
        raise StartupError(f"{path}: {error}") from error


def pixel_values(data: bytes, processing: ImageProcessing, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """Image bytes -> (3, H, W) float32 pixel values, as `processing` says (module docstring)."""
    image = decode(data, max_pixels)
    return process(image, processing)


def decode(data: bytes, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """The first frame of the image in `data`, upright; InvalidImage for bytes it will not decode."""
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as error:
        raise InvalidImage(f"the image is too large to decode: {error}", code="image_too_large") from error
    except Image.UnidentifiedImageError:  # its message names the buffer's address: nothing for the caller
        raise InvalidImage("the bytes are not an image Pillow can read (no known format's header)") from None
    except _UNREADABLE as error:
        raise InvalidImage(f"the bytes are not an image Pillow can read: {error}") from error
    if image.format not in FORMATS:
        raise InvalidImage(f"image format {image.format} is not supported; supported: {', '.join(FORMATS)}",
                           code="unsupported_image_format")
    width, height = image.size
    if width * height > max_pixels:
        raise InvalidImage(f"the image has {width} x {height} = {width * height} pixels; at most {max_pixels} are "
                           "read", code="image_too_large")
    try:
        image.load()  # the first frame (an animation's others are never decoded)
        return ImageOps.exif_transpose(image)
    except _UNREADABLE as error:
        raise InvalidImage(f"the {image.format} image could not be decoded: {error}") from error


def process(image: Image.Image, processing: ImageProcessing) -> np.ndarray:
    """A decoded image -> (3, H, W) float32: RGB, resize, centre crop, rescale, normalise."""
    x = to_rgb(image, processing.convert_rgb)  # (H, W, 3) uint8
    if processing.resize_to or processing.shortest_edge:
        x = resize(x, processing)  # (H', W', 3) uint8
    if processing.crop:
        x = center_crop(x, *processing.crop)  # (h, w, 3) uint8
    if processing.rescale_factor is not None:
        values = (x.astype(np.float64) * processing.rescale_factor).astype(np.float32)  # as transformers rescales
    else:
        values = x.astype(np.float32)
    if processing.mean is not None and processing.std is not None:
        mean = np.array(processing.mean, dtype=np.float32)
        std = np.array(processing.std, dtype=np.float32)
        values = (values - mean) / std  # (h, w, 3) float32, per channel
    return np.ascontiguousarray(values.transpose(2, 0, 1))  # (3, h, w)


def to_rgb(image: Image.Image, composite: bool) -> np.ndarray:
    """(H, W, 3) uint8: transformers' convert_to_rgb (transparency onto white) when `composite`, else Pillow's
    convert("RGB")."""
    has_alpha = "A" in image.getbands() or image.info.get("transparency") is not None
    if composite and has_alpha:
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return np.array(Image.alpha_composite(white, image.convert("RGBA")).convert("RGB"))
    return np.array(image.convert("RGB"))


def resize(x: np.ndarray, processing: ImageProcessing) -> np.ndarray:
    """(H, W, 3) uint8 -> (H', W', 3) uint8 by Pillow, to resize_to or by the shortest edge."""
    height, width = processing.resize_to or shortest_edge_size(x.shape[0], x.shape[1], processing.shortest_edge or 0)
    return np.array(Image.fromarray(x).resize((width, height), resample=processing.resample))


def shortest_edge_size(height: int, width: int, edge: int) -> tuple[int, int]:
    """(height, width) with the shorter side `edge` and the longer one in proportion, rounded down (torchvision's
    Resize rule, as transformers' get_resize_output_image_size writes it)."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(edge * long / short)
    return (new_long, edge) if width <= height else (edge, new_long)


def center_crop(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """(H, W, C) -> (height, width, C) around the centre (the top-left offset rounded down); zero-padded first, by
    half rounded up before, where the image is smaller, as transformers' center_crop pads."""
    H, W = x.shape[:2]
    top, left = (H - height) // 2, (W - width) // 2
    if top >= 0 and left >= 0:
        return x[top:top + height, left:left + width]
    padded_height, padded_width = max(height, H), max(width, W)
    pad_top, pad_left = -(-(padded_height - H) // 2), -(-(padded_width - W) // 2)  # ceil
    padded = np.zeros((padded_height, padded_width, x.shape[2]), dtype=x.dtype)
    padded[pad_top:pad_top + H, pad_left:pad_left + W] = x
    top, left = top + pad_top, left + pad_left
    return padded[max(0, top):min(padded_height, top + height), max(0, left):min(padded_width, left + width)]
