"""`attnserve export`: build a parity-gated ONNX bundle, or verify one.

    attnserve export SRC --out DIR [--variants fp32,fp32-opt,int8,fp16] [--calibration-data FILE]
                     [--adapter NAME=DIR ...] [--name N] [--version V]
    attnserve export --verify DIR
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from bundle.variants import DEFAULT_VARIANTS, VARIANTS
from export.errors import export_errors
from model.families import FAMILIES

log = logging.getLogger("export")

EPILOG = """examples:
  attnserve export checkpoints/default --out bundles/default        # fp32 and fused fp32-opt: exact
  attnserve export checkpoints/default --out bundles/default --variants fp32,fp32-opt,int8
  attnserve export MODEL_DIR --out bundles/mine --variants fp32,fp32-opt,int8 --calibration-data texts.txt
  attnserve export MODEL_DIR --out bundles/tasks --adapter query=lora/query --adapter passage=lora/passage
  attnserve export --verify bundles/default

gates (a graph that misses its gate fails the export; nothing is written):
  fp32, fp32-opt  on real tokens, each output's max abs error from a float64 run of the same model <= 4 x
                  eager float32 PyTorch's own error + 1e-6 x max(1, the output's largest |value|), attention
                  probabilities included: what float32 rounding gives, whatever the model's size and depth, not
                  what a wrong graph gives (docs/export.md, "The exact gates", measures both)
  int8, int8-dynamic  embedding cosine >= 0.99 and label agreement >= 99% on the parity texts and on up
                  to 200 short and 1,000 held-out texts of the calibration data, never calibrated on, each
                  set on its own (int8: static, calibrated, batch-invariant; int8-dynamic: per-batch scales,
                  served only by name; docs/int8.md)
  fp16            embedding cosine >= 0.999 (measured on CPU when CUDA is absent)
  with --adapter  each gate on the base, on each adapter and on batches mixing them, each reported by name
see docs/export.md for the bundle layout and the manifest fields."""


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Export an attnserve checkpoint, a Hugging Face directory of a family the loader "
        f"knows (config.json model_type {', '.join(t for f in FAMILIES for t in f.model_types)}) or a "
        "sentence-transformers directory over one to an ONNX bundle (manifest.json, tokenizer.json, graphs), "
        "gated on parity with PyTorch; or verify an existing bundle against its manifest.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", nargs="?", type=Path,
                   help="checkpoint, Hugging Face or sentence-transformers directory")
    p.add_argument("--out", type=Path, help="bundle directory to write (replaced atomically)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help=f"comma-separated, from {','.join(VARIANTS)}; fp32 is always built (default: "
                   f"{','.join(DEFAULT_VARIANTS)}, the exact ones; int8 and fp16 only when named)")
    p.add_argument("--calibration-data", type=Path, metavar="FILE",
                   help="texts like those the model will serve, to calibrate and gate the int8 variants: one "
                   "text per line, or .jsonl/.csv with a `text` field (the training file will do). Needed for "
                   "int8 of any model but a checkpoint trained on the Rotten Tomatoes snippets (the default)")
    p.add_argument("--reranker", metavar="RECIPE",
                   help="export a causal LM (...ForCausalLM) as an LLM reranker, a one-label cross-encoder scored "
                   "as its recipe says: qwen3 (Qwen3-Reranker: P(yes) against no at the last token after its "
                   "prompt; served on every rerank route)")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=DIR", type=_adapter,
                   help="a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) trained on "
                   "SRC, served under NAME; repeat for more. The graphs hold the base once and every adapter "
                   "stacked, and take one more input, adapter: each row's index (0 the base, then the adapters "
                   "in the order given). Adapters on the token embeddings and the attention and MLP projections "
                   "only; not with int8 or --reranker")
    p.add_argument("--name", help="bundle name (default: the source directory's name)")
    p.add_argument("--version", default="1", help="bundle version string (default: 1)")
    p.add_argument("--verify", type=Path, metavar="DIR", help="verify the bundle at DIR instead of exporting")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the result")
    return p


def _adapter(value: str) -> tuple[str, Path]:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {value!r}")
    return name, Path(path)


def _adapters(pairs: list[tuple[str, Path]]) -> dict[str, Path]:
    adapters: dict[str, Path] = {}
    for name, path in pairs:
        if name in adapters:
            raise ValueError(f"--adapter {name} is given twice; each adapter needs its own name")
        adapters[name] = path
    return adapters


def main(argv: list[str] | None = None, prog: str = "attnserve export") -> int:
    p = parser(prog)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # quiet onnxscript/onnxruntime tools
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)
    if args.verify is not None and (args.source is not None or args.out is not None or args.adapter):
        p.error("--verify DIR takes no SRC, --out or --adapter")
    if args.verify is None and (args.source is None or args.out is None):
        p.error("give SRC and --out DIR to export, or --verify DIR")
    try:
        return _verify(args.verify) if args.verify is not None else _export(args)
    except export_errors() as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1


def _verify(bundle_dir: Path) -> int:
    from bundle.verify import verify_bundle

    manifest = verify_bundle(bundle_dir)
    print(f"{bundle_dir}: OK ({manifest.name} v{manifest.version}, {len(manifest.graphs)} graphs)")
    return 0


def _export(args: argparse.Namespace) -> int:
    from export.bundle import export_bundle

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    manifest = export_bundle(args.source, args.out, variants, name=args.name, version=args.version,
                             calibration_data=args.calibration_data, reranker=args.reranker,
                             adapters=_adapters(args.adapter))
    for g in manifest.graphs:
        print(f"{args.out / g.file}: {g.kind} {g.variant} parity {g.parity}")
    for index, adapter in enumerate(manifest.adapters, start=1):
        print(f"adapter {index} {adapter.name}: rank {adapter.rank}, {adapter.bytes} bytes, "
              f"on {', '.join(adapter.targets)}")
    return 0
