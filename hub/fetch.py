"""What is downloaded of a repository: the bundle it holds (its manifest, then the files the manifest lists, and a
pair's image tower's in its directory likewise, verified before it is renamed into place), or the files of a
checkpoint in two parts, its small files (config.json, tokenizer, sentence-transformers modules) before its weights,
so that the export step refuses an architecture it cannot load before a weight is fetched.

A checkpoint's other formats (ONNX, OpenVINO, Core ML, TensorFlow, Flax, Rust, GGUF) are left out, and so are pickled
PyTorch weights beside safetensors ones (the loader reads the safetensors first, model/weights.py).
"""

from __future__ import annotations

import os
import shutil
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

from bundle.files import staged_directory
from bundle.manifest import MANIFEST_NAME, Manifest
from bundle.verify import BundleError, verify_bundle
from hub import remote
from hub.cache import download_dir, writing
from hub.errors import Refused

OTHER_FORMATS = ("onnx/*", "openvino/*", "coreml/*", "*.onnx", "*.onnx_data", "*.onnx.data", "*.h5", "*.msgpack",
                 "*.ot", "*.gguf", "*.tflite", "*.mlmodel", "tf_model*", "flax_model*", "rust_model*", ".gitattributes")
WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt")


def checkpoint_files(files: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(small files, weight files) of a checkpoint's files, the other formats' left out."""
    safetensors = {PurePosixPath(name).parent for name in files if name.endswith(".safetensors")}
    kept = [name for name in files if not any(fnmatch(name, pattern) for pattern in OTHER_FORMATS)
            and not (fnmatch(PurePosixPath(name).name, "pytorch_model*.bin")
                     and PurePosixPath(name).parent in safetensors)]
    weights = [name for name in kept if any(fnmatch(name, pattern) for pattern in WEIGHTS)]
    return [name for name in kept if name not in weights], weights


def _bundle_files(snapshot: remote.Snapshot, downloads: Path, prefix: str) -> list[str]:
    """The manifest at `prefix` (the root, or a pair's image tower's directory and "/") and the files it lists,
    downloaded; the paths, each once (a shared data file), a pair's image tower's after its own."""
    remote.download(snapshot, [prefix + MANIFEST_NAME], downloads)
    try:
        manifest = Manifest.read(downloads / prefix)
    except ValueError as err:
        raise Refused(f"{snapshot}: its {prefix}{MANIFEST_NAME} is not a manifest this attnserve reads "
                      f"({str(err).splitlines()[0]})") from None
    graphs = manifest.graphs
    files = [prefix + name for name in dict.fromkeys([manifest.input_file[0], *(g.file for g in graphs),
                                                       *(name for g in graphs for name in g.data_files)])]
    remote.download(snapshot, files, downloads)
    tower = _bundle_files(snapshot, downloads, f"{prefix}{manifest.pair.image_tower}/") if manifest.pair else []
    return [prefix + MANIFEST_NAME, *files, *tower]


def fetch_bundle(snapshot: remote.Snapshot, target: Path) -> None:
    """The bundle `snapshot` holds at its root, into `target`, verified (bundle.verify) before it is in place."""
    downloads = download_dir(target)
    files = _bundle_files(snapshot, downloads, "")
    with writing(target.parent), staged_directory(target) as staging:
        for name in files:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(downloads / name, staging / name)
        try:
            verify_bundle(staging)
        except BundleError as err:
            raise Refused(f"{snapshot}: the bundle it holds fails verification: {err}") from None
    shutil.rmtree(downloads, ignore_errors=True)
