"""A corpus job of texts on an image bundle: an image model embeds images (--images DIR, --image-column:
tests/jobs/test_image_corpus.py), so texts sent to one are refused in one line naming the image flags, exit status 2,
no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.cli import main
from tests.helpers.vision import shared_bundle


def test_texts_on_an_image_model_are_refused_in_one_line(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, bundle = shared_bundle(tmp_path_factory, "vit-small")
    (tmp_path / "texts.txt").write_text("a caption\n")
    status = main(["--bundle", str(bundle), "--out", str(tmp_path / "out"), "--intra-op-threads", "1",
                   str(tmp_path / "texts.txt")])
    error = capsys.readouterr().err
    assert status == 2 and "is an image model" in error and "--images DIR" in error and "Traceback" not in error
