"""`attnserve embed` over images: a folder (PNG, JPEG, WebP, GIF, nested folders) and a Parquet column of image bytes,
through a ViT image bundle and a CLIP pair's image tower. The vectors equal transformers' (its pipelines' load_image,
its Pillow processor, the model: `pooler_output`, CLIP's `get_image_features`) within 1e-5; bad images (not an image,
truncated, over the byte or pixel cap) are rows in OUT/_rejects with the core's code, and the job goes on; a re-run
after a kill resumes, part for part equal to an uninterrupted run; the flags that are for texts are refused.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import transformers
from PIL import Image
from transformers.image_utils import load_image

from inference.options import LoadOptions
from inference.runtime.loading import load_bundle
from jobs.cli import main
from jobs.inputs import Columns
from jobs.local import Job, run
from jobs.options import ImageInput, JobError, JobOutput
from jobs.tables import FINGERPRINT_KEY
from tests.helpers.vision import reference_model, shared_bundle
from tests.jobs.corpus import job_model, output, rejects, vectors

TOLERANCE = 1e-5
FILES = {"a.png": "PNG", "b/c.jpg": "JPEG", "b/d/e.webp": "WEBP", "f.gif": "GIF", "g.JPEG": "JPEG"}


def picture(index: int, fmt: str) -> bytes:
    """Seeded noise of a size of its own, as `fmt` bytes."""
    pixels = np.random.default_rng(index).integers(0, 256, size=(30 + 7 * index, 44 + 5 * index, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def folder(root: Path) -> Path:
    """FILES as images, with two bad ones (text named .jpg, a truncated PNG) and what the job skips (a hidden file, a
    hidden folder, a file of another extension)."""
    for index, (name, fmt) in enumerate(FILES.items()):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(picture(index, fmt))
    (root / "b" / "not-an-image.jpg").write_text("a caption, not a picture")
    (root / "truncated.png").write_bytes(picture(9, "PNG")[:200])
    (root / ".hidden.png").write_bytes(picture(0, "PNG"))
    (root / ".cache").mkdir()
    (root / ".cache" / "x.png").write_bytes(picture(0, "PNG"))
    (root / "notes.txt").write_text("not read")
    return root


@pytest.fixture(scope="module")
def vit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, torch.nn.Module]:
    """(source, bundle, reference model) of the run's small ViT (tests.helpers.vision.shared_bundle)."""
    source, bundle = shared_bundle(tmp_path_factory, "vit-small")
    return source, bundle, reference_model("vit-small", source)


def reference(model: torch.nn.Module, source: Path, images: list[bytes], clip: bool = False) -> np.ndarray:
    """transformers' vectors of the images' bytes as its pipelines read them (load_image, RGB), its Pillow
    processor, then the model: ViT's pooler output, CLIP's image features."""
    processor = transformers.AutoImageProcessor.from_pretrained(source, use_fast=False)
    pixels = processor([load_image(Image.open(io.BytesIO(data))) for data in images], return_tensors="pt")
    with torch.no_grad():
        if clip:
            features = model.get_image_features(pixel_values=pixels["pixel_values"])
            return getattr(features, "pooler_output", features).numpy()  # transformers 5: an output; 4: the tensor
        return model(pixel_values=pixels["pixel_values"], interpolate_pos_encoding=True).pooler_output.numpy()


def _run(bundle: Path, out: Path, inputs: tuple[Path, ...], fmt: str | None = None, **job: Any):
    output = JobOutput(normalize=False, token_count=True)
    return run(Job(inputs, out, fmt, output=output, **{"images": ImageInput(), **job}), job_model(bundle, 3),
               io.StringIO())


def test_a_folder_of_images_equals_transformers_and_sets_bad_files_aside(vit: Any, tmp_path: Path) -> None:
    source, bundle, model = vit
    images = folder(tmp_path / "images")
    summary = _run(bundle, tmp_path / "out", (images,), "images", part_rows=3)
    table = output(tmp_path / "out")
    names = sorted(FILES)
    assert table.column("id").to_pylist() == names and str(table.schema.field("id").type) == "string"
    expected = reference(model, source, [(images / name).read_bytes() for name in names])
    np.testing.assert_allclose(vectors(table), expected, atol=TOLERANCE, rtol=0)
    tokens = json.loads((bundle / "manifest.json").read_text())["image"]["tokens"]
    assert set(table.column("tokens").to_pylist()) == {tokens}
    assert [(r["row"], r["id"], r["reason"].split(":")[0]) for r in rejects(tmp_path / "out")] == [
        (3, "b/not-an-image.jpg", "invalid_image"), (6, "truncated.png", "invalid_image")]
    assert (summary.rows, summary.written, summary.rejected, summary.parts) == (7, 5, 2, 3)
    loaded = load_bundle(bundle, LoadOptions(intra_op_threads=1), kinds=("fast",))
    for part in (tmp_path / "out").glob("part-*.parquet"):
        assert pq.read_schema(part).metadata[FINGERPRINT_KEY].decode() == loaded.fingerprint


def test_a_parquet_column_of_image_bytes_and_the_caps(vit: Any, tmp_path: Path) -> None:
    """Bytes (and a path, under the root) in one column; over max_bytes or max_pixels, none, or not an image: rejects
    with the server's codes, checked before decoding."""
    source, bundle, model = vit
    big = picture(5, "PNG")  # 65 x 69 pixels
    rows = [{"id": "p0", "image": picture(0, "PNG")}, {"id": "p1", "image": picture(1, "JPEG")},
            {"id": "p2", "image": None}, {"id": "p3", "image": big}, {"id": "p4", "image": b"\x89PNG not really"},
            {"id": "p5", "image": b"x" * 20_000}]
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "pic.gif").write_bytes(picture(3, "GIF"))
    table = pa.table({"id": [r["id"] for r in rows], "image": pa.array([r["image"] for r in rows], pa.binary())})
    pq.write_table(table, tmp_path / "images.parquet", row_group_size=4)
    pq.write_table(pa.table({"id": ["p6"], "image": ["nested/pic.gif"]}), tmp_path / "paths.parquet")
    caps = ImageInput(max_bytes=15_000, max_pixels=60 * 60, root=tmp_path)
    _run(bundle, tmp_path / "out", (tmp_path / "images.parquet", tmp_path / "paths.parquet"),
         columns=Columns("image", "id"), images=caps)
    got = output(tmp_path / "out")
    assert got.column("id").to_pylist() == ["p0", "p1", "p6"]
    expected = reference(model, source, [rows[0]["image"], rows[1]["image"], picture(3, "GIF")])
    np.testing.assert_allclose(vectors(got), expected, atol=TOLERANCE, rtol=0)
    reasons = {r["id"]: r["reason"] for r in rejects(tmp_path / "out")}
    assert reasons["p2"] == "missing image" and reasons["p4"].startswith("invalid_image: ")
    assert reasons["p3"].startswith("image_too_large: the image has 69 x 65")
    assert reasons["p5"].startswith("image_too_large: the image has 20000 bytes")
    assert "--max-image-bytes" in reasons["p5"] and " at 0x" not in reasons["p4"]


def test_a_rerun_after_a_kill_resumes_from_the_recorded_parts(vit: Any, tmp_path: Path) -> None:
    """The state a kill leaves (one part recorded, a second written but not recorded, a temporary file): the re-run
    redoes the rest, part for part equal to an uninterrupted run; a changed folder is another job."""
    _, bundle, _ = vit
    images = folder(tmp_path / "images")
    _run(bundle, tmp_path / "whole", (images,), "images", part_rows=2)
    _run(bundle, tmp_path / "killed", (images,), "images", part_rows=2)
    state = json.loads((tmp_path / "killed" / "_job.json").read_text())
    (tmp_path / "killed" / "_job.json").write_text(json.dumps({**state, "parts": state["parts"][:1], "done": False}))
    (tmp_path / "killed" / "part-00003.parquet").unlink()
    (tmp_path / "killed" / ".part-abc.tmp").write_bytes(b"half a part")
    summary = _run(bundle, tmp_path / "killed", (images,), "images", part_rows=2)
    assert summary.rows == 7 and summary.parts == 4
    for index in range(4):
        name = f"part-{index:05d}.parquet"
        assert pq.read_table(tmp_path / "killed" / name).equals(pq.read_table(tmp_path / "whole" / name)), name
    assert rejects(tmp_path / "killed") == rejects(tmp_path / "whole")
    (images / "z.png").write_bytes(picture(7, "PNG"))
    with pytest.raises(JobError, match=r"different job \(changed: inputs\)"):
        _run(bundle, tmp_path / "killed", (images,), "images", part_rows=2)


def test_cli_embeds_a_folder_and_refuses_what_is_for_texts(vit: Any, tiny_bundle: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, bundle, _ = vit
    images = folder(tmp_path / "images")
    common = ["--bundle", str(bundle), "--intra-op-threads", "1"]
    assert main([*common, "--images", str(images), "--out", str(tmp_path / "out")]) == 0
    assert "7 rows (5 written, 2 rejected)" in capsys.readouterr().out
    np.testing.assert_allclose(np.linalg.norm(vectors(output(tmp_path / "out")), axis=1), 1.0, atol=1e-6)
    refusals = [
        ([*common, "--images", str(images), str(images / "a.png")], "not with INPUT"),
        ([*common, "--images", str(images), "--id-column", "id"], "not with --id-column"),
        ([*common, "--images", str(images), "--chunking", "mean"], "--chunking: for texts, not images"),
        ([*common, "--images", str(images), "--classify"], "has no classification head"),
        ([*common, str(tmp_path / "x.parquet"), "--image-column", "image", "--text-column", "text"], "--text-column"),
        ([*common, "--image-root", str(images), str(tmp_path / "x.parquet")], "--image-root goes with"),
        ([*common, "--images", str(images), "--ray"], "runs on one machine"),
        (["--bundle", str(tiny_bundle), "--images", str(images)], "reads texts, not images"),
        (common, "give INPUT files"),
    ]
    for argv, message in refusals:
        assert main([*argv, "--out", str(tmp_path / "refused")]) == 2, argv
        error = capsys.readouterr().err
        assert message in error and "Traceback" not in error, (argv, error)


def test_a_clip_pairs_images_go_to_its_image_tower(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """The pair's image tower embeds the images (get_image_features), under the pair's fingerprint."""
    source, bundle = shared_bundle(tmp_path_factory, "clip")
    model = reference_model("clip", source)
    images = tmp_path / "images"
    images.mkdir()
    for index, fmt in enumerate(("PNG", "JPEG", "WEBP")):
        (images / f"{index}.{fmt.lower()}").write_bytes(picture(index, fmt))
    _run(bundle, tmp_path / "out", (images,), "images")
    table = output(tmp_path / "out")
    ids = table.column("id").to_pylist()
    expected = reference(model, source, [(images / name).read_bytes() for name in ids], clip=True)
    np.testing.assert_allclose(vectors(table), expected, atol=TOLERANCE, rtol=0)
    pair = load_bundle(bundle, LoadOptions(intra_op_threads=1), kinds=("fast",))
    metadata = pq.read_schema(tmp_path / "out" / "part-00000.parquet").metadata
    assert metadata[FINGERPRINT_KEY].decode() == pair.fingerprint
