"""Two processes making the same bundle in one cache at once (pods' init steps on one shared volume, two servers
started together): the second waits on the first's lock (hub.cache.making) and finds the bundle made, exporting
nothing, instead of exporting beside it from the same downloads (which the first removes when it is done).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bundle.verify import verify_bundle

pytestmark = pytest.mark.slow


def pull(source: Path, cache: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "attnserve", "pull", str(source), "--variants", "fp32", "--cache-dir", str(cache)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_pull_waits_for_the_first_and_exports_nothing(tmp_path):
    from tests.helpers.families import save_hf

    save_hf(tmp_path / "tiny", "bert")
    cache = tmp_path / "cache"
    first = pull(tmp_path / "tiny", cache)
    deadline = time.monotonic() + 180
    while not [p for p in cache.rglob(".*.tmp-*") if p.is_dir()]:  # the first is exporting, under the lock
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = pull(tmp_path / "tiny", cache)
    (out1, err1), (out2, err2) = first.communicate(timeout=300), second.communicate(timeout=300)
    assert (first.returncode, second.returncode) == (0, 0), (err1, err2)
    assert out1 == out2 and verify_bundle(Path(out1.strip()))
    assert "another process is making" in err2 and "bundle written to" in err1
    assert "bundle written to" not in err2 and "exported" not in err2  # it waited, then found the bundle
