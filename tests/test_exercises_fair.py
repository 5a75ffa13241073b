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

import ast
import fractions
import math
import subprocess
import sys

import nbformat
import numpy as np
import pytest

import attnlab
from attnlab import exercises
from attnlab_course.authoring import find_exercises
from attnlab_course.paths import solutions_dir
from attnlab.exercises import ExerciseFailed, check

NOTEBOOKS = ("01", "02", "03", "04", "05", "06", "08")


def _solutions() -> dict:
    """Exercise id -> the solution notebook's function for it, defined by running its exercise cell."""
    found = {}
    for path in sorted(p for p in solutions_dir().glob("0[0-9]_*.ipynb") if p.name[:2] in NOTEBOOKS):
        nb = nbformat.read(path, as_version=4)
        for ex in find_exercises(nb, str(path)):
            namespace = {"np": np, "math": math, "attnlab": attnlab}
            exec(compile(nb.cells[ex.exercise_cell].source, f"{path.name} {ex.id}", "exec"), namespace)
            name = nb.cells[ex.check_cell].source.split(",")[1].strip(" )\n")  # check("2.1", my_causal_mask)
            found[ex.id] = namespace[name]
    return found


SOLUTIONS = _solutions()
IDS = sorted(SOLUTIONS, key=lambda e: tuple(map(int, e.split("."))))


def test_every_exercise_of_the_listed_notebooks_has_a_solution_here():
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


# --- honest answers in another form --------------------------------------------------------------------------------


def _convert(value, number):
    """``value`` with every float, and every floating array, made by ``number`` (tuples, lists and dicts kept)."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return number(value)
    if isinstance(value, (float, np.floating)):
        return number(value)
    if isinstance(value, tuple):
        return tuple(_convert(v, number) for v in value)
    if isinstance(value, list):
        return [_convert(v, number) for v in value]
    return value


def _float32(x):
    return np.asarray(x, dtype=np.float32) if isinstance(x, np.ndarray) else np.float32(x)


def _longdouble(x):
    return np.asarray(x, dtype=np.longdouble) if isinstance(x, np.ndarray) else np.longdouble(x)


def _fraction(x):
    """Exact rationals: a Fraction for a number, an object array of Fractions for an array (inf and NaN stay floats,
    as no rational holds them)."""
    if isinstance(x, np.ndarray):
        return np.array([fractions.Fraction(float(v)) if np.isfinite(v) else float(v) for v in x.ravel()],
                        dtype=object).reshape(x.shape)
    return fractions.Fraction(float(x)) if np.isfinite(x) else float(x)


def _counts_too(value):
    """Whole numbers (ints, not bools) of a result as float32, as a learner counting in float32 returns them."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return np.float32(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_counts_too(v) for v in value)
    return value


def in_float32(solution):
    """The solution computed in float32: float inputs cast to float32 (so every step runs in float32), the result
    returned as computed, and any number it returns (a float, or a count) as a float32."""
    def answer(*args, **kwargs):
        return _counts_too(_convert(solution(*_convert(args, _float32), **_convert(kwargs, _float32)), _float32))
    return answer


def as_lists(solution):
    """The solution returning lists where it returns tuples: ``return [out, weights]``."""
    def answer(*args, **kwargs):
        result = solution(*args, **kwargs)
        return list(result) if isinstance(result, tuple) else result
    return answer


def in_longdouble(solution):
    """The solution with its result in numpy's longdouble (float128 on most machines)."""
    return lambda *args, **kwargs: _convert(solution(*args, **kwargs), _longdouble)


def in_fractions(solution):
    """The solution with its result as exact rationals (fractions.Fraction, or object arrays of them)."""
    return lambda *args, **kwargs: _convert(solution(*args, **kwargs), _fraction)


VARIANTS = {"float32": in_float32, "list": as_lists, "longdouble": in_longdouble, "fraction": in_fractions}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("exercise_id", IDS)
def test_a_right_answer_in_another_form_passes(exercise_id, variant, capsys):
    check(exercise_id, VARIANTS[variant](SOLUTIONS[exercise_id]))
    assert capsys.readouterr().out == f"Exercise {exercise_id}: passed\n"


# --- wrong answers in float32 keep their diagnosis -----------------------------------------------------------------


def _classic_mistakes():
    """(exercise, wrong answer, a phrase of its diagnosis): a few classic mistakes of each notebook's tests."""
    import test_exercises_nb01 as t1
    import test_exercises_nb02 as t2
    import test_exercises_nb03 as t3
    import test_exercises_nb04 as t4
    import test_exercises_nb06 as t6

    return [
        ("1.1", t1.softmax_axis0, "your columns sum to 1 instead of your rows"),
        ("1.2", t1._cross_with(scale=lambda x, y, W_q, W_v: 1.0), "you forgot to divide by sqrt(d_k)"),
        ("1.2", t1.cross_wrong_output, "your weights are right but your output is not"),
        ("2.2", t2.masked_zeroed_after, "AFTER the softmax"),
        ("2.2", t2.masked_scale_d, "scores / D = scores / 8"),
        ("3.2", t3._query_mistake(jac=lambda p: np.outer(p, p) - np.diag(p)), "flipped the sign of J"),
        ("3.2", t3._query_mistake(ds_scale=1.0), "left the scale out of ∂s/∂q"),
        ("3.3", t3._scaled(lambda q, k, H: 1 / np.sqrt(q.shape[-1])), "√d_model"),
        ("4.1", lambda q, k, v: t4.gqa(q, k, v, kv_layout="tile"), "np.tile"),
        ("4.1", lambda q, k, v: t4.gqa(q, k, v, after_softmax=True), "after the softmax"),
        ("4.2", t4.with_mistake(blocks=lambda lengths, bs: lengths // bs), "DOWN"),
        ("4.2", t4.with_mistake(reserved=lambda lengths, max_len: len(lengths) * lengths.max()), "longest"),
        ("6.1", lambda x, b: t6.lse(x, b, rescale=False), "did you forget to rescale l"),
        ("6.2", lambda *args: t6.causal_tiled(*args, rescale_acc=False), "did you forget to rescale acc"),
        ("6.3", lambda a, b: t6.merge_states(a, b, average=True), "averaging the two outputs"),
    ]


@pytest.mark.parametrize("exercise_id, wrong, phrase", _classic_mistakes())
def test_a_classic_mistake_in_float32_keeps_its_diagnosis(exercise_id, wrong, phrase):
    with pytest.raises(ExerciseFailed) as info:
        check(exercise_id, lambda *args, **kwargs: _counts_too(_convert(wrong(*args, **kwargs), _float32)))
    assert phrase in str(info.value)


# --- the rules themselves ----------------------------------------------------------------------------------------


def test_tolerances_follow_the_answers_precision():
    eps32 = float(np.finfo(np.float32).eps)
    assert exercises.tolerances(np.ones(3), 1e-9, 1e-12) == (1e-9, 1e-12)  # float64: the check's own
    assert exercises.tolerances(1.5, 1e-9, 1e-12) == (1e-9, 1e-12)  # a Python float is a float64
    for low in (np.ones(3, dtype=np.float32), np.float32(1.5), np.ones(2, dtype=np.float16)):
        assert exercises.tolerances(low, 1e-9, 1e-12) == (exercises.FLOAT_SLACK * eps32,) * 2
    assert exercises.tolerances(np.float32(1), 1e-2, 0.0)[0] == 1e-2  # never tighter than the check's own


def test_close_judges_float32_within_float32_error_only():
    expected = np.linspace(-3.0, 3.0, 7) / 7  # not exact in float32
    rounded = expected.astype(np.float32)
    assert exercises.close(rounded, expected, 1e-9, 1e-12)
    assert not exercises.close(rounded.astype(np.float64), expected, 1e-9, 1e-12)  # same numbers, claimed float64
    assert not exercises.close(rounded + np.float32(1e-3), expected, 1e-9, 1e-12)  # a real difference still shows
    assert not exercises.close(rounded[:6], expected[:6].reshape(2, 3), 1e-9, 1e-12)  # shapes must match


def test_plain_reads_exact_and_long_numbers_as_float64_and_keeps_the_rest():
    third = fractions.Fraction(1, 3)
    assert exercises.plain(third) == 1 / 3 and type(exercises.plain(third)) is float
    out = exercises.plain([np.array([third, 2], dtype=object), (np.ones(2, dtype=np.longdouble), 7)])
    assert isinstance(out, list) and isinstance(out[1], tuple) and out[1][1] == 7
    assert out[0].dtype == np.float64 and out[1][0].dtype == np.float64
    np.testing.assert_array_equal(out[0], [1 / 3, 2.0])
    kept = (np.ones(2, dtype=np.float32), "text", np.array(["a"], dtype=object))
    assert exercises.plain(kept) is kept  # nothing to convert: the very same object


# --- notebook 05's own cells under the grader's limits ---------------------------------------------------------------


def _timed_under_a_cpu_limit(cell: str) -> list[float]:
    """Run notebook 05's timing cell in a process with a CPU-time limit, as the grader's sandbox sets one
    (RLIMIT_CPU), and time 50 short calls (a 64 x 64 product, some microseconds) with its best_time."""
    code = ("import resource, sys, time, tracemalloc\nimport numpy as np\n"
            "resource.setrlimit(resource.RLIMIT_CPU, (300, resource.getrlimit(resource.RLIMIT_CPU)[1]))\n"
            + cell + "\na = np.random.default_rng(0).standard_normal((64, 64))\n"
            "print([best_time(np.matmul, a, a, repeat=1) for _ in range(50)])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the grader's sandbox and RLIMIT_CPU are Linux's")
def test_notebook_05_times_short_calls_under_the_graders_cpu_limit():
    """Under RLIMIT_CPU the process's CPU clock advances in scheduler ticks, so time.process_time measured some short
    calls as 0 s and 05's log-log plot, and every cell after it, failed in the sandbox only. Its clock must not."""
    nb = nbformat.read(solutions_dir() / "05_cost.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "def best_time" in c.source)
    assert min(_timed_under_a_cpu_limit(cell)) > 0  # with time.process_time, most of the 50 were 0 s here
