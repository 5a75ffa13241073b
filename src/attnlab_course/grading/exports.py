"""``--export canvas|moodle|gradescope``: the grades in the form each platform imports, following its documentation.

* **Canvas** (``canvas.csv``): the Gradebook import CSV. A header row ``Student, ID, SIS User ID, SIS Login ID,
  Section`` then one column per assignment (a notebook, titled as the points file says), a ``Points Possible`` row,
  then one row per learner; Canvas finds each learner by ``ID`` (the roster's ``id``), else by the SIS ids or the
  name, and creates an assignment for a column whose title it does not know. A blank cell leaves a grade as it is.
* **Moodle** (``moodle.csv``): the CSV grade import. One row per learner with ``ID number``, ``Email address`` and
  ``Full name``, and one column per assignment; on import, map ``ID number`` to *useridnumber* (or ``Email address``
  to *useremail*) and each assignment column to its grade item (or a new one).
* **Gradescope** (``gradescope/NAME.json``): one autograder ``results.json`` per submission: the total score, and
  one test per exercise with its score, maximum, status and the grader's full message. ``python -m
  attnlab_course.grading.gradescope`` writes the same file inside Gradescope's autograder (docs/grading-at-scale.md).

A learner with two graded submissions of one notebook is an error (the exports would have to pick one): the message
names the files. Cells that come from learners go through :func:`.report.csv_cell` (one line, never a formula).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .feedback import STATUS_TEXT, page_name
from .points import Roster, Scheme
from .report import csv_cell, open_output
from .runner import Report

FORMATS = ("canvas", "moodle", "gradescope")


class ExportError(ValueError):
    """The reports cannot be exported as they are (the message says why)."""


def score(report: Report, scheme: Scheme) -> tuple[float, float]:
    """``(earned, possible)`` points of one graded submission."""
    points = scheme.points(report.notebook)
    earned = sum(points.get(r.exercise, 0) for r in report.results if r.status == "passed")
    return earned, sum(points.values())


def _number(value: float) -> str:
    return f"{value:g}"


def gradebook(reports: list[Report], scheme: Scheme, roster: Roster):
    """``(notebooks, learners, scores)``: the notebooks graded, in order; each learner (roster id) once, in the
    order of their first submission; and ``scores[(learner id, notebook)] = earned``."""
    notebooks = sorted({r.notebook for r in reports if r.notebook and not r.problem})
    learners, scores, seen = {}, {}, {}
    for rep in reports:
        learner = roster.learner(rep.path.name)
        learners.setdefault(learner.id, learner)
        if rep.problem or not rep.notebook:
            continue
        key = (learner.id, rep.notebook)
        if key in seen:
            raise ExportError(f"learner {learner.id!r} has two submissions of {rep.notebook}: {seen[key]!r} and "
                              f"{rep.path.name!r}; keep one, or give them different ids in the roster")
        seen[key] = rep.path.name
        scores[key] = score(rep, scheme)[0]
    return notebooks, list(learners.values()), scores


def write_canvas(reports: list[Report], path, scheme: Scheme, roster: Roster) -> None:
    notebooks, learners, scores = gradebook(reports, scheme, roster)
    with open_output(path) as f:
        writer = csv.writer(f)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                         *(csv_cell(scheme.title(nb)) for nb in notebooks)])
        writer.writerow(["Points Possible", "", "", "", "",
                         *(_number(sum(scheme.points(nb).values())) for nb in notebooks)])
        for learner in learners:
            cells = [learner.name or learner.id, learner.id, learner.sis_user_id, learner.sis_login_id,
                     learner.section]
            grades = [_number(scores[(learner.id, nb)]) if (learner.id, nb) in scores else "" for nb in notebooks]
            writer.writerow([csv_cell(c) for c in cells] + grades)


def write_moodle(reports: list[Report], path, scheme: Scheme, roster: Roster) -> None:
    notebooks, learners, scores = gradebook(reports, scheme, roster)
    with open_output(path) as f:
        writer = csv.writer(f)
        writer.writerow(["ID number", "Email address", "Full name", *(csv_cell(scheme.title(nb)) for nb in notebooks)])
        for learner in learners:
            grades = [_number(scores[(learner.id, nb)]) if (learner.id, nb) in scores else "" for nb in notebooks]
            writer.writerow([csv_cell(learner.id), csv_cell(learner.email), csv_cell(learner.name), *grades])


def gradescope_results(report: Report, scheme: Scheme) -> dict:
    """The autograder ``results.json`` of one submission (Gradescope's documented output format)."""
    if report.problem or not report.notebook:
        return {"score": 0, "output": f"This file could not be graded: {report.problem}", "output_format": "text",
                "tests": []}
    points = scheme.points(report.notebook)
    tests = []
    for r in report.results:
        possible = points.get(r.exercise, 0)
        output = STATUS_TEXT[r.status] + (f"\n\n{r.message}" if r.message else "")
        tests.append({"name": f"Exercise {r.exercise}", "number": r.exercise,
                      "score": possible if r.status == "passed" else 0, "max_score": possible,
                      "status": "passed" if r.status == "passed" else "failed", "output": output,
                      "output_format": "text", "visibility": "visible"})
    earned, possible = score(report, scheme)
    passed = sum(r.status == "passed" for r in report.results)
    notes = "".join(f"\nNote: {n}" for n in report.notes)
    return {"score": earned, "output": f"{scheme.title(report.notebook)}: {passed} of {len(report.results)} "
                                      f"exercises passed, {_number(earned)} of {_number(possible)} points.{notes}",
            "output_format": "text", "test_output_format": "text", "visibility": "visible", "tests": tests}


def write_gradescope_file(report: Report, path, scheme: Scheme) -> None:
    with open_output(path) as f:
        json.dump(gradescope_results(report, scheme), f, indent=1, sort_keys=True)
        f.write("\n")


def write_gradescope(reports: list[Report], folder, scheme: Scheme) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for rep in reports:
        write_gradescope_file(rep, folder / (page_name(rep.path.name)[:-len(".html")] + ".json"), scheme)


def write(kind: str, reports: list[Report], folder, scheme: Scheme, roster: Roster) -> Path:
    """Write export ``kind`` into ``folder``; the path written (a file, or a folder for Gradescope)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "canvas":
        write_canvas(reports, folder / "canvas.csv", scheme, roster)
        return folder / "canvas.csv"
    if kind == "moodle":
        write_moodle(reports, folder / "moodle.csv", scheme, roster)
        return folder / "moodle.csv"
    if kind == "gradescope":
        write_gradescope(reports, folder / "gradescope", scheme)
        return folder / "gradescope"
    raise ValueError(f"expected an export format of {FORMATS}, got {kind!r}")
