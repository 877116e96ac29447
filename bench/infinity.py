"""Infinity (the `infinity-emb` package) as a peer server, on its optimum (onnxruntime) engine, in two
configurations: "infinity" on the bundle's own graph, and "infinity-user", the source model as a user runs it.

Its own environment: Infinity brings torch and transformers, which never enter the project's .venv. The
bench makes build/peers/infinity-venv on first use and reuses it while its pins are unchanged. torch goes
in first, pinned (here `torch==2.13.0` is the CPU build; a looser requirement resolved first pulls a CUDA
build of several GB), then Infinity and the versions it was run with.

The same model: Infinity's optimum engine loads a Hugging Face folder (config.json, a tokenizer, one .onnx
file), runs the graph and takes its `last_hidden_state` output, then mean- or CLS-pools and L2-normalises
in numpy. A bundle's fast graph is the encoder with its pooling on top, and names its per-token output
`token_embeddings`. So the folder gets a copy of the variant's graph with that one output renamed (no node
or weight changes), the bundle's tokenizer.json, and a config.json whose max_position_embeddings is the
bundle's max_length (Infinity truncates to it). Infinity's own graph optimiser is off, so both serve one
graph; `agreement` checks their vectors.

The same threads: bench.infinity_launch gives its onnxruntime session the intra-op thread count the naive
server's session gets (bundle.session's default); its batching (batch size 32) and queue are its own.

As a user runs it (infinity-user): when the bundle's source is a Hugging Face or sentence-transformers directory
on disk, the venv's own `optimum-cli export onnx --task feature-extraction` exports it (once, cached under
build/peers/infinity-user), and Infinity serves that folder with its graph optimiser on, onnxruntime's default
session options and the bundle's pooling. It truncates where the model's config.json says
(max_position_embeddings), which may be past the bundle's max length. With optimum 2.1.0 Infinity 0.0.78's
optimiser fails (OptimizationConfig no longer takes optimize_with_onnxruntime_only) and it serves the unoptimised
export; optimiser_failure finds that in its log. Infinity is not patched: this is what a user gets.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
from tokenizers import Tokenizer

from bench import procs
from bench.procs import ROOT
from bench.texts import make_texts, token_counts
from bundle.manifest import Manifest
from bundle.session import cpu_cores

VENV = ROOT / "build" / "peers" / "infinity-venv"
USER_MODELS = ROOT / "build" / "peers" / "infinity-user"  # optimum-cli's exports of bundles' sources
EXPORTED = "attnserve-source.json"  # written last: an export that stopped half-way is never reused
KINDS = ("infinity", "infinity-user")  # the bundle's graph; the source model as a user serves it
TORCH = "torch==2.13.0"
# What infinity-emb 0.0.78 resolved to beside that torch when the bench first served with it.
PINS = ("infinity-emb[optimum,server]==0.0.78", "optimum==2.1.0", "optimum-onnx==0.1.0", "onnxruntime==1.32.0",
        "transformers==4.57.6", "tokenizers==0.22.2", "numpy==1.26.4")
PINS_FILE = "attnserve-pins.txt"
MODEL_NAME = "bench"  # --served-model-name: the "model" the bench's OpenAI bodies carry
READY_PATH = "/health"
SCENARIOS = ("a", "b", "c", "d", "h", "i")  # plain texts' embeddings: Infinity neither chunks nor returns attention
POOLING = {"mean": "mean", "cls": "cls"}  # bundle pooling -> Infinity's --pooling-method
MODEL_TYPES = ("bert", "roberta", "distilbert", "mpnet", "modernbert")  # encoders transformers' AutoConfig reads
SOURCE_KINDS = ("sentence-transformers", "hf-")  # source kinds (bundle.manifest.Source) that are Hugging Face folders


def python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> tuple[Path | None, str]:
    """(the venv's Python, what happened) or (None, why not): made once, reused while its pins match."""
    wanted = "\n".join((TORCH, *PINS)) + "\n"
    marker = VENV / PINS_FILE
    if python().exists() and marker.exists() and marker.read_text() == wanted:
        return python(), f"reusing {VENV.relative_to(ROOT)}"
    shutil.rmtree(VENV, ignore_errors=True)
    log, start = VENV.parent / "infinity-install.log", time.monotonic()
    VENV.parent.mkdir(parents=True, exist_ok=True)
    steps = {"python -m venv": [sys.executable, "-m", "venv", str(VENV)],
             f"pip install {TORCH}": [str(python()), "-m", "pip", "install", TORCH],
             f"pip install {PINS[0]}": [str(python()), "-m", "pip", "install", *PINS]}
    with log.open("wb") as out:
        for name, step in steps.items():
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False).returncode != 0:
                return None, f"could not make {VENV.relative_to(ROOT)}: `{name}` failed (no network?), see {log}"
    marker.write_text(wanted)
    return python(), f"made {VENV.relative_to(ROOT)} in {time.monotonic() - start:.0f} s (log {log})"


def unsupported(manifest: Manifest) -> str | None:
    """Why Infinity cannot serve this bundle's graph as attnserve does, or None."""
    if manifest.architecture not in MODEL_TYPES:
        return f"architecture {manifest.architecture} is not an encoder Infinity's optimum engine loads here"
    return _pooling(manifest)


def user_unsupported(manifest: Manifest) -> str | None:
    """Why there is no source model for infinity-user to serve, or None."""
    source = manifest.source
    if not source.kind.startswith(SOURCE_KINDS) or not (Path(source.path) / "config.json").is_file():
        return (f"the bundle's source ({source.kind}, {source.path}) is not a Hugging Face or sentence-transformers "
                f"directory on disk for optimum-cli to export")
    return _pooling(manifest)


def _pooling(manifest: Manifest) -> str | None:
    if manifest.pooling not in POOLING:
        return f"pooling {manifest.pooling}: Infinity's optimum engine pools by mean or CLS only"
    return None


def user_model(venv_python: Path, manifest: Manifest, home: Path) -> tuple[Path | None, str]:
    """(the source model exported by the venv's optimum-cli, what happened) or (None, why not): exported once
    per source (source_key) and reused, offline (the source is a local folder)."""
    source = Path(manifest.source.path)
    out = USER_MODELS / source_key(source)
    if (out / EXPORTED).is_file():
        return out, f"reusing {out.relative_to(ROOT)}"
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    log, start = out.with_suffix(".log"), time.monotonic()
    # -I: the venv's optimum-cli script, with no PYTHONPATH or current folder that could shadow its imports
    argv = [str(venv_python), "-I", str(venv_python.parent / "optimum-cli"), "export", "onnx", "--model", str(source),
            "--task", "feature-extraction", str(out)]
    with log.open("wb") as fh:
        done = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env(home)}, check=False)
    if done.returncode != 0 or not (out / "model.onnx").is_file():
        return None, f"`optimum-cli export onnx` of {source} failed (exit {done.returncode}), see {log}"
    (out / EXPORTED).write_bytes(orjson.dumps({"source": str(source), "argv": argv[2:]}))
    return out, f"exported {source} with optimum-cli to {out.relative_to(ROOT)} in {time.monotonic() - start:.0f} s"


def source_key(source: Path) -> str:
    """What an export is cached by: the source's path, the name and size of each of its files (config, tokenizer,
    weights) and the venv's pins (another optimum may export another graph)."""
    digest = hashlib.sha256("\n".join((str(source.resolve()), TORCH, *PINS)).encode())
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        digest.update(f"\n{path.name}\0{path.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def model_folder(bundle: Path, manifest: Manifest, variant: str, out: Path) -> Path:
    """A Hugging Face folder over the variant's fast graph, as Infinity's optimum engine loads it."""
    entry = manifest.graph("fast", variant)
    if entry is None:  # a graph with data files is written as one file (onnx.load reads them), under 2 GiB
        raise RuntimeError(f"no fast graph for {variant}")
    out.mkdir(parents=True, exist_ok=True)
    _rename_output(bundle / entry.file, out / "model.onnx", "token_embeddings", "last_hidden_state")
    tokenizer_file = bundle / manifest.input_file[0]  # a text model's tokenizer
    shutil.copyfile(tokenizer_file, out / "tokenizer.json")
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    pad = tokenizer.id_to_token(int(manifest.model_config_.get("pad_token_id", 0)))
    (out / "tokenizer_config.json").write_bytes(orjson.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": pad, "model_max_length": manifest.max_length}))
    (out / "config.json").write_bytes(orjson.dumps(_config(manifest)))
    return out


def _config(manifest: Manifest) -> dict:
    """What AutoConfig and Infinity read: the model type and max_position_embeddings, its truncation length."""
    return {"model_type": manifest.architecture, "hidden_size": manifest.hidden_size,
            "num_hidden_layers": manifest.num_layers, "num_attention_heads": manifest.num_heads,
            "vocab_size": int(manifest.model_config_["vocab_size"]), "max_position_embeddings": manifest.max_length,
            "pad_token_id": int(manifest.model_config_.get("pad_token_id", 0))}


def _rename_output(source: Path, target: Path, old: str, new: str) -> None:
    import onnx

    model = onnx.load(str(source))
    for node in model.graph.node:  # the pooling nodes read it too
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
    for value in [*model.graph.output, *model.graph.value_info]:
        if value.name == old:
            value.name = new
    onnx.save(model, str(target))


def start(venv_python: Path, bundle: Path, variant: str, log_dir: Path) -> procs.Server:
    """Infinity on the variant's graph, its optimiser off and its threads the naive server's, on loopback,
    ready (its /health answers); RuntimeError if not."""
    manifest = Manifest.read(bundle)
    folder = model_folder(bundle, manifest, variant, log_dir / f"infinity-{variant}-model")
    command = argv(venv_python, manifest.pooling, threads=cpu_cores(), optimise=False)
    return procs.start(f"infinity-{variant}", command, env(log_dir / "hf-home"), log_dir, ready_path=READY_PATH,
                       cwd=folder)


def start_user(venv_python: Path, folder: Path, bundle: Path, variant: str, log_dir: Path) -> procs.Server:
    """Infinity on the source model's export (user_model) as a user starts it: its optimiser on, onnxruntime's
    default threads. `variant` only names the server: this peer is the same beside every variant."""
    command = argv(venv_python, Manifest.read(bundle).pooling, threads=0, optimise=True)
    return procs.start(f"infinity-user-{variant}", command, env(log_dir / "hf-home"), log_dir,
                       ready_path=READY_PATH, cwd=folder)


def argv(venv_python: Path, pooling: str, threads: int, optimise: bool) -> list[str]:
    """Infinity's `v2` command, run from inside the model folder (--model-id .: Infinity 0.0.78 hands optimum
    the .onnx file's path as found under the model id, and optimum 2.x looks for a file of that name in the
    folder, so the path must be the bare name). Loopback, a "{port}" placeholder for procs.launch;
    /v1/embeddings takes the bench's OpenAI bodies. `threads` 0 leaves onnxruntime's session options alone
    (bench.infinity_launch)."""
    return [str(venv_python), "-I", str(ROOT / "bench" / "infinity_launch.py"), str(threads), "v2",
            "--model-id", ".", "--served-model-name", MODEL_NAME, "--engine", "optimum", "--device", "cpu",
            "--pooling-method", POOLING[pooling], "--batch-size", "32",
            *(() if optimise else ("--onnx-disable-optimize",)), "--no-model-warmup", "--url-prefix", "/v1",
            "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]


def optimiser_failure(server: procs.Server) -> str | None:
    """Infinity's "Optimization failed with ... Going to use the unoptimized model." warning from the server's
    log (its lines joined: its log handler wraps them), or None."""
    text = " ".join(server.log().split())
    start = text.find("Optimization failed")
    if start < 0:
        return None
    end = text.find("unoptimized model.", start)
    return text[start:end + len("unoptimized model.") if end > 0 else start + 300]


def env(home: Path) -> dict[str, str]:
    """No telemetry, no hub: the model is a local folder; Hugging Face's cache in the run's temp folder."""
    return {"DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(home)}


def agreement(service_url: str, infinity_url: str, tokenizer: Tokenizer) -> dict[str, float | None]:
    """The same 20 texts of 16, 128 and 500 tokens (past max_length: both must truncate alike) through both
    servers' /v1/embeddings: the lowest cosine and the largest absolute difference between their vectors, and
    the lowest cosine over the texts within the max length (infinity-user may truncate elsewhere)."""
    texts = [t for n, count in ((16, 8), (128, 8), (500, 4)) for t in make_texts(tokenizer, n, count, seed=7 + n)]
    ours, theirs = (_vectors(url, texts) for url in (service_url, infinity_url))
    cosine = np.sum(ours * theirs, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    within = np.array(token_counts(tokenizer, texts)) <= (tokenizer.truncation or {}).get("max_length", 1 << 30)
    return {"texts": len(texts), "min_cosine": float(cosine.min()),
            "min_cosine_within": float(cosine[within].min()) if within.any() else None,
            "max_abs_diff": float(np.abs(ours - theirs).max())}


def _vectors(url: str, texts: list[str]) -> np.ndarray:
    response = httpx.post(url + "/v1/embeddings", json={"input": texts, "model": MODEL_NAME}, timeout=120.0)
    response.raise_for_status()
    data = sorted(response.json()["data"], key=lambda item: item["index"])
    return np.array([item["embedding"] for item in data], dtype=np.float64)  # (B, D)
