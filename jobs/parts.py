"""The output directory of a job: numbered Parquet parts, rejects beside them, and `_job.json`, which makes a
re-run resume exactly.

    OUT/part-00000.parquet      rows [0, P) of the input (less their rejects), in input order
    OUT/part-00001.parquet      rows [P, 2P) ...
    OUT/_rejects/part-00001.jsonl   {row, id, reason} per bad row of that part (only parts that have some)
    OUT/_job.json               the job's fingerprint, one record per finished part, and the summary

Names starting with `_` or `.` are skipped by Parquet dataset readers (pyarrow, Spark, Ray), so OUT reads as
one table. A part is written to a hidden temporary name and renamed into place, and only then recorded in
`_job.json` (itself replaced atomically); so after a kill at any point, the parts `_job.json` lists are
complete, and a re-run with the same fingerprint redoes only what follows them. Leftovers of the killed run
(temporary files, a part written but not yet recorded) are removed before it goes on.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bundle.files import write_text_atomic, written_whole
from jobs.options import JobError

STATE = "_job.json"
REJECTS = "_rejects"
PART = "part-{:05d}.parquet"


@dataclass
class PartRecord:
    rows: int  # input rows of this part, rejects included
    written: int
    rejected: int
    tokens: int
    seconds: float  # wall clock: reading, embedding and writing the part
    cpu_seconds: float = 0.0  # this process's CPU time (all threads) for the same


@dataclass
class JobState:
    fingerprint: str
    args: dict[str, Any]
    parts: list[PartRecord] = field(default_factory=list)
    done: bool = False

    def save(self, out: Path) -> None:
        write_text_atomic(out / STATE, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, out: Path) -> JobState | None:
        path = out / STATE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return cls(raw["fingerprint"], raw["args"], [PartRecord(**p) for p in raw["parts"]], raw["done"])

    def totals(self) -> PartRecord:
        return PartRecord(*(sum(getattr(p, name) for p in self.parts) for name in PartRecord.__dataclass_fields__))


def fingerprint(args: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()


def prepare(out: Path, args: dict[str, Any], overwrite: bool) -> JobState:
    """The state to go on from: the recorded one when `args` match, a fresh one with --overwrite or a new OUT."""
    out.mkdir(parents=True, exist_ok=True)
    state = JobState.load(out)
    if overwrite:
        clear(out)
        state = None
    elif state is None and any(_ours(p) or not p.name.startswith((".", "_")) for p in out.iterdir()):
        raise JobError(f"{out} already holds files that no attnserve embed job recorded; use --overwrite "
                       "or another --out")
    elif state is not None and state.fingerprint != fingerprint(args):
        changed = sorted(k for k in set(args) | set(state.args) if args.get(k) != state.args.get(k))
        raise JobError(f"{out} holds the output of a different job (changed: {', '.join(changed)}); re-run with "
                       "the same arguments to resume, or use --overwrite to start afresh")
    state = state or JobState(fingerprint(args), args)
    _remove_unrecorded(out, len(state.parts))
    state.save(out)
    return state


def write_part(out: Path, index: int, table: pa.Table, rejects: list[dict[str, Any]]) -> None:
    """The part's rejects, then the part itself, each written whole under a temporary name and renamed."""
    if rejects:
        (out / REJECTS).mkdir(exist_ok=True)
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rejects)
        write_text_atomic(out / REJECTS / PART.format(index).replace(".parquet", ".jsonl"), text)
    with written_whole(out / PART.format(index)) as tmp:
        pq.write_table(table, tmp)


def clear(out: Path) -> None:
    """Remove what a job writes into OUT (and nothing else)."""
    for path in out.iterdir():
        if _ours(path):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _ours(path: Path) -> bool:
    """Parts (ours, or a Ray run's differently named files), the state, the rejects, temporary files."""
    name = path.name
    return name.endswith(".parquet") or name in (STATE, REJECTS) or name.startswith((".part-", f".{STATE}."))


def _is_part(path: Path) -> bool:
    return path.name.startswith("part-") and path.name.endswith(".parquet")


def _remove_unrecorded(out: Path, recorded: int) -> None:
    """Temporary files and parts (with their rejects) that a killed run left beyond the recorded ones."""
    for path in out.iterdir():
        temporary = path.name.startswith((".part-", f".{STATE}."))
        if temporary or (_is_part(path) and _index(path) >= recorded):
            path.unlink()
    rejects = out / REJECTS
    for path in rejects.iterdir() if rejects.is_dir() else []:
        if path.name.startswith(".") or _index(path) >= recorded:
            path.unlink()


def _index(path: Path) -> int:
    return int(path.name.split(".")[0].removeprefix("part-"))
