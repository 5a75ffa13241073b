"""What the grader prints and writes: the per-submission table, the batch summary and the CSV."""

from __future__ import annotations

import csv
import re

from .runner import STATUSES, Report

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def clean(text) -> str:
    """Learner-derived text made safe for a terminal or a file: every control character but newline and tab
    removed (escape sequences, carriage returns, backspaces, bidirectional overrides)."""
    return _CONTROL.sub("", str(text))


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text: cleaned, and prefixed with ' when it starts like a formula."""
    text = clean(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def format_report(report: Report) -> str:
    """The per-exercise table printed by ``attnlab-check``."""
    lines = [clean(report.path) + (f"  (notebook {clean(report.notebook)})" if report.notebook else "")]
    if report.problem:
        return "\n".join(lines + [f"  cannot grade: {clean(report.problem)}"])
    width = max([len("exercise")] + [len(r.exercise) for r in report.results])
    lines.append(f"  {'exercise':<{width}}  {'result':<13}  details")
    for r in report.results:
        message = clean(r.message).splitlines() or [""]
        lines.append(f"  {r.exercise:<{width}}  {r.status:<13}  {message[0]}".rstrip())
        lines += [f"  {'':<{width}}  {'':<13}  {m}".rstrip() for m in message[1:]]
    lines += [f"  note: {clean(n)}" for n in report.notes]
    n_passed = sum(r.status == "passed" for r in report.results)
    lines.append(f"{n_passed} of {len(report.results)} exercises passed.")
    return "\n".join(lines)


def _exercise_key(ex_id: str):
    return tuple(int(p) for p in ex_id.split("."))


def write_csv(reports: list[Report], path) -> None:
    """One row per learner (the file name without its suffix), one column per exercise."""
    exercises = sorted({r.exercise for rep in reports for r in rep.results}, key=_exercise_key)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["learner", "file", "notebook", "passed", "total", *exercises, "details"])
        for rep in reports:
            status = {r.exercise: r.status for r in rep.results}
            details = [f"{r.exercise} {r.status}: {r.message.splitlines()[0]}" for r in rep.results
                       if r.status != "passed" and r.message]
            details = [rep.problem] if rep.problem else details + rep.notes
            row = [rep.path.stem, rep.path.name, rep.notebook, sum(r.status == "passed" for r in rep.results),
                   len(rep.results), *(status.get(e, "") for e in exercises), " | ".join(details)]
            writer.writerow([csv_cell(v) for v in row])


def format_summary(reports: list[Report], seconds: float, jobs: int) -> str:
    """Counts per exercise and status, then the files that could not be graded."""
    graded = [r for r in reports if not r.problem]
    exercises = sorted({r.exercise for rep in graded for r in rep.results}, key=_exercise_key)
    lines = [f"Graded {len(graded)} of {len(reports)} submissions in {seconds:.0f} s ({jobs} at a time)."]
    if exercises:
        width = max(len("exercise"), *(len(e) for e in exercises))
        lines.append(f"  {'exercise':<{width}}" + "".join(f"  {s:>13}" for s in STATUSES))
        for e in exercises:
            counts = [sum(r.exercise == e and r.status == s for rep in graded for r in rep.results) for s in STATUSES]
            lines.append(f"  {e:<{width}}" + "".join(f"  {c:>13}" for c in counts))
        lines.append(f"All exercises passed: {sum(r.passed for r in graded)} of {len(graded)} learners.")
    for rep in reports:
        if rep.problem:
            lines.append(f"Could not grade {clean(rep.path.name)}: {clean(rep.problem)}")
    return "\n".join(lines)


