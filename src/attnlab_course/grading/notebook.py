"""The notebook nbval runs for one grading, built from the solution notebook and the learner's exercise cells.

Each exercise cell of the solution is replaced by the learner's cell of the same exercise, keeping only the learner's
source, with any nbval marker comment blanked out. Every check cell is the solution's, with a fresh ``from
attnlab.exercises import check`` in front and, as its expected output, ``Exercise N.k: passed [TOKEN]`` with a random
token per exercise and grading: the kernel prints it only when the trusted judge tells it to. Every other cell is
the solution's, with its output ignored. Outputs the learner saved are never read, and what follows the last check
cell is left out. :func:`slice_notebook` then leaves out the notebook's own cells that no exercise needs
(:mod:`.slicing`).
"""

from __future__ import annotations

import ast
import copy
import re

import nbformat

from ..authoring import Exercise, cell_role, passed_line
from .slicing import AST_LOCK, slice_cells

_NBVAL_MARKER = re.compile(r"^\s*#+\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$")


def graded_name(check_source: str, exercise_id: str) -> str | None:
    """The name of the function a check cell passes to ``check`` (``check("2.1", my_causal_mask)``), if plain."""
    try:
        with AST_LOCK:
            tree = ast.parse(check_source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == exercise_id and isinstance(node.args[1], ast.Name)):
            return node.args[1].id
    return None


def strip_nbval_markers(source: str) -> str:
    """Blank out nbval marker comments (line numbers stay the same)."""
    return "\n".join("" if _NBVAL_MARKER.match(line) else line for line in source.split("\n"))


def grading_notebook(solution, exercises: list[Exercise], learner_cells: dict, skip=frozenset(), tokens=None):
    """The notebook nbval runs (see the module docstring); exercises in ``skip`` are left out.

    ``tokens`` maps each exercise to the token its check cell must print; without it the expected output is the
    plain ``Exercise N.k: passed`` line.
    """
    nb = copy.deepcopy(solution)
    drop = set()
    for ex in exercises:
        learner_cell = learner_cells.get(ex.id)
        if learner_cell is None or ex.id in skip:
            drop |= {ex.exercise_cell, ex.check_cell}
            continue
        cell = nb.cells[ex.exercise_cell]
        cell.source = strip_nbval_markers(learner_cell.get("source", ""))
        cell.metadata = {"attnlab": {"exercise": ex.id, "role": "solution"}, "tags": ["nbval-ignore-output"]}
        cell.outputs, cell.execution_count = [], None
        check = nb.cells[ex.check_cell]
        check.source = "from attnlab.exercises import check\n" + check.source
        check.metadata = {"attnlab": {"exercise": ex.id, "role": "check"}}
        line = passed_line(ex.id) if tokens is None else f"Exercise {ex.id}: passed [{tokens[ex.id]}]\n"
        check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=line)]
        check.execution_count = check.execution_count or 1
    last_check = max((ex.check_cell for ex in exercises if ex.check_cell not in drop), default=-1)
    cells = []
    for i, cell in enumerate(nb.cells[: last_check + 1]):  # what follows the last check cannot change a result
        if cell.cell_type != "code" or i in drop:
            continue
        if cell_role(cell) is None:  # the notebook's own cells (the Colab set-up cell too): outputs not compared
            tags = list(cell.metadata.get("tags", []))
            cell.metadata["tags"] = tags + ["nbval-ignore-output"]
        cells.append(cell)
    nb.cells = cells
    return nb


def slice_notebook(nb):
    """``nb`` without the notebook's own cells that the exercise and check cells do not need (see :mod:`.slicing`),
    and, for each own cell kept, why. Exercise and check cells are always kept, in order."""
    own = [(cell_role(cell) or ("", ""))[1] not in ("solution", "check") for cell in nb.cells]
    slim: dict[int, str] = {}
    keep, why = slice_cells([cell.source for cell in nb.cells], own, slim)
    sliced = copy.copy(nb)
    sliced.cells = []
    for i, cell in enumerate(nb.cells):
        if not keep[i]:
            continue
        if i in slim and not cell.get("outputs"):  # an import cell shows nothing: nbval compares nothing
            if not slim[i].strip():
                continue  # every import left out: nothing to run
            cell = copy.copy(cell)
            cell.source = slim[i]
        sliced.cells.append(cell)
    return sliced, why
