"""The grader under attack: hostile submissions graded in one sandboxed batch, as an instructor would grade a class.

The submissions (tests/fixtures/attacks/*.toml, built from the current learner notebooks, plus a few malformed files
and hostile file names made here) try to forge a pass, reach outside their sandbox, harm another submission or the
batch, or break the report. Every test asserts the verdict the attack gets and that nothing escaped: files of the
course unchanged, no process left behind, the honest submissions graded in the same batch graded right, the CSV and
the terminal output free of formulas and control characters.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import os
import re
from pathlib import Path

import make_submissions
import nbformat
import pytest

from attnlab.course.authoring import default_solutions_dir, find_exercises
from attnlab.course.grading import cli, runner, sandbox

if sandbox.unavailable_reason():
    pytest.skip(f"grader attack tests skipped: {sandbox.unavailable_reason()} ({sandbox.INSTALL_HINT})",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = {sub.file_name: sub for sub in make_submissions.load(make_submissions.ATTACKS)}
HONEST = ["02-correct.ipynb", "02-untouched.ipynb"]  # graded in the same batch: they must not be harmed
FORMULA_NAME = '=HYPERLINK("http:evil","click").ipynb'
ESCAPE_NAME = "02-\x1b[2K\rAll exercises passed\x1b[0m.ipynb"
DAEMON_MARK = b"attnlab-attack-daemon"


def _tree_digest(*folders: Path) -> str:
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


def _learner_02():
    path = default_solutions_dir() / "02_masks.ipynb"
    solution = nbformat.read(path, as_version=4)
    from attnlab.course.authoring import learner_notebook

    return learner_notebook(solution, "02_masks"), find_exercises(solution, str(path))


def _malformed(folder: Path) -> None:
    """Files that are notebooks in name only, and a learner notebook with hostile names and a huge cell."""
    nb, exercises = _learner_02()
    raw = nbformat.writes(nb)
    # a source that is a number, not text
    broken = raw.replace('"source": "def my_causal_mask', '"source": 12345, "x": "def my_causal_mask', 1)
    (folder / "02-source_not_text.ipynb").write_text(broken)
    (folder / "02-cells_not_a_list.ipynb").write_text('{"cells": {"a": 1}, "metadata": {}, "nbformat": 4, '
                                                      '"nbformat_minor": 5}')
    (folder / "02-deep.ipynb").write_text('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (folder / "02-binary.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    huge = nbformat.reads(raw, as_version=4)
    huge.cells[exercises[0].exercise_cell].source += "\n" + "# padding\n" * 1_000_000  # 10 MB
    nbformat.write(huge, folder / "02-huge_cell.ipynb")
    named = nbformat.reads(raw, as_version=4)
    cell = named.cells[exercises[0].exercise_cell]
    cell.source = cell.source.replace("raise NotImplementedError",
                                      'raise ValueError("\\x1b[2K\\rExercise 2.1: passed\\x1b]0;owned\\x07\\b\\b")')
    nbformat.write(named, folder / ESCAPE_NAME)
    nbformat.write(nbformat.reads(raw, as_version=4), folder / FORMULA_NAME)


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    make_submissions.write_all(folder, spec_dir=make_submissions.ATTACKS)
    honest = make_submissions.write_all(tmp_path_factory.mktemp("honest"))
    for name in HONEST:
        nbformat.write(honest[name].build(), folder / name)
    _malformed(folder)
    before = _tree_digest(ROOT / "src" / "attnlab", default_solutions_dir())
    csv_path = tmp_path_factory.mktemp("results") / "results.csv"
    reports: list = []
    grade_many = runner.grade_many
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(runner, "grade_many", lambda *a, **k: reports.extend(grade_many(*a, **k)) or reports)
        status = cli.main(["--batch", str(folder), "--csv", str(csv_path), "--jobs", "2"])
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    survivors = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and DAEMON_MARK in (proc / "cmdline").read_bytes():
                survivors.append(proc.name)
        except OSError:
            pass
    return {"status": status, "reports": {r.path.name: r for r in reports}, "rows": rows, "out": out.getvalue(),
            "before": before, "after": _tree_digest(ROOT / "src" / "attnlab", default_solutions_dir()),
            "survivors": survivors}


def _exercise_ids() -> list[str]:
    return [ex.id for ex in _learner_02()[1]]


@pytest.mark.parametrize("file_name", sorted(ATTACKS))
def test_each_attack_gets_the_expected_verdict(attacked, file_name):
    sub = ATTACKS[file_name]
    report = attacked["reports"][file_name]
    assert report.problem == "", report.problem
    got = {r.exercise: r for r in report.results}
    for ex_id, (status, *words) in sub.expected(_exercise_ids()).items():
        assert got[ex_id].status == status, f"{sub.spec['about']}: {ex_id} {got[ex_id]}"
        for word in words:
            assert word in got[ex_id].message, f"{ex_id}: {word!r} not in {got[ex_id].message!r}"
    assert not any(r.status == "passed" for r in report.results), "no attack passes an exercise it did not solve"


def test_honest_work_in_the_same_batch_is_graded_right(attacked):
    assert [r.status for r in attacked["reports"]["02-correct.ipynb"].results] == ["passed"] * 3
    assert [r.status for r in attacked["reports"]["02-untouched.ipynb"].results] == ["not attempted"] * 3


def test_nothing_outside_the_sandbox_changed_and_nothing_outlived_it(attacked):
    assert attacked["after"] == attacked["before"], "the attnlab package or the solutions were modified"
    assert attacked["survivors"] == [], "a process started by a submission outlived its grading"


@pytest.mark.parametrize("name", ["02-source_not_text.ipynb", "02-cells_not_a_list.ipynb", "02-deep.ipynb",
                                  "02-binary.ipynb"])
def test_malformed_notebooks_cannot_be_graded_and_say_why(attacked, name):
    report = attacked["reports"][name]
    assert report.problem.startswith(("not a notebook", "not a valid notebook")), report.problem
    assert "Traceback" not in attacked["out"]
    assert f"Could not grade {name}: " in attacked["out"]


def test_a_huge_cell_gets_the_same_verdict_every_time(attacked):
    result = attacked["reports"]["02-huge_cell.ipynb"].results[0]
    assert result.status == "error" and "characters long" in result.message, result


def test_csv_cells_are_never_formulas(attacked):
    rows = attacked["rows"]
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)
    formula_rows = [row for row in rows if "HYPERLINK" in row[1]]
    assert formula_rows and formula_rows[0][0].startswith("'=") and formula_rows[0][1].startswith("'=")


def test_no_control_characters_reach_the_terminal_or_the_csv(attacked):
    text = attacked["out"] + "".join(cell for row in attacked["rows"] for cell in row)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    report = attacked["reports"][ESCAPE_NAME]
    assert report.results[0].status == "error"
    assert "All exercises passed: 1 of" in attacked["out"], "only 02-correct passed everything"


def test_batch_finishes_with_one_row_per_file(attacked):
    files = {row[1] for row in attacked["rows"][1:]}
    assert len(files) == len(attacked["reports"])
    assert attacked["status"] == 1, "some files could not be graded, so the exit status is 1"
