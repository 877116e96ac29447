"""Reliability tests. ATTNSERVE_RELIABILITY_FULL=1 (`make reliability`) runs the full budgets; CI the smaller ones."""

import os

FULL = os.environ.get("ATTNSERVE_RELIABILITY_FULL") == "1"
