"""verify_bundle: check a bundle directory against its manifest without torch or export code.

The service calls this at start-up, so it imports only the bundle package and onnxruntime. Checks:
the manifest parses (its adapters, if any, are its model config's); every graph takes the `adapter` input exactly
when the bundle has adapters; the tokenizer (an image model's preprocessor file) and every graph exist and match
their sha256; each graph reads tensors
from exactly the external data files its entry lists (bundle.external_data), and each matches its sha256 (a file
that several graphs read, as the fp32 graphs' shared weights, hashed once);
every graph loads in onnxruntime and its input/output names, element types and shapes are the ones the
manifest lists; a two-tower model's image tower (the directory its `pair` section names) is a bundle that passes these
checks, of modality image.
Every failure raises BundleError naming the file (and field).
"""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

from bundle.external_data import GraphFileError, external_locations
from bundle.feeds import ADAPTER
from bundle.files import sha256_file
from bundle.manifest import MANIFEST_NAME, GraphEntry, Manifest, TensorSpec

# onnxruntime's NodeArg.type strings -> the manifest's onnx element type names
_ORT_TYPES = {"tensor(int64)": "int64", "tensor(float)": "float32", "tensor(float16)": "float16",
              "tensor(int32)": "int32", "tensor(bool)": "bool"}


class BundleError(ValueError):
    """The bundle does not match its manifest; the message names the file and what differs."""


def verify_bundle(bundle_dir: Path) -> Manifest:
    bundle_dir = Path(bundle_dir)
    manifest = _read_manifest(bundle_dir)
    name, sha256 = manifest.input_file  # the tokenizer or an image model's preprocessor
    _check_hash(_inside(bundle_dir, name), sha256)
    _check_unique(manifest)
    hashed: dict[Path, str] = {}  # a data file several graphs read (bundle.weights) is hashed once
    for entry in manifest.graphs:
        _check_hash(_inside(bundle_dir, entry.file), entry.sha256)
        _check_data_files(bundle_dir, entry, hashed)
        _check_graph(bundle_dir / entry.file, entry)
    if manifest.pair is not None:
        _check_image_tower(bundle_dir, manifest.pair.image_tower)
    return manifest


def _check_image_tower(bundle_dir: Path, name: str) -> None:
    tower = _inside(bundle_dir, name)
    if not tower.is_dir():
        raise BundleError(f"{name}: the pair's image tower is listed in the manifest but is not a directory of "
                          f"{bundle_dir}")
    if verify_bundle(tower).modality != "image":
        raise BundleError(f"{name}/{MANIFEST_NAME}: the pair's image tower is not an image model's bundle")


def _inside(bundle_dir: Path, name: str) -> Path:
    """The bundle file `name` (a plain name, by the manifest's schema), refused if a symlink leads out."""
    path = bundle_dir / name
    if path.exists() and not path.resolve().is_relative_to(bundle_dir.resolve()):
        raise BundleError(f"{name}: resolves outside the bundle directory {bundle_dir} (a symlink?)")
    return path


def _read_manifest(bundle_dir: Path) -> Manifest:
    path = bundle_dir / MANIFEST_NAME
    if not path.is_file():
        raise BundleError(f"{path}: manifest not found (is {bundle_dir} a bundle directory?)")
    try:
        return Manifest.read(bundle_dir)
    except ValueError as err:  # pydantic's ValidationError, json's JSONDecodeError, UnicodeDecodeError
        raise BundleError(f"{path}: {_first_problem(err)}") from None


def _first_problem(err: ValueError) -> str:
    """'field graphs.0.sha256: Field required' for a validation error, else the error text."""
    errors = getattr(err, "errors", None)
    if not callable(errors):
        return f"not valid JSON: {err}"
    first = errors()[0]
    return f"field {'.'.join(str(p) for p in first['loc']) or '(document)'}: {first['msg']}"


def _check_unique(manifest: Manifest) -> None:
    seen: set[tuple[str, str]] = set()
    for entry in manifest.graphs:
        if (entry.kind, entry.variant) in seen:
            raise BundleError(f"{MANIFEST_NAME}: graphs lists kind {entry.kind!r} variant {entry.variant!r} twice")
        seen.add((entry.kind, entry.variant))
    if manifest.graph("fast", "fp32") is None:
        raise BundleError(f"{MANIFEST_NAME}: graphs has no fast fp32 graph")
    for entry in manifest.graphs:
        if any(i.name == ADAPTER for i in entry.inputs) != bool(manifest.adapters):
            raise BundleError(f"{MANIFEST_NAME}: graph {entry.file} {'lacks' if manifest.adapters else 'takes'} the "
                              f"{ADAPTER!r} input, but the bundle has {len(manifest.adapters)} adapters")


def _check_hash(path: Path, expected: str, hashed: dict[Path, str] | None = None) -> None:
    if not path.is_file():
        raise BundleError(f"{path.name}: listed in the manifest but missing from {path.parent}")
    hashed = {} if hashed is None else hashed
    if path not in hashed:
        hashed[path] = sha256_file(path)
    got = hashed[path]
    if got != expected:
        raise BundleError(f"{path.name}: sha256 {got} does not match the manifest's {expected}")


def _check_data_files(bundle_dir: Path, entry: GraphEntry, hashed: dict[Path, str]) -> None:
    """The graph reads tensors from exactly the data files its entry lists, and each matches its sha256."""
    try:
        read = external_locations(bundle_dir / entry.file)
    except GraphFileError as err:
        raise BundleError(f"{entry.file}: cannot load it, not a readable ONNX graph ({err})") from None
    if unlisted := sorted(read - set(entry.data_files)):
        raise BundleError(f"{entry.file}: reads tensors from {', '.join(unlisted)}, which the manifest does not "
                          f"list in its data_files (unhashed weights)")
    if unread := sorted(set(entry.data_files) - read):
        raise BundleError(f"{entry.file}: the manifest lists data files {', '.join(unread)} the graph does not read")
    for name, sha256 in entry.data_files.items():
        _check_hash(_inside(bundle_dir, name), sha256, hashed)


def _check_graph(path: Path, entry: GraphEntry) -> None:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # load check only
    try:
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises several private exception types
        raise BundleError(f"{path.name}: onnxruntime cannot load it: {str(err).splitlines()[0]}") from None
    _compare(path.name, "inputs", sess.get_inputs(), entry.inputs)
    _compare(path.name, "outputs", sess.get_outputs(), entry.outputs)


def _compare(file: str, field: str, args: list[ort.NodeArg], specs: list[TensorSpec]) -> None:
    got = [(a.name, _ORT_TYPES.get(a.type, a.type), list(a.shape)) for a in args]
    want = [(s.name, s.dtype, list(s.shape)) for s in specs]
    if got != want:
        raise BundleError(f"{file}: {field} {_describe(got)} do not match the manifest's {_describe(want)}")


def _describe(specs: list[tuple[str, str, list[str | int]]]) -> str:
    return "[" + ", ".join(f"{n}:{t}{s}" for n, t, s in specs) + "]"
