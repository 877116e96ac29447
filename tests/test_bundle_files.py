"""bundle/files.py: the one sha256 helper and the one atomic replacement of a file or a directory."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bundle import files
from bundle.files import sha256_file, staged_directory, write_text_atomic


def test_sha256_matches_hashlib_across_block_boundaries(tmp_path: Path) -> None:
    data = bytes(range(256)) * 5000  # 1.28 MB: more than one 1 MiB block
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def _make(target: Path, text: str) -> None:
    with staged_directory(target) as tmp:
        (tmp / "a.txt").write_text(text)


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "rename-aside"])
def test_staged_directory_replaces_whole_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool,
) -> None:
    if exchange:  # Linux: the exchange must be what replaces the directory, not the fallback
        monkeypatch.setattr(files, "_rename_aside_then_in", lambda a, b: pytest.fail("fallback used"))
    else:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    target = tmp_path / "out"
    _make(target, "one")
    (target / "stale.txt").write_text("from the old directory")
    _make(target, "two")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"] and (target / "a.txt").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging or old directory left beside it
    assert oct(target.stat().st_mode & 0o777) == oct(0o755)


def test_failed_build_leaves_the_old_directory_untouched(tmp_path: Path) -> None:
    target = tmp_path / "out"
    _make(target, "one")
    with pytest.raises(RuntimeError), staged_directory(target) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("export failed")
    assert (target / "a.txt").read_text() == "one" and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_failed_second_rename_puts_the_old_directory_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out"
    _make(target, "one")
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    real_rename = Path.rename

    def rename(self: Path, to: Path) -> Path:
        if self.name.startswith(".out.tmp-"):
            raise OSError("disk gone")
        return real_rename(self, to)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="disk gone"):
        _make(target, "two")
    assert (target / "a.txt").read_text() == "one"


def test_write_text_atomic_replaces_content_and_is_world_readable(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text("old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
