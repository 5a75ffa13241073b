"""What the trusted side of a grading tells the runner: a file of JSON lines, appended and flushed as things happen.

:mod:`.nbval_hooks` writes it from the grader's pytest process; :mod:`.runner` reads it when that process has ended,
or was stopped by its deadline (every line written before counts). A line is one of

* ``{"kind": "cell", "exercise": "2.1" | null}``: a cell of the grading notebook started (of an exercise, or one of
  the notebook's own cells); the last one says where a run that stopped abruptly was;
* ``{"kind": "verdict", ...}``: the one :class:`~attnlab.exercises._protocol.Verdict` of an exercise, as the
  protocol encodes it; the first verdict of an exercise counts;
* ``{"kind": "note", "text": ...}``: something to tell the learner that is no exercise's verdict;
* ``{"kind": "stopped", "exercise": "2.1" | null}``: the kernel stopped during this cell; the runner grades the
  exercises after it in a run of their own;
* ``{"kind": "broken", "text": ...}``: nbval could not run the notebook at all (not the learner's doing).

Only verdicts decide results: the runner copies them, and adds one of its own only for what the trusted side could
not see, its own process stopped (by the deadline, or by a crash).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from attnlab.exercises import _protocol, _wire
from attnlab.exercises._protocol import Verdict

_lock = threading.Lock()


def append(path, kind: str, **fields) -> None:
    """Append one line to the record at ``path`` (thread-safe; the file is closed, so flushed, at once)."""
    with _lock, open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"kind": kind, **fields}) + "\n")


def append_verdict(path, verdict: Verdict) -> None:
    append(path, "verdict", **_protocol.part_to_data(verdict))


@dataclass
class Record:
    """What a record file says."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    last_cell: str | None = None  # the exercise of the last cell that started (None: one of the notebook's own)
    cells: int = 0  # cells started
    stopped: bool = False  # the kernel stopped during a cell
    stopped_in: str | None = None  # ... of this exercise (None: one of the notebook's own cells)
    broken: str = ""  # why nbval could not run the notebook


def read(lines) -> Record:
    """The :class:`Record` of a record file's lines; malformed lines (a run stopped while writing one) are skipped."""
    record = Record()
    for line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(item, dict):
            continue
        kind = item.get("kind")
        exercise = item.get("exercise") if isinstance(item.get("exercise"), str) else None
        if kind == "verdict":
            try:
                verdict = _protocol.part_from_data(Verdict, item)
            except _wire.WireError:
                continue
            record.verdicts.setdefault(verdict.exercise, verdict)
        elif kind == "cell":
            record.cells += 1
            record.last_cell = exercise
        elif kind == "note" and isinstance(item.get("text"), str):
            record.notes.append(item["text"])
        elif kind == "stopped" and not record.stopped:
            record.stopped, record.stopped_in = True, exercise
        elif kind == "broken" and isinstance(item.get("text"), str):
            record.broken = record.broken or item["text"]
    return record
