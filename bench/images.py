"""Image scenario: `python -m bench.images --bundle DIR` on an image bundle (docs/vision.md).

  lone   1 caller x 1 image per request, on POST /v1/embeddings (a data URI)
  batch  1 caller x 32 images per request

against the raw engine: the bundle's fast graph in a bare onnxruntime session (the served session options, and
one batch on every core, the faster of the two at each shape) on the same images already prepared, so the ratio
prices what serving adds: HTTP, base64, decoding and preparing each image (Pillow, numpy), the batcher. The images
are seeded noise saved as 640 x 480 JPEGs (a photograph's size: decoding and resizing it is part of the cost); the
server runs with the answer cache off and a 16 MiB body limit (32 of them in base64 pass the 2 MiB default). Prints
a Markdown table with each figure and the ratio served / engine; appends one JSON line per scenario to --out.

`--build DIR` first writes a bundle there from a random-weight DINOv2-S/14 shaped model (hidden 384, 12 layers, 6
heads, 224-pixel crops of 14-pixel patches: 257 tokens an image), as `make bench-images` does (needs torch).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from bench import procs, report
from bench.engine import service_config
from bench.httpload import Payload, run_load
from bundle.manifest import Manifest
from bundle.session import cpu_cores, open_session
from inference.runtime.images import load_processing, pixel_values

SCENARIOS = {"lone": 1, "batch": 32}  # images per request
SIZE = (480, 640)  # (height, width) of the sent photographs
PAYLOAD_BYTES = 16 << 20  # the server's body limit here: 32 photographs in base64 pass the 2 MiB default


def photos(count: int, seed: int = 0) -> list[bytes]:
    """Seeded 640 x 480 JPEGs: smooth colour with noise, as a photograph compresses."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        base = rng.integers(0, 256, size=(6, 8, 3)).astype(np.uint8)
        smooth = np.asarray(Image.fromarray(base).resize(SIZE[::-1], Image.Resampling.BICUBIC), dtype=np.int16)
        noisy = np.clip(smooth + rng.integers(-12, 13, size=smooth.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(noisy).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def engine_images_per_s(bundle: Path, images: list[bytes], batch: int, seconds: float) -> float:
    """The bare fast graph's images per second at `batch`, on prepared pixels: the faster of the served session
    options and one session on every core."""
    manifest = Manifest.read(bundle)
    entry = next(g for g in manifest.graphs if g.kind == "fast" and g.variant == "fp32")
    processing = load_processing(bundle)
    pixels = np.stack([pixel_values(images[i % len(images)], processing) for i in range(batch)])  # (B, C, H, W)
    best = 0.0
    for threads in dict.fromkeys([service_config().threads, cpu_cores()]):
        session = open_session(bundle / entry.file, "cpu", threads)
        session.run(["embeddings"], {"pixel_values": pixels})  # warm-up
        times: list[float] = []
        deadline = time.perf_counter() + seconds
        while len(times) < 3 or time.perf_counter() < deadline:
            started = time.perf_counter()
            session.run(["embeddings"], {"pixel_values": pixels})
            times.append(time.perf_counter() - started)
        best = max(best, batch / statistics.median(times))
    return best


def payloads(images: list[bytes], count: int, pool: int = 8) -> list[Payload]:
    uris = [f"data:image/jpeg;base64,{base64.b64encode(data).decode()}" for data in images]
    return [Payload(orjson.dumps({"input": [uris[(i + j) % len(uris)] for j in range(count)]}), count, 0)
            for i in range(pool)]


def measure(bundle: Path, duration_s: float, rec: report.Recorder, log_dir: Path) -> None:
    images = photos(16)
    flags = ("--cache-bytes", "0", "--payload-limit-bytes", str(PAYLOAD_BYTES))  # every image runs; 32 photos fit
    server = procs.start(f"images-{bundle.name}", procs.service_argv(bundle, *flags), {}, log_dir)
    try:
        served = {}
        for name, count in SCENARIOS.items():
            result = asyncio.run(run_load(server.port, "/v1/embeddings", payloads(images, count), 1, duration_s,
                                          lambda: procs.tree_cpu_s(server.proc.pid)))
            served[name] = result.summary()
    finally:
        procs.terminate(server)
    for name, count in SCENARIOS.items():
        engine = engine_images_per_s(bundle, images, count, min(duration_s, 5.0))
        row = rec.add("images", scenario=name, images=count, engine_images_per_s=engine, **served[name])
        print(f"| {name} | 1 x {count} | {row['texts_per_s']:.1f} | {engine:.1f} | {row['texts_per_s'] / engine:.2f} | "
              f"{row['p50_ms']:.1f} | {row['errors']}/{row['requests']} |", flush=True)


def build(out: Path) -> None:
    """A random-weight DINOv2-S/14 shaped bundle at `out` (torch, transformers and the export)."""
    import transformers

    from export.bundle import export_bundle

    source = Path(tempfile.mkdtemp(prefix="attnserve-bench-dinov2-"))
    config = transformers.Dinov2Config(hidden_size=384, num_attention_heads=6, num_hidden_layers=12, patch_size=14,
                                       image_size=518)
    transformers.Dinov2Model(config).save_pretrained(source)
    transformers.BitImageProcessor(size={"shortest_edge": 256}, crop_size={"height": 224, "width": 224},
                                   image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]
                                   ).save_pretrained(source)
    export_bundle(source, out, variants=["fp32"], name="dinov2-small-shape")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.images", description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True, help="an image bundle (built first with --build)")
    parser.add_argument("--build", action="store_true", help="write a DINOv2-S/14 shaped bundle at --bundle first")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results.jsonl")
    args = parser.parse_args(argv)
    if args.build and not (args.bundle / "manifest.json").is_file():
        build(args.bundle)
    rec, log_dir = report.Recorder(args.out), Path(tempfile.mkdtemp(prefix="attnserve-bench-images-"))
    print("| scenario | callers x images | images/s | engine images/s | served / engine | p50 ms | errors |\n"
          "|---|---|---|---|---|---|---|")
    measure(args.bundle, args.duration, rec, log_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
