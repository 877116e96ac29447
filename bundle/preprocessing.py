"""A checkpoint's preprocessor_config.json, read into the steps inference/runtime/images.py takes (Pillow and numpy,
no torch), as transformers' Pillow-based image processors read it (`AutoImageProcessor.from_pretrained(directory,
backend="pil")`, formerly `use_fast=False`).

Four processors, named by image_processor_type (or, in older files, feature_extractor_type with FeatureExtractor in
place of ImageProcessor; a Fast or Pil suffix names the same steps):

    processor            defaults for the keys a file leaves out
    ViTImageProcessor    resize to {height, width} 224 x 224 bilinear; no crop; mean = std = 0.5; no RGB conversion;
                         an int `size` is a square
    BitImageProcessor    (DINOv2's) resize the shortest edge to 224 bicubic, centre crop 224 x 224; CLIP's mean and
    CLIPImageProcessor   std; RGB conversion; an int `size` is the shortest edge (default_to_square false)
    SiglipImageProcessor resize to {height, width} 224 x 224 bicubic; no crop; mean = std = 0.5; RGB conversion

Every processor rescales by rescale_factor (1/255) and normalises by default. `size` is {height, width} (the image
resized to exactly that) or {shortest_edge} (the shorter side to that, the longer one in proportion, rounded down);
crop_size is {height, width} (an int: a square). resample is Pillow's filter number (0 nearest, 1 Lanczos, 2
bilinear, 3 bicubic, 4 box, 5 Hamming). What the four processors would do and these steps do not is refused, naming
the field: another processor type, a size with longest_edge or max_height / max_width, do_pad, a mean or std of
other than three channels. Keys those processors do not read are ignored, as they ignore them.

Torch-free and in bundle/, as the contract it is: the export reads a checkpoint's file with `read_processing` (a
ValueError when refused) before writing a bundle, which carries the file; the core reads the bundle's copy
(inference.runtime.images.load_processing) and prepares every image by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FILE_NAME = "preprocessor_config.json"
IMAGENET_STANDARD = (0.5, 0.5, 0.5)
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
RESAMPLE_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
_CLIP_DEFAULTS: dict[str, Any] = {
    "do_resize": True, "size": {"shortest_edge": 224}, "resample": 3, "do_center_crop": True,
    "crop_size": {"height": 224, "width": 224}, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": OPENAI_CLIP_MEAN, "image_std": OPENAI_CLIP_STD, "do_convert_rgb": True, "default_to_square": False,
}
DEFAULTS: dict[str, dict[str, Any]] = {  # each processor's class attributes: what a file that leaves a key out gets
    "ViTImageProcessor": {
        "do_resize": True, "size": {"height": 224, "width": 224}, "resample": 2, "do_center_crop": False,
        "crop_size": None, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD, "do_convert_rgb": False,
        "default_to_square": True,
    },
    "BitImageProcessor": _CLIP_DEFAULTS,
    "CLIPImageProcessor": _CLIP_DEFAULTS,
    "SiglipImageProcessor": {
        "do_resize": True, "size": {"height": 224, "width": 224}, "resample": 3, "do_center_crop": False,
        "crop_size": None, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD, "do_convert_rgb": True,
        "default_to_square": False,
    },
}


@dataclass(frozen=True)
class ImageProcessing:
    """The steps from a decoded image to pixel values (inference/runtime/images.py takes them in this order)."""

    processor: str  # the processor type whose defaults filled the keys the file left out
    convert_rgb: bool  # transformers' convert_to_rgb (transparency onto white) rather than Pillow's convert("RGB")
    resize_to: tuple[int, int] | None  # (height, width), exactly
    shortest_edge: int | None  # or the shorter side to this, the longer in proportion
    resample: int  # Pillow's filter number
    crop: tuple[int, int] | None  # (height, width) of the centre crop
    rescale_factor: float | None  # None: no rescaling
    mean: tuple[float, float, float] | None  # None: no normalisation
    std: tuple[float, float, float] | None

    @property
    def size(self) -> tuple[int, int] | None:
        """(height, width) of every image these steps give: the crop's, else the exact resize's; None where it
        depends on the image (a shortest-edge resize and no crop), which a graph of one image size cannot serve."""
        return self.crop or self.resize_to

    def to_dict(self) -> dict[str, Any]:
        """The steps as a bundle's manifest or a status page can show them."""
        return {"processor": self.processor, "convert_rgb": self.convert_rgb,
                "resize_to": list(self.resize_to) if self.resize_to else None, "shortest_edge": self.shortest_edge,
                "resample": RESAMPLE_FILTERS[self.resample], "crop": list(self.crop) if self.crop else None,
                "rescale_factor": self.rescale_factor, "mean": self.mean and list(self.mean),
                "std": self.std and list(self.std)}


def read_processing(config: dict[str, Any]) -> ImageProcessing:
    """A preprocessor_config.json's dict -> the steps; ValueError naming the field refused (module docstring)."""
    processor = processor_type(config)
    fields = {**DEFAULTS[processor], **{k: v for k, v in config.items() if v is not None}}
    if fields.get("do_pad"):
        raise ValueError("do_pad is not supported: ViT, BiT, CLIP and SigLIP processors are read without padding")
    resize_to, shortest_edge = _size(fields) if fields["do_resize"] else (None, None)
    resample = int(fields["resample"])
    if resample not in RESAMPLE_FILTERS:
        raise ValueError(f"resample {fields['resample']!r} is not one of Pillow's filters 0-5")
    crop = _crop(fields["crop_size"]) if fields["do_center_crop"] else None
    mean = _channels(fields, "image_mean") if fields["do_normalize"] else None
    std = _channels(fields, "image_std") if fields["do_normalize"] else None
    if std is not None and min(std) <= 0:
        raise ValueError(f"image_std must be positive in every channel, got {list(std)}")
    return ImageProcessing(processor, bool(fields["do_convert_rgb"]), resize_to, shortest_edge, resample, crop,
                           float(fields["rescale_factor"]) if fields["do_rescale"] else None, mean, std)


def processor_type(config: dict[str, Any]) -> str:
    """The processor a file names, its Fast or Pil suffix dropped; ValueError for one this module does not read."""
    named = config.get("image_processor_type") or str(config.get("feature_extractor_type") or "").replace(
        "FeatureExtractor", "ImageProcessor")
    base = named.removesuffix("Fast").removesuffix("Pil")
    if base not in DEFAULTS:
        raise ValueError(f"image processor {named or 'none named'!r} is not supported; supported: "
                         f"{', '.join(DEFAULTS)} (image_processor_type or feature_extractor_type)")
    return base


def _size(fields: dict[str, Any]) -> tuple[tuple[int, int] | None, int | None]:
    """(resize_to, shortest_edge) from `size`: an int (a square or the shortest edge, as default_to_square says),
    [height, width] or a dict."""
    size = fields["size"]
    if isinstance(size, int):
        size = {"height": size, "width": size} if fields["default_to_square"] else {"shortest_edge": size}
    elif isinstance(size, (list, tuple)) and len(size) == 2:
        size = {"height": size[0], "width": size[1]}
    if not isinstance(size, dict):
        raise ValueError(f"size {size!r} is not an int, [height, width] or a dict")
    if set(size) == {"height", "width"}:
        return (_positive(size["height"], "size"), _positive(size["width"], "size")), None
    if set(size) == {"shortest_edge"}:
        return None, _positive(size["shortest_edge"], "size")
    raise ValueError(f"size {size} is not supported: {{height, width}} or {{shortest_edge}} only")


def _crop(crop_size: Any) -> tuple[int, int]:
    if isinstance(crop_size, int):
        crop_size = {"height": crop_size, "width": crop_size}
    elif isinstance(crop_size, (list, tuple)) and len(crop_size) == 2:
        crop_size = {"height": crop_size[0], "width": crop_size[1]}
    if not isinstance(crop_size, dict) or set(crop_size) != {"height", "width"}:
        raise ValueError(f"crop_size {crop_size!r} is not supported: {{height, width}} or an int")
    return _positive(crop_size["height"], "crop_size"), _positive(crop_size["width"], "crop_size")


def _channels(fields: dict[str, Any], key: str) -> tuple[float, float, float]:
    """image_mean or image_std: one value for every channel, or one per RGB channel."""
    value = fields[key]
    values = [value] * 3 if isinstance(value, (int, float)) else list(value)
    if len(values) != 3:
        raise ValueError(f"{key} {value!r} must have one value or three (R, G, B)")
    return float(values[0]), float(values[1]), float(values[2])


def _positive(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{key} sides must be positive integers, got {value!r}")
    return value
