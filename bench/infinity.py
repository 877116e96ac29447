"""Infinity (the `infinity-emb` package) as a peer server, on its optimum (onnxruntime) engine, serving the
bundle's own graph.

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
"""

from __future__ import annotations

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
from bench.texts import make_texts
from bundle.manifest import Manifest
from bundle.session import cpu_cores

VENV = ROOT / "build" / "peers" / "infinity-venv"
TORCH = "torch==2.13.0"
# What infinity-emb 0.0.78 resolved to beside that torch when the bench first served with it.
PINS = ("infinity-emb[optimum,server]==0.0.78", "optimum==2.1.0", "optimum-onnx==0.1.0", "onnxruntime==1.32.0",
        "transformers==4.57.6", "tokenizers==0.22.2", "numpy==1.26.4")
PINS_FILE = "attnserve-pins.txt"
MODEL_NAME = "bench"  # --served-model-name: the "model" the bench's OpenAI bodies carry
READY_PATH = "/health"
SCENARIOS = ("a", "b", "c", "d")  # embeddings of plain texts: Infinity neither chunks nor returns attention
POOLING = {"mean": "mean", "cls": "cls"}  # bundle pooling -> Infinity's --pooling-method
MODEL_TYPES = ("bert", "roberta", "distilbert", "mpnet", "modernbert")  # encoders transformers' AutoConfig reads


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
    """Why Infinity cannot serve this bundle's model as attnserve does, or None."""
    if manifest.architecture not in MODEL_TYPES:
        return f"architecture {manifest.architecture} is not an encoder Infinity's optimum engine loads here"
    if manifest.pooling not in POOLING:
        return f"pooling {manifest.pooling}: Infinity's optimum engine pools by mean or CLS only"
    return None


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
    """Infinity on the variant's graph, on loopback, ready (its /health answers); RuntimeError if not."""
    manifest = Manifest.read(bundle)
    folder = model_folder(bundle, manifest, variant, log_dir / f"infinity-{variant}-model")
    return procs.start(f"infinity-{variant}", argv(venv_python, manifest.pooling), env(log_dir / "hf-home"), log_dir,
                       ready_path=READY_PATH, cwd=folder)


def argv(venv_python: Path, pooling: str, threads: int = 0) -> list[str]:
    """Infinity's `v2` command, run from inside the model folder (--model-id .: Infinity 0.0.78 hands optimum
    the .onnx file's path as found under the model id, and optimum 2.x looks for a file of that name in the
    folder, so the path must be the bare name). Loopback, a "{port}" placeholder for procs.launch;
    /v1/embeddings takes the bench's OpenAI bodies. Threads default to what bundle.session gives the naive
    server's session."""
    return [str(venv_python), "-I", str(ROOT / "bench" / "infinity_launch.py"), str(threads or cpu_cores()), "v2",
            "--model-id", ".", "--served-model-name", MODEL_NAME, "--engine", "optimum", "--device", "cpu",
            "--pooling-method", POOLING[pooling], "--batch-size", "32", "--onnx-disable-optimize",
            "--no-model-warmup", "--url-prefix", "/v1", "--host", "127.0.0.1", "--port", "{port}",
            "--log-level", "warning"]


def env(home: Path) -> dict[str, str]:
    """No telemetry, no hub: the model is a local folder; Hugging Face's cache in the run's temp folder."""
    return {"DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(home)}


def agreement(service_url: str, infinity_url: str, tokenizer: Tokenizer) -> dict[str, float]:
    """The same 20 texts of 16, 128 and 500 tokens (past max_length: both must truncate alike) through both
    servers' /v1/embeddings: the lowest cosine and the largest absolute difference between their vectors."""
    texts = [t for n, count in ((16, 8), (128, 8), (500, 4)) for t in make_texts(tokenizer, n, count, seed=7 + n)]
    ours, theirs = (_vectors(url, texts) for url in (service_url, infinity_url))
    cosine = np.sum(ours * theirs, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    return {"texts": len(texts), "min_cosine": float(cosine.min()),
            "max_abs_diff": float(np.abs(ours - theirs).max())}


def _vectors(url: str, texts: list[str]) -> np.ndarray:
    response = httpx.post(url + "/v1/embeddings", json={"input": texts, "model": MODEL_NAME}, timeout=120.0)
    response.raise_for_status()
    data = sorted(response.json()["data"], key=lambda item: item["index"])
    return np.array([item["embedding"] for item in data], dtype=np.float64)  # (B, D)
