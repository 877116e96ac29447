"""Random-weight transformers vision models (ViT, DINOv2, DINOv2 with registers) saved as Hugging Face directories
(config.json, model.safetensors; no tokenizer), and the images they are compared on.

    save_vision(directory, "dinov2-registers", "Model", "realistic") -> the reference model (eval, eager attention)

Weights: transformers' seeded initialisation, then every 1-D parameter (biases, norm weights, DINOv2's layer scales)
moved off its start, and the class token, registers, positions (which transformers starts at zero or small) and
patch tokens drawn at unit scale, so that a swapped or missing one, or patches out of order, show. Shapes: "small"
(hidden 32, 2 heads, 2 layers, 32-pixel images of 8-pixel patches) and "realistic" (hidden 768, 12 heads, 3 layers:
ViT-B and DINOv2-B widths, 224-pixel images of 16- or 14-pixel patches). Each shape is compared at the config's
image size and at a non-square size whose grid is wider and shorter than the table's, so the positions are resampled
up along one axis and down along the other (DINOv2 with registers' antialiasing shows when shrinking).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

from tests.helpers.families import randomise_vectors

ARCHITECTURES = ("vit", "dinov2", "dinov2-swiglu", "dinov2-registers")
CLASSES = {"vit": "ViT", "dinov2": "Dinov2", "dinov2-swiglu": "Dinov2", "dinov2-registers": "Dinov2WithRegisters"}
SHAPES = {"small": dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, image_size=32),
          "realistic": dict(hidden_size=768, num_attention_heads=12, num_hidden_layers=3, image_size=224)}
PATCH = {"small": {"vit": 8, "dinov2": 8}, "realistic": {"vit": 16, "dinov2": 14}}
LABELS = {0: "cat", 1: "dog", 2: "bird"}


def vision_config(arch: str, shape: str, **extra: Any) -> transformers.PretrainedConfig:
    family = "vit" if arch == "vit" else "dinov2"
    common: dict[str, Any] = {**SHAPES[shape], "patch_size": PATCH[shape][family], "id2label": LABELS,
                              "label2id": {v: k for k, v in LABELS.items()}, **extra}
    if arch == "vit":
        config = transformers.ViTConfig(**{"intermediate_size": 4 * common["hidden_size"] - 32, **common})
    elif arch == "dinov2-registers":
        config = transformers.Dinov2WithRegistersConfig(**{"num_register_tokens": 4, **common})
    else:
        config = transformers.Dinov2Config(**{"use_swiglu_ffn": arch == "dinov2-swiglu", **common})
    config._attn_implementation = "eager"  # the maps: sdpa returns none
    return config


def model_class(arch: str, head: str) -> type:
    return getattr(transformers, f"{CLASSES[arch]}{head}")


def save_vision(directory: Path, arch: str, head: str = "Model", shape: str = "small", seed: int = 0,
                **extra: Any) -> torch.nn.Module:
    """A seeded random `arch` model with `head` saved at `directory`; returns it (eval, eager attention)."""
    config = vision_config(arch, shape, **extra)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = model_class(arch, head)(config)
        randomise_vectors(model)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(("cls_token", "register_tokens", "position_embeddings")):
                    param.copy_(torch.randn_like(param))
                if name.endswith("patch_embeddings.projection.weight"):  # each patch's token at unit scale too
                    param.copy_(torch.randn_like(param) / param[0].numel() ** 0.5)
    model.save_pretrained(directory)
    return model.eval()


def image_sizes(shape: str) -> list[tuple[int, int]]:
    """(H, W): the config's square size, then a wider, shorter one (its grid grows along W, shrinks along H)."""
    side = SHAPES[shape]["image_size"]
    return [(side, side), (side * 3 // 4, side * 3 // 2)]


def pixels(height: int, width: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    """(B, 3, H, W) normalised-looking pixel values."""
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


def reference_outputs(model: torch.nn.Module, pixel_values: torch.Tensor) -> Any:
    """transformers' outputs with the maps; ViT resamples its positions only when told (interpolate_pos_encoding)."""
    extra = {"interpolate_pos_encoding": True} if type(model).__name__.startswith("ViT") else {}
    return model(pixel_values=pixel_values, output_attentions=True, **extra)


# The two-tower models (CLIP, SigLIP): a pair or one tower, random weights as above, the pair's logit scale and bias
# moved off their start. Shapes: "small" (hidden 32, 2 heads, 2 layers, 32-pixel images of 8-pixel patches, 16
# positions) and "realistic" (hidden 768, 12 heads, 3 layers, MLP 3072: ViT-B/16's tower width, 224-pixel images,
# CLIP's 77 and SigLIP's 64 positions; a vocabulary of 1,000).
TOWER_SHAPES = {"small": dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64),
                "realistic": dict(hidden_size=768, num_attention_heads=12, num_hidden_layers=3,
                                  intermediate_size=3072)}
TOWER_IMAGES = {"small": dict(image_size=32, patch_size=8), "realistic": dict(image_size=224, patch_size=16)}
VOCAB = 1000
POSITIONS = {"clip": {"small": 16, "realistic": 77}, "siglip": {"small": 16, "realistic": 64}}
PAIR_CLASSES = {"clip": ("CLIPModel", "CLIPVisionModelWithProjection", "CLIPTextModelWithProjection"),
                "siglip": ("SiglipModel", "SiglipVisionModel", "SiglipTextModel")}


def pair_config(pair: str, shape: str, projection: int = 24, vision: dict[str, Any] | None = None,
                **text: Any) -> Any:
    """The pair's config (CLIPConfig, SiglipConfig); `text`: text_config fields (eos_token_id, ...). The end of text
    is the vocabulary's last id, as CLIP's <|endoftext|> is."""
    body = TOWER_SHAPES[shape]
    text_config = {**body, "vocab_size": VOCAB, "max_position_embeddings": POSITIONS[pair][shape], "bos_token_id": 0,
                   "pad_token_id": 1, "eos_token_id": VOCAB - 1, **text}
    vision_config = {**body, **TOWER_IMAGES[shape], **(vision or {})}
    if pair == "clip":
        config = transformers.CLIPConfig(text_config=text_config, vision_config=vision_config,
                                         projection_dim=projection)
    else:
        config = transformers.SiglipConfig(text_config=text_config, vision_config=vision_config)  # head: D -> D
    for each in (config, config.text_config, config.vision_config):
        each._attn_implementation = "eager"  # the maps: sdpa returns none
    return config


def save_pair(directory: Path, pair: str, tower: str = "", shape: str = "small", seed: int = 0,
              vision: dict[str, Any] | None = None, **text: Any) -> torch.nn.Module:
    """A seeded random pair (tower ""), or its "vision" or "text" tower alone, saved at `directory`; returns it.
    `vision`, `text`: the towers' config fields over the shape's."""
    config = pair_config(pair, shape, vision=vision, **text)
    classes = dict(zip(("", "vision", "text"), PAIR_CLASSES[pair], strict=True))
    if tower:
        config = config.vision_config if tower == "vision" else config.text_config
        if pair == "clip":
            config.projection_dim = 24
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = getattr(transformers, classes[tower])(config)
        randomise_vectors(model)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(("class_embedding", "position_embedding.weight", "probe")):
                    param.copy_(torch.randn_like(param))
                if name.endswith("logit_scale"):
                    param.fill_(2.3)  # exp: about 10
                if name.endswith("logit_bias"):
                    param.fill_(-3.0)
    model.save_pretrained(directory)
    return model.eval()


def token_ids(length: int, lengths: tuple[int, ...], end: int, pad: int,
              seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), (B, length) each: rows of `lengths` random ids below `end`, each closed by `end`
    (CLIP's end-of-text: also the vocabulary's largest id), then `pad` to `length`."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), length), pad)
    for row, n in enumerate(lengths):
        ids[row, :n - 1] = torch.randint(3, end, (n - 1,), generator=generator)
        ids[row, n - 1] = end
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()  # (B, length)
    return ids, mask


# The image models tests/export/test_image_bundles.py exports (and the serving tests serve): (model, processor class,
# processor fields). The served size differs from the config's image_size in two of them, so the graph resamples its
# positions (DINOv2's own processor crops 224 from a model trained at 518).
IMAGE_CASES = {
    "vit-small": ("vit", "small", "ViTImageProcessor", {"size": {"height": 32, "width": 32}}),
    "dinov2-registers-small": ("dinov2-registers", "small", "BitImageProcessor",
                               {"size": {"shortest_edge": 40}, "crop_size": {"height": 24, "width": 40}}),
    "dinov2-realistic": ("dinov2", "realistic", "BitImageProcessor",
                         {"size": {"shortest_edge": 168}, "crop_size": {"height": 168, "width": 168}}),
    "clip-vision-small": ("clip", "small", "CLIPImageProcessor",
                          {"size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32}}),
    "vit-classifier-small": ("vit", "small", "ViTImageProcessor", {"size": {"height": 32, "width": 32}}),
    "vit-classifier-realistic": ("vit", "realistic", "ViTImageProcessor", {}),
}
# The cases at a real tower's width: a slow export each (about 20 s), so the heavy tier's (make reliability); the
# small cases keep every family and head in make test.
HEAVY_IMAGE_CASES = ("dinov2-realistic", "vit-classifier-realistic")


def image_head(case: str) -> str:
    """The transformers head class suffix of a ViT or DINOv2 case of IMAGE_CASES."""
    return "ForImageClassification" if "classifier" in case else "Model"


def save_image_model(directory: Path, case: str) -> torch.nn.Module:
    """The case's random-weight model and its preprocessor_config.json at `directory`; returns the model."""
    arch, shape, processor, fields = IMAGE_CASES[case]
    if arch == "clip":
        model = save_pair(directory, "clip", tower="vision", shape=shape)
    else:
        model = save_vision(directory, arch, image_head(case), shape)
    getattr(transformers, processor)(**fields).save_pretrained(directory)
    return model


def save_clip_tokenizer(directory: Path) -> None:
    """A tokenizer.json over the pairs' VOCAB ids, laid out as CLIP's is at its ends: <|startoftext|> 0 (bos), the pad
    id 1, <|endoftext|> the last id (eos, the largest, as CLIP's 49407 is); lower-cased words, each text wrapped in
    bos ... eos by the post-processor."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = [f"w{i}" for i in range(VOCAB - 4)]
    words[:len(WORDS)] = WORDS
    vocab = {"<|startoftext|>": 0, "<pad>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)},
             "<|endoftext|>": VOCAB - 1}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>",
        special_tokens=[("<|startoftext|>", 0), ("<|endoftext|>", VOCAB - 1)])
    tokenizer.save(str(directory / "tokenizer.json"))


def save_clip(directory: Path, shape: str = "small") -> torch.nn.Module:
    """A random CLIPModel (save_pair) with its tokenizer.json and a CLIPImageProcessor at the vision tower's size: a
    checkpoint directory as the hub has it; returns the model."""
    model = save_pair(directory, "clip", shape=shape)
    save_clip_tokenizer(directory)
    side = model.config.vision_config.image_size
    transformers.CLIPImageProcessor(size={"shortest_edge": side},
                                    crop_size={"height": side, "width": side}).save_pretrained(directory)
    return model


def save_siglip(directory: Path, shape: str = "small", **text: Any) -> torch.nn.Module:
    """A random SiglipModel (save_pair; `text`: its text_config fields) with SigLIP's tokenizer files, spiece.model and
    tokenizer_config.json (tests/helpers/siglip.py; no tokenizer.json, as SigLIP checkpoints ship), and a
    SiglipImageProcessor at the vision tower's size; returns the model."""
    from tests.helpers.siglip import train_spiece, write_siglip_config

    model = save_pair(directory, "siglip", shape=shape, **text)
    write_siglip_config(train_spiece(directory, VOCAB),
                        model_max_length=model.config.text_config.max_position_embeddings)
    side = model.config.vision_config.image_size
    transformers.SiglipImageProcessor(size={"height": side, "width": side}).save_pretrained(directory)
    return model


def shared_bundle(factory: Any, case: str) -> tuple[Path, Path]:
    """(checkpoint, fp32 bundle) of an IMAGE_CASES case or of the small CLIP pair ("clip", save_clip), exported once
    for the run (tests.helpers.shared.once) by whichever test asks first: the image tests serve, read and gate the
    same bundles. A test that changes either works on a copy; reference_model loads the checkpoint again."""
    from export.bundle import export_bundle
    from tests.helpers.shared import once

    def build(root: Path) -> tuple[Path, Path]:
        if case == "clip":
            save_clip(root / "source")
        else:
            save_image_model(root / "source", case)
        export_bundle(root / "source", root / "bundle", variants=["fp32"])
        return root / "source", root / "bundle"

    return once(factory, f"image-{case}", build)


def reference_model(case: str, source: Path) -> torch.nn.Module:
    """The model of shared_bundle's `case` as its checkpoint at `source` holds it (eval, eager attention)."""
    from tests.helpers.shared import reloaded

    if case == "clip":
        return reloaded(getattr(transformers, PAIR_CLASSES["clip"][0]), source)
    arch = IMAGE_CASES[case][0]
    cls = getattr(transformers, PAIR_CLASSES["clip"][1]) if arch == "clip" else model_class(arch, image_head(case))
    return reloaded(cls, source)


def vit_and_clip(factory: Any) -> tuple[Path, Path]:
    """The small ViT's bundle and the CLIP pair's (shared_bundle), served or read by the image tests."""
    return shared_bundle(factory, "vit-small")[1], shared_bundle(factory, "clip")[1]


WORDS = ["a", "photo", "of", "the", "cat", "dog", "bird", "red", "green", "blue", "grey", "square", "stripes", "on",
         "sky", "sea", "and", "with", "picture", "drawing", ".", ",", "!"]
