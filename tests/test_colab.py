"""The Colab cell (``python -m attnlab_course.colab``): where it goes, that it is current, and that it does nothing
outside Colab. That its install command works against a built wheel is tested in tests/test_package.py; that it and
every other link follow pyproject.toml, in tests/test_release.py."""

from __future__ import annotations

import copy
import sys
import types

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from attnlab_course import authoring, colab
from attnlab_course.authoring import find_exercises, learner_notebook
from attnlab_course.grading import submission
from attnlab_course.grading import notebook as gradingnb
from test_environment import ROOT, tomllib

SOLUTIONS = authoring.solution_notebooks(ROOT / "notebooks" / "solutions")
SOURCES = [*SOLUTIONS, ROOT / "notebooks" / "00_start_here.ipynb"]  # what `--write` is run on
LEARNERS = [authoring.learner_path(p) for p in SOLUTIONS]  # they get the cell from their solution notebook


def _notebook():
    return new_notebook(cells=[
        new_markdown_cell("# Title\n\n**Time**: ..."),
        new_markdown_cell("More prose."),
        new_code_cell("import numpy as np"),
        new_markdown_cell("## A section"),
        new_code_cell("np.arange(3)"),
    ])


def test_the_cell_installs_this_release_from_the_repository():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    expected = f"attnlab @ git+{project['urls']['Repository']}@v{project['version']}"
    assert colab.requirement() == expected
    assert f'"{expected}"' in colab.cell_source()
    assert colab.requirement("https://example.org/fork/", "main") == "attnlab @ git+https://example.org/fork@main"


def test_the_cell_goes_before_the_first_code_cell_and_writing_twice_changes_nothing():
    nb = _notebook()
    before = copy.deepcopy(nb)
    once = colab.with_colab_cell(nb)
    assert [c.get("id") for c in once.cells][2] == colab.CELL_ID
    assert once.cells[2].metadata == {"attnlab": {"role": "colab"}} and once.cells[2].source == colab.cell_source()
    assert [c.source for i, c in enumerate(once.cells) if i != 2] == [c.source for c in nb.cells]  # the rest kept
    assert nbformat.writes(colab.with_colab_cell(once)) == nbformat.writes(once)
    assert colab.is_up_to_date(once) and not colab.is_up_to_date(nb)
    assert nb == before, "the notebook passed in is not modified"


def test_a_stale_or_misplaced_cell_is_replaced_keeping_its_id():
    nb = colab.with_colab_cell(_notebook(), colab.cell_source("attnlab @ git+https://example.org/r@v0.0.1"))
    nb.cells[2].id, nb.cells[2].execution_count = "abc", 1
    nb.cells.append(nb.cells.pop(2))  # moved to the end, and out of date
    nb.cells.append(copy.deepcopy(nb.cells[-1]))  # and duplicated
    fixed = colab.with_colab_cell(nb)
    cells = [c for c in fixed.cells if colab.is_colab_cell(c)]
    assert len(cells) == 1 and fixed.cells[2] is cells[0]
    assert (cells[0].id, cells[0].source, cells[0].execution_count) == ("abc", colab.cell_source(), None)


def test_writing_a_notebook_file_is_idempotent(tmp_path):
    path = tmp_path / SOURCES[0].name
    path.write_text(SOURCES[0].read_text(encoding="utf-8"), encoding="utf-8")
    colab.write([path])
    text = path.read_text(encoding="utf-8")
    assert colab.write([path]) == [] and path.read_text(encoding="utf-8") == text
    assert colab.main(["--check", str(path)]) == 0
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0] == nbformat.read(SOURCES[0], as_version=4).cells[0], "the header stays the first cell"
    assert sum(colab.is_colab_cell(c) for c in nb.cells) == 1


@pytest.mark.parametrize("path", SOURCES + LEARNERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_notebook_has_the_colab_cell_up_to_date(path):
    up_to_date = colab.is_up_to_date(nbformat.read(path, as_version=4))
    assert up_to_date, "the Colab cell is missing or stale: `make notebooks` writes it, re-executes, and regenerates"


def test_learner_and_grading_notebooks_keep_the_cell_first_and_as_is():
    solution = colab.with_colab_cell(nbformat.read(SOLUTIONS[0], as_version=4))
    cell = next(c for c in solution.cells if colab.is_colab_cell(c))
    learner = learner_notebook(solution, SOLUTIONS[0].stem)
    assert next(c for c in learner.cells if colab.is_colab_cell(c)) == cell
    exercises = find_exercises(solution)
    assert [e.id for e in exercises] == [e.id for e in find_exercises(nbformat.read(SOLUTIONS[0], as_version=4))]
    cells = submission.learner_exercise_cells(learner, solution, exercises)
    graded = gradingnb.grading_notebook(solution, exercises, cells)
    assert graded.cells[0].source == cell.source and graded.cells[0].outputs == []


def test_outside_colab_the_cell_prints_imports_and_runs_nothing():
    """Run in a real kernel: no output, no new module, no process started (an audit hook watches)."""
    from nbclient import NotebookClient

    watch = ("import sys\nstarted = []\nsys.addaudithook(lambda event, args: started.append(event) if event in "
             "('subprocess.Popen', 'os.system', 'os.exec', 'os.posix_spawn', 'os.spawn') else None)\n"
             "before = set(sys.modules)")
    report = "print(started, sorted(set(sys.modules) - before - {'google'}))"
    nb = new_notebook(cells=[new_code_cell(watch), new_code_cell(colab.cell_source()), new_code_cell(report)])
    NotebookClient(nb, timeout=60, kernel_name="python3",
                   kernel_manager_class=authoring._current_env_kernel_manager()).execute()
    assert nb.cells[1].outputs == []
    assert [o.get("text") for o in nb.cells[2].outputs] == ["[] []\n"]


def test_on_colab_the_cell_pip_installs_the_release_and_enables_the_widget_manager(monkeypatch):
    calls = []
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: calls.append("widgets")
    google_colab = types.ModuleType("google.colab")
    google_colab.output = output
    monkeypatch.setitem(sys.modules, "google.colab", google_colab)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda command, check: calls.append((command, check)))
    exec(colab.cell_source(), {})
    assert calls == [([sys.executable, "-m", "pip", "install", "--quiet", colab.requirement()], True), "widgets"]
