"""Image bytes -> pixel values without torch (inference/runtime/images.py, bundle/preprocessing.py) against
transformers' Pillow image processors (AutoImageProcessor.from_pretrained(directory, backend="pil")): generated
images of several sizes, aspect ratios and modes (RGB, RGBA, LA, L, P with a transparent index, CMYK JPEG, an
EXIF-rotated JPEG, a multi-picture JPEG, WebP, an animated GIF) through ViT's, BiT's and CLIP's processors (their
saved files, CLIP's older feature-extractor file, a crop larger than the resized image, no rescaling) give the same
pixel values to 1e-6; bytes that are no image, other formats and too many pixels are refused with their codes;
configs the steps do not cover are refused by name.
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import transformers
from PIL import Image, ImageOps
from transformers.image_utils import load_image

from bundle.preprocessing import read_processing
from inference.errors import InvalidImage, StartupError
from inference.runtime.images import decode, load_processing, pixel_values

TOLERANCE = 1e-6
VIT = {"image_processor_type": "ViTImageProcessor", "size": {"height": 40, "width": 56}, "resample": 2}
BIT = {"image_processor_type": "BitImageProcessor", "size": {"shortest_edge": 48}, "crop_size": {"height": 40,
       "width": 44}, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
CLIP_OLD = {"feature_extractor_type": "CLIPFeatureExtractor", "size": 36, "crop_size": 32, "resample": 3,
            "do_center_crop": True, "do_normalize": True, "do_resize": True}
CONFIGS = {
    "vit": VIT, "bit": BIT, "clip": {"image_processor_type": "CLIPImageProcessor"}, "clip-old": CLIP_OLD,
    "vit-int-size-lanczos": {"image_processor_type": "ViTImageProcessorFast", "size": 30, "resample": 1},
    "bit-crop-past-the-image": {**BIT, "size": {"shortest_edge": 24}, "crop_size": {"height": 40, "width": 30}},
    "clip-no-rescale": {"image_processor_type": "CLIPImageProcessor", "do_rescale": False, "resample": 2,
                        "size": {"shortest_edge": 20}, "crop_size": 20},
    "siglip": {"image_processor_type": "SiglipImageProcessor", "size": {"height": 36, "width": 44}},
}
SIZES = [(64, 48), (31, 97), (130, 45), (17, 17)]  # (width, height): landscape, portrait, wide, small


def picture(mode: str, width: int, height: int, seed: int = 0) -> Image.Image:
    """A smooth gradient with noise in `mode` (alpha varying across the image where the mode has one)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    channels = [(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)), (x + y) * 7 % 256,
                (x * 3 + y * 5) % 256]
    values = np.clip(np.stack(channels, -1) + rng.integers(-20, 20, (height, width, 4)), 0, 255).astype(np.uint8)
    rgba = Image.fromarray(values, "RGBA")
    if mode == "P":  # a palette image whose index 0 is transparent
        image = rgba.convert("RGB").quantize(16)
        image.info["transparency"] = 0
        return image
    return rgba.convert(mode) if mode != "RGBA" else rgba


def encoded(image: Image.Image, fmt: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def samples() -> dict[str, bytes]:
    """Image bytes by name: each mode and format at one of SIZES."""
    out = {}
    for index, (width, height) in enumerate(SIZES):
        out[f"rgb-png-{width}x{height}"] = encoded(picture("RGB", width, height, index), "PNG")
        out[f"rgb-jpeg-{width}x{height}"] = encoded(picture("RGB", width, height, index), "JPEG", quality=90)
    out["rgba-png"] = encoded(picture("RGBA", 50, 70), "PNG")
    out["la-png"] = encoded(picture("LA", 70, 50), "PNG")
    out["l-png"] = encoded(picture("L", 45, 61), "PNG")
    out["p-transparent-png"] = encoded(picture("P", 66, 40), "PNG")
    out["cmyk-jpeg"] = encoded(picture("CMYK", 60, 44), "JPEG")
    out["rgba-webp"] = encoded(picture("RGBA", 58, 39), "WEBP", lossless=True)
    out["rgb-webp"] = encoded(picture("RGB", 39, 58), "WEBP", quality=80)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
    out["exif-rotated-jpeg"] = encoded(picture("RGB", 80, 30), "JPEG", exif=exif.tobytes())
    frames = [picture("RGB", 40, 52, seed).convert("P") for seed in (3, 4)]
    out["animated-gif"] = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)
    pictures = [picture("RGB", 48, 36, seed) for seed in (5, 6)]  # a camera's multi-picture JPEG: the first is read
    out["mpo-jpeg"] = encoded(pictures[0], "MPO", save_all=True, append_images=pictures[1:])
    return out


SAMPLES = samples()


def reference(directory: Path, config: dict[str, Any], data: bytes) -> np.ndarray:
    """transformers' pixel values (3, H, W): the Pillow processor saved in `directory`, on the decoded image itself
    where it converts to RGB, on load_image's RGB image where it does not."""
    (directory / "preprocessor_config.json").write_text(json.dumps(config))
    processor = transformers.AutoImageProcessor.from_pretrained(directory, backend="pil")
    opened = Image.open(io.BytesIO(data))
    image = ImageOps.exif_transpose(opened) if processor.do_convert_rgb else load_image(opened)
    return processor(images=image, return_tensors="np")["pixel_values"][0]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_pixel_values_equal_transformers_pillow_processors(tmp_path: Path, name: str) -> None:
    config = CONFIGS[name]
    processing = read_processing(config)
    for sample, data in SAMPLES.items():
        ours, theirs = pixel_values(data, processing), reference(tmp_path, config, data)
        assert ours.dtype == np.float32 and ours.shape == theirs.shape, (sample, ours.shape, theirs.shape)
        assert np.abs(ours - theirs.astype(np.float32)).max() <= TOLERANCE, sample


def test_the_cases_reach_what_they_are_named_for(tmp_path: Path) -> None:
    """The EXIF rotation turns the image, a GIF's first frame is read, transparency is laid on white under
    do_convert_rgb and dropped without it, and the crop past the image pads with black."""
    assert decode(SAMPLES["exif-rotated-jpeg"]).size == (30, 80)
    first = np.array(Image.open(io.BytesIO(SAMPLES["animated-gif"])).convert("RGB"))
    assert Image.open(io.BytesIO(SAMPLES["animated-gif"])).n_frames == 2
    assert np.array_equal(np.array(decode(SAMPLES["animated-gif"]).convert("RGB")), first)
    assert Image.open(io.BytesIO(SAMPLES["mpo-jpeg"])).format == "MPO"
    laid, dropped = (read_processing({**CONFIGS["clip-no-rescale"], "do_convert_rgb": flag}) for flag in (True, False))
    for sample in ("rgba-png", "p-transparent-png", "la-png"):
        assert np.abs(pixel_values(SAMPLES[sample], laid) - pixel_values(SAMPLES[sample], dropped)).max() > 1
    padded = pixel_values(SAMPLES["rgb-png-64x48"], read_processing(CONFIGS["bit-crop-past-the-image"]))
    assert padded.shape == (3, 40, 30)  # resized to 24 x 32, then padded to 40 rows: the first rows are black
    black = (0 - np.array(BIT["image_mean"])) / np.array(BIT["image_std"])
    assert np.abs(padded[:, 0, 0] - black).max() <= TOLERANCE


def test_processing_reads_the_class_defaults_and_shows_its_steps() -> None:
    vit = read_processing({"image_processor_type": "ViTImageProcessor"})
    assert (vit.resize_to, vit.crop, vit.resample, vit.convert_rgb) == ((224, 224), None, 2, False)
    clip = read_processing(CLIP_OLD)
    assert (clip.shortest_edge, clip.crop, clip.processor, clip.convert_rgb) == (36, (32, 32), "CLIPImageProcessor",
                                                                                 True)
    assert clip.to_dict()["resample"] == "bicubic" and clip.to_dict()["crop"] == [32, 32]


def png_header_claiming(width: int, height: int) -> bytes:
    """A valid small PNG whose IHDR says width x height (its CRC rewritten): Pillow reads the size from it."""
    data = bytearray(encoded(Image.new("L", (4, 4)), "PNG"))
    ihdr = data[12:29]  # chunk type and its 13 bytes
    ihdr[4:12] = struct.pack(">II", width, height)
    data[12:29], data[29:33] = ihdr, struct.pack(">I", zlib.crc32(bytes(ihdr)))
    return bytes(data)


@pytest.mark.parametrize("data,max_pixels,code", [
    (b"not an image at all", 10**6, "invalid_image"),
    (SAMPLES["rgb-png-64x48"][:200], 10**6, "invalid_image"),  # truncated
    (encoded(Image.new("RGB", (8, 8)), "BMP"), 10**6, "unsupported_image_format"),
    (encoded(Image.new("RGB", (8, 8)), "TIFF"), 10**6, "unsupported_image_format"),
    (SAMPLES["rgb-png-64x48"], 64 * 48 - 1, "image_too_large"),
    (png_header_claiming(30_000, 30_000), 10**12, "image_too_large"),  # past Pillow's decompression-bomb limit
    (png_header_claiming(8_000, 6_000), 40_000_000, "image_too_large"),  # past our cap, under Pillow's
])
def test_images_the_core_does_not_read_are_refused_with_their_code(data: bytes, max_pixels: int, code: str) -> None:
    with pytest.raises(InvalidImage) as refused:
        pixel_values(data, read_processing(VIT), max_pixels=max_pixels)
    assert refused.value.code == code


@pytest.mark.parametrize("config,message", [
    ({"image_processor_type": "ConvNextImageProcessor"}, "'ConvNextImageProcessor' is not supported; supported: "
                                                          "ViTImageProcessor, BitImageProcessor, CLIPImageProcessor, "
                                                          "SiglipImageProcessor"),
    ({}, "'none named' is not supported"),
    ({**VIT, "size": {"shortest_edge": 20, "longest_edge": 40}}, "size .* is not supported"),
    ({**VIT, "do_pad": True}, "do_pad is not supported"),
    ({**VIT, "image_mean": [0.5, 0.5, 0.5, 0.5]}, "image_mean .* must have one value or three"),
    ({**VIT, "image_std": [0.5, 0.0, 0.5]}, "image_std must be positive"),
    ({**VIT, "resample": 7}, "resample 7 is not one of Pillow's filters"),
    ({**BIT, "crop_size": {"shortest_edge": 4}}, "crop_size .* is not supported"),
])
def test_configs_the_steps_do_not_cover_are_refused_by_name(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_processing(config)


def test_a_bundles_file_refused_is_a_startup_error(tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({**VIT, "do_pad": True}))
    with pytest.raises(StartupError, match="preprocessor_config.json: do_pad is not supported"):
        load_processing(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(BIT))
    assert load_processing(tmp_path).crop == (40, 44)
