"""Reliability tests.

Most run in CI (`make test`) and assert only what the code decides. Tests marked `reliability` are the
wall-clock limit checks: deselected in CI, run by `make reliability` (tests/reliability/figures.py).
ATTNSERVE_RELIABILITY_FULL=1 (set by `make reliability` for test_schema_fuzz.py) selects the full fuzzing budget.
"""

import os

FULL = os.environ.get("ATTNSERVE_RELIABILITY_FULL") == "1"
