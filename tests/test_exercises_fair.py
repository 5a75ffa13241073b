"""Every exercise of notebooks 01-06 against two kinds of learner: one who answers with a table, and one who answers
right in another form.

- **A table of answers never passes.** The correct solution's answers are recorded under one grading seed and
  replayed, in call order or looked up by input, under another: every checker must reject them, because its decisive
  inputs (sizes, values, the order of calls and of layers) come from the grading's secret seed.
- **Honest work is judged fairly.** A correct answer computed in float32, returned as a list where a pair is
  expected, or computed with exact rationals (``fractions.Fraction``) or ``np.longdouble`` passes the check.

The correct answers are the solution notebooks' own exercise cells, run here.
"""

from __future__ import annotations

import fractions
import math

import nbformat
import numpy as np
import pytest

import attnlab
from attnlab import exercises
from attnlab.course.authoring import default_solutions_dir, find_exercises
from attnlab.exercises import ExerciseFailed, check

NOTEBOOKS = ("01", "02", "03", "04", "05", "06")


def _solutions() -> dict:
    """Exercise id -> the solution notebook's function for it, defined by running its exercise cell."""
    found = {}
    for path in sorted(default_solutions_dir().glob("0[1-6]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for ex in find_exercises(nb, str(path)):
            namespace = {"np": np, "math": math, "attnlab": attnlab}
            exec(compile(nb.cells[ex.exercise_cell].source, f"{path.name} {ex.id}", "exec"), namespace)
            name = nb.cells[ex.check_cell].source.split(",")[1].strip(" )\n")  # check("2.1", my_causal_mask)
            found[ex.id] = namespace[name]
    return found


SOLUTIONS = _solutions()
IDS = sorted(SOLUTIONS, key=lambda e: tuple(map(int, e.split("."))))


def test_every_exercise_of_01_to_06_has_a_solution_here():
    assert IDS == [e for e in exercises.exercise_ids() if e.split(".")[0] in {n.lstrip("0") for n in NOTEBOOKS}]


@pytest.fixture
def secret(monkeypatch):
    """Set the grading seed, as the grader's trusted side does (None: a learner's self-check)."""
    return lambda value: monkeypatch.setattr(exercises, "_SECRET", value)


# --- a table of answers ------------------------------------------------------------------------------------------


def _key(value):
    """A hashable fingerprint of an argument: arrays by dtype, shape and bytes; callables all alike."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", *sorted((k, _key(v)) for k, v in value.items()))
    if callable(value):
        return "callable"
    return ("value", repr(value))


def _record(solution):
    """``solution`` wrapped to remember every call's arguments and result, in order."""
    calls = []

    def recording(*args, **kwargs):
        result = solution(*args, **kwargs)
        calls.append((_key((args, kwargs)), result))
        return result

    return recording, calls


def _replay(calls, by_input: bool):
    """A learner's table: the recorded results in call order, or looked up by input (else the next in order)."""
    table = dict(calls)
    position = iter(range(10**9))

    def answer(*args, **kwargs):
        n = next(position)
        key = _key((args, kwargs))
        if by_input and key in table:
            return table[key]
        return calls[n % len(calls)][1]

    return answer


@pytest.mark.parametrize("by_input", [False, True], ids=["in_call_order", "looked_up_by_input"])
@pytest.mark.parametrize("exercise_id", IDS)
def test_a_replayed_table_of_the_right_answers_fails(exercise_id, by_input, secret, capsys):
    recording, calls = _record(SOLUTIONS[exercise_id])
    secret(20261201)
    check(exercise_id, recording)  # the solution passes under the seed the table was recorded with
    assert calls, "the checker called the answer"
    secret(8675309)
    check(exercise_id, SOLUTIONS[exercise_id])  # and under the other seed
    assert capsys.readouterr().out.count("passed") == 2
    with pytest.raises(ExerciseFailed):
        check(exercise_id, _replay(calls, by_input))
