"""Our fused graph against onnxruntime's transformer optimiser: `python -m bench.fusion BUNDLE [--transformers DIR]`.

Shape letters: B batch, T sequence.

Side by side, for the bundle's fast graphs and what onnxruntime's optimiser makes of the same model:

    fp32                     the bundle's exported graph, as served (onnxruntime fuses a little when it loads it)
    fp32-opt                 the bundle's fused graph (export.variants.optimize)
    ort-optimizer(fp32)      optimize_model(fast-fp32.onnx, model_type="bert") with its default options
    ort-optimizer(transformers)  with --transformers DIR: the same model loaded by `transformers`, exported with
                             torch.onnx's TorchScript exporter (the path onnxruntime's optimiser is written for)
                             and optimised the same way; needs torch and transformers

Each row: node count, the fused (com.microsoft) operators, median CPU milliseconds of this process per batch
at each B x T (export.measure.ms_per_round: the service's session options, every graph run once per round in
turn; T is cut to the graph's position table), and fp32-opt's speed as a multiple of the row's: the median
over rounds of (row's time / fp32-opt's time in the same round). Pairing the runs of one round cancels most
of the background load of a shared machine, which moves the plain medians by several per cent; the target
is >= 0.98 on every row. Every graph gets all-real tokens (no padding), so the optimiser's mask index, which
assumes right padding, means what the raw mask does. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import logging
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx

from bundle.manifest import Manifest
from export.measure import ms_per_round

SHAPES = ((32, 128), (8, 512))
ROUNDS = 11


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fusion", description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path, help="bundle directory with fast-fp32 and fast-fp32-opt graphs")
    parser.add_argument("--transformers", type=Path, metavar="DIR",
                        help="the same model as a Hugging Face directory (e.g. MiniLM's), for the plain-export row")
    parser.add_argument("--shapes", default=",".join(f"{b}x{t}" for b, t in SHAPES), help="B x T list")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"timed runs per graph and shape ({ROUNDS})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the optimiser logs every fusion it tries
    manifest = Manifest.read(args.bundle)
    graphs = {v: args.bundle / entry.file for v in ("fp32", "fp32-opt") if (entry := manifest.graph("fast", v))}
    if len(graphs) < 2:
        sys.exit(f"{args.bundle} has no fast fp32-opt graph; export it with the default variants")
    with tempfile.TemporaryDirectory() as work:
        graphs["ort-optimizer(fp32)"] = ort_optimized(graphs["fp32"], Path(work) / "ort.onnx", manifest)
        if args.transformers is not None:
            plain = transformers_graph(args.transformers, Path(work) / "transformers.onnx")
            graphs["ort-optimizer(transformers)"] = ort_optimized(plain, Path(work) / "transformers-ort.onnx", manifest)
        feeds = speed_feeds(parse_shapes(args.shapes), manifest)
        times = ms_per_round(graphs, "cpu", feeds, args.rounds)
        print(table(graphs, times, list(feeds)))
    return 0


def parse_shapes(spec: str) -> list[tuple[int, int]]:
    return [(int(b), int(t)) for b, t in (shape.split("x") for shape in spec.split(","))]


def speed_feeds(shapes: list[tuple[int, int]], manifest: Manifest) -> dict[str, dict[str, np.ndarray]]:
    """{"32x128": feed}: seeded random token ids, every token real; T cut to the position table."""
    vocab, positions = manifest.model_config_["vocab_size"], manifest.model_config_["max_length"]
    rng, feeds = np.random.default_rng(0), {}
    for batch, length in shapes:
        length = min(length, positions)
        ids = rng.integers(min(1000, vocab // 2), vocab, size=(batch, length)).astype(np.int64)  # (B, T)
        feeds[f"{batch}x{length}"] = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                      "token_type_ids": np.zeros_like(ids)}
    return feeds


def ort_optimized(src: Path, dst: Path, manifest: Manifest) -> Path:
    """onnxruntime's transformer optimiser on `src` with its default BERT options."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(src), model_type="bert", num_heads=manifest.num_heads,
                           hidden_size=manifest.hidden_size, use_gpu=False)
    model.save_model_to_file(str(dst))
    return dst


def transformers_graph(model_dir: Path, dst: Path) -> Path:
    """`model_dir` loaded by transformers (eager attention) and exported by torch.onnx's TorchScript exporter,
    inputs input_ids, attention_mask, token_type_ids (B, T), output the last hidden state first."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state  # (B, T, D)

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = torch.ones(2, 8, dtype=torch.long)  # (B, T)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Plain().eval(), (example, example, torch.zeros_like(example)), str(dst), dynamo=False,
                          opset_version=17, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={name: {0: "batch", 1: "sequence"} for name in names})
    return dst


def fused_ops(path: Path) -> tuple[int, dict[str, int]]:
    """(node count, com.microsoft operator -> count) of a graph."""
    nodes = onnx.load(str(path), load_external_data=False).graph.node
    fused = collections.Counter(n.op_type for n in nodes if n.domain == "com.microsoft")
    return len(nodes), dict(sorted(fused.items()))


def table(graphs: dict[str, Path], times: dict[str, dict[str, list[float]]], shapes: list[str]) -> str:
    """Markdown: graph, nodes, fused operators, median ms per batch at each shape, fp32-opt's paired speed-up."""
    lines = [f"| graph | nodes | fused operators | {' | '.join(f'CPU ms {s}' for s in shapes)} | fp32-opt speed "
             f"x this ({'/'.join(shapes)}) |", "|---|---|---|" + "---|" * (len(shapes) + 1)]
    for name, path in graphs.items():
        count, ops = fused_ops(path)
        fused = ", ".join(f"{op} {n}" for op, n in ops.items()) or "none"
        ms = " | ".join(f"{statistics.median(times[name][s]):.4g}" for s in shapes)
        speedup = "/".join(f"{paired_ratio(times[name][s], times['fp32-opt'][s]):.2f}" for s in shapes)
        lines.append(f"| {name} | {count} | {fused} | {ms} | {speedup} |")
    return "\n".join(lines)


def paired_ratio(row: list[float], reference: list[float]) -> float:
    """Median over rounds of row time / reference time in the same round."""
    return statistics.median(r / ref for r, ref in zip(row, reference, strict=True))


if __name__ == "__main__":
    sys.exit(main())
