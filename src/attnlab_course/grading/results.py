"""A batch's results as one JSON file (``--results FILE``), so that shards graded apart can be merged.

``attnlab-check --batch DIR --shard K/N --results shard-K.json`` writes the reports of its share of DIR;
``attnlab-check merge shard-*.json --csv ... --feedback ... --export ...`` reads every shard's file and writes what
one batch over DIR would have written (:mod:`.outputs` writes both). A file holds, per submission, its file name,
notebook, the grader's verdicts (encoded by the protocol module, as the record is), notes, problem and the learner's
exercise code; never timings, which differ from run to run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from attnlab.exercises import _protocol, _wire
from attnlab.exercises._protocol import Verdict

from .report import open_output
from .runner import Report

FORMAT = "attnlab-check results 1"


_SHARD = re.compile(r"([1-9][0-9]*)/([1-9][0-9]*)")


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` as ``(K, N)`` with 1 <= K <= N, else ValueError naming what was expected."""
    match = _SHARD.fullmatch(text.strip())
    if not match or not int(match.group(1)) <= int(match.group(2)):
        raise ValueError(f"expected K/N with 1 <= K <= N (e.g. 2/8), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def shard_of(name: str, n: int) -> int:
    """The shard (1..n) a submission's file name belongs to: a hash of its bytes, the same on every machine."""
    digest = hashlib.sha256(os.fsencode(name)).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


class ResultsError(ValueError):
    """A results file that is not one, or shards that do not make up one batch."""


def report_to_data(report: Report) -> dict:
    return {"file": report.path.name, "notebook": report.notebook, "problem": report.problem, "notes": report.notes,
            "results": [_protocol.part_to_data(r) for r in report.results], "code": report.code}


def report_from_data(item, where: str) -> Report:
    try:
        name = item["file"]
        if not isinstance(name, str) or Path(name).name != name or name in ("", "..", "."):
            raise ResultsError(f"{where}: a submission's file is not a plain file name: {item['file']!r}")
        results = [_protocol.part_from_data(Verdict, r) for r in item["results"]]
        code = {str(k): str(v) for k, v in item["code"].items()}
        notes = [str(n) for n in item["notes"]]
        return Report(Path(item["file"]), str(item["notebook"]), results, notes, str(item["problem"]), code=code)
    except (KeyError, TypeError, AttributeError, _wire.WireError) as exc:
        raise ResultsError(f"{where}: not a submission's results ({type(exc).__name__}: {exc})") from None


def write(reports: list[Report], path, shard: tuple[int, int] = (1, 1), folder_size: int | None = None) -> None:
    """Write ``reports`` (shard ``K/N`` of a folder of ``folder_size`` entries) to ``path``."""
    data = {"format": FORMAT, "shard": list(shard), "folder_size": folder_size if folder_size is not None
            else len(reports), "submissions": [report_to_data(r) for r in reports]}
    with open_output(path) as f:
        json.dump(data, f, indent=1, sort_keys=True)  # ASCII: a name's undecodable bytes survive
        f.write("\n")


def read(path) -> tuple[tuple[int, int], int, list[Report]]:
    """``((K, N), folder_size, reports)`` of a results file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: not a results file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ResultsError(f"{path}: not a results file of this grader (expected format {FORMAT!r})")
    shard = data.get("shard")
    if not (isinstance(shard, list) and len(shard) == 2 and all(isinstance(x, int) for x in shard)
            and 1 <= shard[0] <= shard[1]):
        raise ResultsError(f"{path}: expected a shard [K, N] with 1 <= K <= N, got {shard!r}")
    if not isinstance(data.get("folder_size"), int) or not isinstance(data.get("submissions"), list):
        raise ResultsError(f"{path}: expected folder_size and a list of submissions")
    reports = [report_from_data(item, f"{path}, submission {i + 1}") for i, item in enumerate(data["submissions"])]
    return (shard[0], shard[1]), data["folder_size"], reports


def merge(paths) -> list[Report]:
    """The reports of every shard ``1..N`` of one folder, in the order one batch lists them (by file name).

    Refuses a missing, repeated or foreign shard, and a file graded in two shards."""
    shards, sizes, reports = {}, set(), {}
    for path in paths:
        (k, n), size, found = read(path)
        if k in shards and shards[k][1] == n:
            raise ResultsError(f"{path}: shard {k}/{n} is also in {shards[k][0]}")
        shards[k] = (path, n)
        sizes.add((n, size))
        for rep in found:
            if rep.path.name in reports:
                raise ResultsError(f"{path}: {rep.path.name!r} was graded in two shards")
            reports[rep.path.name] = rep
    if len(sizes) != 1:
        raise ResultsError(f"the files are shards of different splits or folders: (N, folder size) {sorted(sizes)}")
    (n, size), = sizes
    missing = sorted(set(range(1, n + 1)) - set(shards))
    if missing:
        raise ResultsError(f"expected shards 1..{n}, missing {', '.join(f'{k}/{n}' for k in missing)}")
    if len(reports) != size:
        raise ResultsError(f"the shards hold {len(reports)} submissions, their folder had {size}")
    return [reports[name] for name in sorted(reports)]
