"""The vision axes: pixels -> the sequence the encoder's blocks read (ViT, DINOv2, CLIP, SigLIP; model/config.py's
modality "vision").

Shape letters: B batch, C channels, H, W image height and width, P patch size, G the grid side the position table
was trained on (image_size // P), h, w the input's grid (H // P, W // P), R register tokens, T = 1 + R + h·w tokens,
D d_model.

A vision transformer is the text encoder over a sequence of patches:

    patches     a Conv2d with kernel and stride P: each P x P patch of the image becomes one D-wide token, read row by
                row (pixels past the last whole patch are dropped, as the convolution drops them)
    class token one learned token in front of the patches, whose final state is the image's pooled vector (SigLIP
                has none: its grid alone, pooled by an attention probe, model/probe.py)
    positions   a learned (1 + G², D) table: the class token's row, then one row per patch of the G x G grid. An input
                of another size resamples the grid rows to h x w by bicubic interpolation (half-pixel centres, the
                Keys kernel a = -0.75), as transformers' interpolate_pos_encoding does for ViT and DINOv2; at h = w
                = G that resampling is the identity, so every input takes the one path an exported graph takes.
                position_antialias widens the kernel when the grid shrinks (DINOv2 with registers' antialias=True)
    registers   R learned tokens placed after the class token and before the patches, with no position (DINOv2
                with registers)
    norm        embedding_norm: a norm over the tokens before the first block (CLIP's pre_layrnorm)

The blocks, final norm, pooling and heads are the encoder's own; every token is real (the attention mask is all
ones: images in a batch share one size).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import EncoderConfig
from model.layers import norm


class PatchEmbeddings(nn.Module):
    """Pixel values (B, C, H, W) -> tokens (B, T, D): patches, the class token, positions, registers."""

    def __init__(self, c: EncoderConfig) -> None:
        super().__init__()
        self.grid, self.first = c.grid_size, int(c.class_token)
        self.patches = nn.Conv2d(c.num_channels, c.d_model, kernel_size=c.patch_size, stride=c.patch_size,
                                 bias=c.patch_bias)
        self.class_token = nn.Parameter(torch.zeros(1, 1, c.d_model)) if c.class_token else None
        self.registers = nn.Parameter(torch.zeros(1, c.register_tokens, c.d_model)) if c.register_tokens else None
        self.positions = nn.Parameter(torch.zeros(1, c.max_length, c.d_model))  # (1, [1 +] G², D)
        self.antialias = c.position_antialias
        self.norm = norm(c) if c.embedding_norm else nn.Identity()  # CLIP's pre_layrnorm
        self.dropout = nn.Dropout(c.dropout)
        nn.init.normal_(self.positions, std=0.02)

    def forward(self, pixel_values: Tensor) -> Tensor:
        B = pixel_values.size(0)
        x = self.patches(pixel_values.to(self.patches.weight.dtype))  # (B, D, h, w)
        h, w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)  # (B, h·w, D): the patches row by row
        if self.class_token is not None:
            x = torch.cat((self.class_token.expand(B, -1, -1), x), dim=1)  # (B, 1 + h·w, D)
        x = x + self.grid_positions(h, w)  # (B, [1 +] h·w, D)
        if self.registers is not None:
            x = torch.cat((x[:, :1], self.registers.expand(B, -1, -1), x[:, 1:]), dim=1)  # (B, T, D)
        return self.dropout(self.norm(x))

    def grid_positions(self, h: int, w: int) -> Tensor:
        """The class token's row (where there is one), then the G x G grid's rows resampled to h x w -> (1, [1 +]
        h·w, D)."""
        first, grid = self.positions[:, :self.first], self.positions[:, self.first:]  # (1, 1|0, D), (1, G², D)
        D = grid.size(-1)
        grid = grid.reshape(1, self.grid, self.grid, D).permute(0, 3, 1, 2)  # (1, D, G, G)
        at = torch.promote_types(grid.dtype, torch.float32)  # half precision shifts the resampled rows
        grid = F.interpolate(grid.to(at), size=(h, w), mode="bicubic", align_corners=False,
                             antialias=self.antialias).to(grid.dtype)  # (1, D, h, w)
        grid = grid.permute(0, 2, 3, 1).reshape(1, h * w, D)  # (1, h·w, D): row by row, as the patches
        return torch.cat((first, grid), dim=1)  # (1, [1 +] h·w, D)
