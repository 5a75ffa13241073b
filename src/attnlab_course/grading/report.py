"""What the grader prints and writes: the per-submission table, the batch summary and the CSV."""

from __future__ import annotations

import csv
import os
import re
import stat

from .runner import STATUSES, Report

# control characters, line and paragraph separators, zero-width and bidirectional marks, and lone surrogates (the
# undecodable bytes of a file name)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_FORMULA_START = ("=", "+", "-", "@")


def _escape(match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    if "\udc80" <= char <= "\udcff":  # a byte that was not UTF-8
        return f"\\x{ord(char) - 0xdc00:02x}"
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def one_line(text) -> str:
    """Learner-derived text shown on one line: a newline as ``\\n``, every other control character (escape
    sequences, carriage returns, backspaces, bidirectional overrides, undecodable bytes) escaped alike."""
    return _CONTROL.sub(_escape, str(text))


def clean(text) -> str:
    """A message of several lines made safe for a terminal or a file: each line as :func:`one_line` shows it."""
    return "\n".join(one_line(line) for line in str(text).split("\n"))


def csv_cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text, on one line, prefixed with ' when it starts like a formula."""
    text = one_line(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def refuse_unsafe_output(path) -> str | None:
    """Why the grader will not write to ``path`` (a link, a FIFO, a device or a folder), else None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link; the grader does not write through links (remove it or pick another name)"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file (a folder, FIFO or device); pick another name"
    return None


def open_output(path):
    """``path`` opened for writing text without following a link or waiting on a FIFO (OSError otherwise)."""
    why = refuse_unsafe_output(path)
    if why:
        raise OSError(why)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since the check
            raise OSError(f"{path} is not a regular file")
        os.ftruncate(fd, 0)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return open(fd, "w", newline="", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def format_report(report: Report) -> str:
    """The per-exercise table printed by ``attnlab-check``."""
    lines = [one_line(report.path) + (f"  (notebook {one_line(report.notebook)})" if report.notebook else "")]
    if report.problem:
        return "\n".join(lines + [f"  cannot grade: {one_line(report.problem)}"])
    width = max([len("exercise")] + [len(r.exercise) for r in report.results])
    lines.append(f"  {'exercise':<{width}}  {'result':<13}  details")
    for r in report.results:
        message = clean(r.message).splitlines() or [""]
        lines.append(f"  {r.exercise:<{width}}  {r.status:<13}  {message[0]}".rstrip())
        lines += [f"  {'':<{width}}  {'':<13}  {m}".rstrip() for m in message[1:]]
    lines += [f"  note: {one_line(n)}" for n in report.notes]
    n_passed = sum(r.status == "passed" for r in report.results)
    lines.append(f"{n_passed} of {len(report.results)} exercises passed.")
    return "\n".join(lines)


def _exercise_key(ex_id: str):
    return tuple(int(p) for p in ex_id.split("."))


def write_csv(reports: list[Report], path, scheme=None, roster=None) -> None:
    """One row per submission, one column per exercise.

    ``learner`` is the roster's id for the file (:mod:`.points`), else the file name without its suffix. With a
    points scheme, ``points`` and ``max points`` follow ``total``: a passed exercise earns its points."""
    exercises = sorted({r.exercise for rep in reports for r in rep.results}, key=_exercise_key)
    with open_output(path) as f:
        writer = csv.writer(f)
        point_columns = ["points", "max points"] if scheme is not None else []
        writer.writerow(["learner", "file", "notebook", "passed", "total", *point_columns, *exercises, "details"])
        for rep in reports:
            status = {r.exercise: r.status for r in rep.results}
            details = [f"{r.exercise} {r.status}: {r.message.splitlines()[0]}" for r in rep.results
                       if r.status != "passed" and r.message]
            details = [rep.problem] if rep.problem else details + rep.notes
            learner = roster.learner(rep.path.name).id if roster is not None else rep.path.stem
            points = []
            if scheme is not None:
                weights = scheme.points(rep.notebook) if rep.notebook and not rep.problem else {}
                earned = sum(weights.get(r.exercise, 0) for r in rep.results if r.status == "passed")
                points = [f"{earned:g}", f"{sum(weights.values()):g}"] if weights else ["", ""]
            row = [learner, rep.path.name, rep.notebook, sum(r.status == "passed" for r in rep.results),
                   len(rep.results), *points, *(status.get(e, "") for e in exercises), " | ".join(details)]
            writer.writerow([csv_cell(v) for v in row])


def format_summary(reports: list[Report], seconds: float | None, jobs: int | None) -> str:
    """Counts per exercise and status, then the files that could not be graded (``seconds`` None: a merge)."""
    graded = [r for r in reports if not r.problem]
    exercises = sorted({r.exercise for rep in graded for r in rep.results}, key=_exercise_key)
    lines = [f"Graded {len(graded)} of {len(reports)} submissions in {seconds:.0f} s ({jobs} at a time)."
             if seconds is not None else f"Merged: {len(graded)} of {len(reports)} submissions graded."]
    if exercises:
        width = max(len("exercise"), *(len(e) for e in exercises))
        lines.append(f"  {'exercise':<{width}}" + "".join(f"  {s:>13}" for s in STATUSES))
        for e in exercises:
            counts = [sum(r.exercise == e and r.status == s for rep in graded for r in rep.results) for s in STATUSES]
            lines.append(f"  {e:<{width}}" + "".join(f"  {c:>13}" for c in counts))
        lines.append(f"All exercises passed: {sum(r.passed for r in graded)} of {len(graded)} learners.")
    for rep in reports:
        if rep.problem:
            lines.append(f"Could not grade {one_line(rep.path.name)}: {one_line(rep.problem)}")
    return "\n".join(lines)


