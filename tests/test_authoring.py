"""Learner notebooks generated from the solution notebooks (``make learner``), and re-execution (``make notebooks``)."""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from attnlab_course import authoring
from attnlab_course.authoring import FormatError, find_exercises, learner_notebook, stub_solution

SOLUTIONS = authoring.solution_notebooks()


def _passed(ex: str):
    return [new_output("stream", name="stdout", text=f"Exercise {ex}: passed\n")]


def _solution():
    """A small solution notebook: prose, a figure-like output, one exercise with given setup code, a later cell."""
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                               "language": "python"}})
    nb.cells = [
        new_markdown_cell("# Tiny\n\nSome prose."),
        new_code_cell("import numpy as np\nnp.arange(3)", execution_count=1,
                      outputs=[new_output("execute_result", data={"text/plain": "array([0, 1, 2])"},
                                          execution_count=1)]),
        new_code_cell(
            'def scaled(x, mask):\n    """x (T, S) -> (T, S)."""\n    x = np.asarray(x)\n    ### BEGIN SOLUTION\n'
            "    y = x / 2\n    ### END SOLUTION\n    if mask is not None:\n        ### BEGIN SOLUTION\n"
            "        y = np.where(mask, y, 0)\n        ### END SOLUTION\n    return y",
            execution_count=2, metadata={"attnlab": {"exercise": "9.1", "role": "solution"}}),
        new_code_cell('check("9.1", scaled)', execution_count=3, outputs=_passed("9.1"),
                      metadata={"attnlab": {"exercise": "9.1", "role": "check"}}),
        new_code_cell("print('after')", execution_count=4, outputs=[new_output("stream", name="stdout",
                                                                               text="after\n")]),
    ]
    return nb


def test_a_solution_region_becomes_the_stub_at_its_indentation():
    learner = learner_notebook(_solution(), "09_tiny").cells[2].source
    assert learner == (
        'def scaled(x, mask):\n    """x (T, S) -> (T, S)."""\n    x = np.asarray(x)\n'
        "    # your code here\n    raise NotImplementedError\n    if mask is not None:\n"
        "        # your code here\n        raise NotImplementedError\n    return y")


def test_everything_but_solution_regions_and_check_outputs_is_kept():
    solution = _solution()
    before = copy.deepcopy(solution)
    learner = learner_notebook(solution, "09_tiny")
    assert solution == before, "the solution notebook is not modified"
    assert learner.cells[3].outputs == [new_output("stream", name="stdout", text="Exercise 9.1: not attempted yet\n")]
    for i in (0, 1, 4):
        assert learner.cells[i] == solution.cells[i]
    for cell, original in zip(learner.cells, solution.cells):
        assert (cell.get("id"), cell.metadata, cell.get("execution_count")) == (
            original.get("id"), original.metadata, original.get("execution_count"))
    assert learner.cells[3].source == solution.cells[3].source
    assert learner.metadata == {**solution.metadata, "attnlab": {"notebook": "09_tiny"}}


@pytest.mark.parametrize("source, error", [
    ("def f():\n    ### BEGIN SOLUTION\n    return 1", "never closed"),
    ("def f():\n    return 1\n    ### END SOLUTION", "without"),
    ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    ### END SOLUTION", "inside another"),
])
def test_unbalanced_markers_are_an_error(source, error):
    with pytest.raises(FormatError, match=error):
        stub_solution(source)


def _broken(change):
    nb = _solution()
    change(nb)
    return nb


@pytest.mark.parametrize("change, error", [
    (lambda nb: nb.cells[2].metadata.clear(), "no attnlab exercise metadata"),
    (lambda nb: nb.cells.pop(3), "not followed by its check cell"),
    (lambda nb: nb.cells.insert(3, new_code_cell("x = 1")), "not followed by its check cell"),
    (lambda nb: setattr(nb.cells[3], "source", "check('9.1', scaled)\nprint(1)"), "exactly check"),
    (lambda nb: setattr(nb.cells[3], "outputs", []), "execute the solution notebook"),
    (lambda nb: setattr(nb.cells[2], "source", "def f():\n    pass"), "no ### BEGIN SOLUTION"),
    (lambda nb: nb.cells[2].metadata["attnlab"].update(exercise="9"), "not of the form"),
    (lambda nb: nb.cells.extend(copy.deepcopy(nb.cells[2:4])), "appears twice"),
])
def test_a_solution_notebook_that_breaks_the_format_is_rejected(change, error):
    with pytest.raises(FormatError, match=error):
        learner_notebook(_broken(change), "09_tiny")


def test_learner_and_verify_commands(tmp_path, capsys):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    solution = solutions / "09_tiny.ipynb"
    nbformat.write(_solution(), solution)
    assert authoring.main(["verify", str(solution)]) == 1  # the learner notebook does not exist yet
    assert authoring.main(["learner", str(solution)]) == 0
    learner = tmp_path / "09_tiny.ipynb"
    text = learner.read_text()
    assert authoring.main(["learner", str(solution)]) == 0 and learner.read_text() == text
    assert "up to date" in capsys.readouterr().out.splitlines()[-1]
    assert authoring.main(["verify", str(solution)]) == 0
    nbformat.write(_broken(lambda nb: setattr(nb.cells[0], "source", "# Changed")), solution)
    assert authoring.stale_learner_notebooks([solution]) == [f"{learner} is out of date with {solution}"]
    assert authoring.main(["verify", str(solution)]) == 1


def test_learner_refuses_to_overwrite_a_learners_work(tmp_path, capsys):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    solution = solutions / "09_tiny.ipynb"
    nbformat.write(_solution(), solution)
    assert authoring.main(["learner", str(solution)]) == 0
    learner = tmp_path / "09_tiny.ipynb"
    nb = nbformat.read(learner, as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("# your code here\n    raise NotImplementedError", "y = x / 2")
    nbformat.write(nb, learner)
    nbformat.write(_broken(lambda nb: setattr(nb.cells[0], "source", "# Changed")), solution)
    work = learner.read_text()
    assert authoring.main(["learner", str(solution)]) == 1
    assert learner.read_text() == work and "holds work on exercise(s) 9.1" in capsys.readouterr().err
    assert authoring.main(["learner", "--force", str(solution)]) == 0
    assert learner.read_text() == authoring.render_learner(solution)


def test_execute_runs_a_notebook_in_place_keeping_metadata(tmp_path):
    path = tmp_path / "nb.ipynb"
    nb = _solution()
    nb.cells = nb.cells[:2] + [new_code_cell("import os\nprint(os.path.basename(os.getcwd()))",
                                             metadata={"attnlab": {"note": "kept"}, "execution": {"t": "stale"}})]
    nb.metadata["attnlab"] = {"notebook": "kept"}
    nbformat.write(nb, path)
    authoring.execute(path)
    done = nbformat.read(path, as_version=4)
    assert done.cells[2].outputs[0]["text"] == f"{tmp_path.name}\n"  # ran in the notebook's folder
    assert done.cells[2].metadata == {"attnlab": {"note": "kept"}}  # no timing metadata
    assert done.metadata["attnlab"] == {"notebook": "kept"} and done.cells[1].execution_count == 1


# --- the course's own notebooks ---------------------------------------------------------------------------------


def test_there_are_solution_notebooks():
    assert len(SOLUTIONS) >= 3


def test_every_learner_notebook_is_up_to_date_with_its_solution():
    stale = authoring.stale_learner_notebooks(SOLUTIONS)
    assert not stale, "\n".join(stale) + "\nrun `make learner` and commit the learner notebooks"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.stem)
def test_learner_notebook_is_deterministic_and_hides_every_solution(solution):
    text = authoring.render_learner(solution)
    assert authoring.render_learner(solution) == text
    assert "### BEGIN SOLUTION" not in text and "### END SOLUTION" not in text
    learner = nbformat.reads(text, as_version=4)
    original = nbformat.read(solution, as_version=4)
    exercises = find_exercises(original, str(solution))
    assert exercises, f"{solution.name} has no exercises"
    for ex in exercises:
        stub = learner.cells[ex.exercise_cell].source
        assert stub == stub_solution(original.cells[ex.exercise_cell].source)
        assert "    # your code here\n" in stub and "raise NotImplementedError" in stub
        assert learner.cells[ex.check_cell].source == original.cells[ex.check_cell].source
        assert learner.cells[ex.check_cell].outputs[0]["text"] == f"Exercise {ex.id}: not attempted yet\n"
