"""Checks for the notebooks' "Try it" exercises.

A notebook's exercise cell defines a function; the check cell after it calls ``check("2.1", that_function)``. The check
prints one fixed line, ``Exercise 2.1: passed`` or ``Exercise 2.1: not attempted yet`` (the learner's function still
raises ``NotImplementedError``), and on a wrong answer raises :class:`ExerciseFailed` saying what was expected, what
was got, and a hint. Any other exception comes from the learner's own code and is left to propagate.

The checkers of notebook ``NN`` live in ``attnlab.exercises.nbNN`` and register themselves with :func:`exercise`.

A checker is a function of the learner's answer only. It calls that answer with plain data (numbers, strings, numpy
arrays of numeric or bool dtype, tuples and lists of them, or a callable that the answer may call back) and judges
what comes back, so that the grader can run it in a process of its own and reach the learner's function through a
narrow interface. Every random input comes from :func:`seeded`: fixed when a learner checks their own work, drawn
from a secret seed per grading when the grader runs the checker.
"""

from __future__ import annotations

import decimal
import fractions
import importlib
import numbers
import pkgutil
from typing import Callable

import numpy as np

_REGISTRY: dict[str, Callable] = {}
_FORBIDS: dict[str, tuple[str, ...]] = {}
_SECRET: int | None = None  # set only by the grader's trusted side, never in a learner's kernel


class ExerciseFailed(AssertionError):
    """A learner's answer is wrong; the message says what was expected, what was got, and a hint."""


def exercise(exercise_id: str, forbids: tuple[str, ...] = ()):
    """Register the decorated function as the checker of ``exercise_id`` (e.g. ``"2.1"``).

    ``forbids`` names the ``attnlab`` functions that the exercise asks the learner to write themselves (e.g.
    ``("attnlab.causal_mask",)``). What an answer may not use is derived from them (:func:`answering_code`: every
    function of the modules that implement them, private ones included, and everything in ``attnlab`` that uses
    those): an answer that uses any of it fails, with a message naming it.
    """

    def register(checker: Callable) -> Callable:
        if exercise_id in _REGISTRY and _REGISTRY[exercise_id] is not checker:
            raise ValueError(f"exercise {exercise_id} is registered twice")
        _REGISTRY[exercise_id] = checker
        _FORBIDS[exercise_id] = tuple(forbids)
        return checker

    return register


def seeded(seed: int) -> np.random.Generator:
    """The generator a checker draws random inputs from: ``default_rng(seed)`` when a learner checks their own work,
    mixed with a secret seed when the grader checks, so that no answer can be precomputed from this source."""
    return np.random.default_rng(seed if _SECRET is None else [seed, _SECRET])


def forbidden(exercise_id: str) -> tuple[str, ...]:
    """The ``attnlab`` functions exercise ``exercise_id`` names as the ones the learner writes themselves."""
    _load_all()
    return _FORBIDS.get(exercise_id, ())


def answering_code(exercise_id: str) -> dict[str, str]:
    """Every ``attnlab`` function or class, public or private, that computes the answer of ``exercise_id``, derived
    from :func:`forbidden` and the library's call graph (see :mod:`._provenance`): short name -> dotted name."""
    from . import _provenance

    return _provenance.answering_code(forbidden(exercise_id))


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("nb"):
            importlib.import_module(f"{__name__}.{info.name}")


def exercise_ids() -> list[str]:
    """Every registered exercise id, in notebook order."""
    _load_all()
    return sorted(_REGISTRY, key=lambda e: tuple(int(p) for p in e.split(".")))


def check(exercise_id: str, answer) -> None:
    """Check a learner's answer to exercise ``exercise_id`` and print one fixed line, or raise ``ExerciseFailed``.

    When ``attnlab-check`` grades the notebook, the checker runs in the grader's own process instead, and this
    function only serves it the calls of ``answer`` (see :mod:`attnlab.exercises._agent`).
    """
    from . import _agent, _judge, _protocol, _provenance

    _load_all()
    if exercise_id not in _REGISTRY:
        raise ValueError(f"unknown exercise {exercise_id!r}; expected one of {exercise_ids()}")
    address = _agent.grading_address()
    if address:
        _agent.serve(exercise_id, answer, address)
        return
    finding = _provenance.scan(_cell_source(answer), getattr(answer, "__name__", None), _FORBIDS[exercise_id])
    if finding is not None:
        _protocol.show(_protocol.Verdict(exercise_id, "failed", _provenance.message(exercise_id, finding)))
        return
    local = _agent.LocalAnswer(exercise_id, answer, sorted(set(answering_code(exercise_id).values())))
    verdict, learner_exception = _judge.judge(exercise_id, local)
    _protocol.show(verdict, learner_exception=learner_exception)


def _cell_source(answer) -> list[str]:
    """The source of the notebook cell that defined ``answer`` (kept by IPython), or nothing for a function of a file
    (a test, a module): the grader reads the exercise cells themselves."""
    import linecache
    import os

    filename = getattr(getattr(answer, "__code__", None), "co_filename", "")
    if not filename or os.path.exists(filename) and not os.path.basename(os.path.dirname(filename)).startswith(
            "ipykernel_"):
        return []
    return ["".join(linecache.getlines(filename))]


def checker(exercise_id: str) -> Callable:
    """The registered checker of ``exercise_id`` (for the grader, which runs it in a process of its own)."""
    _load_all()
    if exercise_id not in _REGISTRY:
        raise ValueError(f"unknown exercise {exercise_id!r}; expected one of {exercise_ids()}")
    return _REGISTRY[exercise_id]


def fail(what: str, expected, got, hint: str = "") -> None:
    """Raise :class:`ExerciseFailed` with the house format: what went wrong, expected vs. got, and a hint."""
    message = f"{what}\n  expected: {expected}\n  got:      {got}"
    if hint:
        message += f"\n  hint: {hint}"
    raise ExerciseFailed(message)


def float_array(got, what: str, shape: tuple, hint: str = "") -> np.ndarray:
    """``got`` as a float ndarray of ``shape``, or fail saying what is wrong with it (None, not numbers, a shape).

    A float32 (or float16) answer stays in its dtype, so that :func:`close` judges it within its own precision."""
    if got is None:
        fail(f"{what} returned None", f"an array of shape {shape}", "None", "did you forget the `return`?")
    try:
        arr = np.asarray(got)
        if arr.dtype.kind != "f" or arr.dtype.itemsize > 8:
            arr = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        fail(f"{what} did not return numbers", f"an array of shape {shape}", type(got).__name__)
    if arr.shape != shape:
        fail(f"{what} has the wrong shape", f"shape {shape}", f"shape {arr.shape}", hint)
    return arr


# --- judging numbers fairly ----------------------------------------------------------------------------------------

FLOAT_SLACK = 2**10
"""How many units of the learner's precision an answer may be off, relative and absolute (the rule of
:func:`tolerances`). The checks feed attention scores up to about 1500 (about 2**10.5): in float32 such a score is
off by a few epsilons of 1500, that is of the order of 2**10 float32 epsilons, and the weights and outputs computed
from it inherit an error of that order. The classic mistakes the checks name change the answer by far more
(``tests/test_exercises_fair.py`` checks some of them in float32)."""


def precision(got) -> float:
    """The machine epsilon of the learner's answer: float32's for a float32 or float16 array or scalar, float64's for
    anything else (float64, Python floats, ints, and answers in longdouble or exact rationals, which reach a check
    as float64: see :func:`plain`)."""
    dtype = getattr(got, "dtype", None)
    if dtype is not None and dtype.kind in "fc" and np.finfo(dtype).eps > np.finfo(np.float64).eps:
        return float(np.finfo(np.float32).eps)  # float16 is judged as float32: tolerances stop there
    return float(np.finfo(np.float64).eps)


def tolerances(got, rtol: float, atol: float) -> tuple[float, float]:
    """A check's ``(rtol, atol)`` for the learner's answer ``got``: as given for a float64 answer; for an answer in a
    lower precision, at least ``FLOAT_SLACK`` epsilons of it, relative and absolute (float32: about 1.2e-4)."""
    eps = precision(got)
    if eps <= np.finfo(np.float64).eps:
        return rtol, atol
    return max(rtol, FLOAT_SLACK * eps), max(atol, FLOAT_SLACK * eps)


def close(got, expected, rtol: float, atol: float, *, equal_nan: bool = False) -> bool:
    """``np.allclose(got, expected)``, same shapes required, within the tolerances of ``got``'s precision."""
    got_arr, exp_arr = np.asarray(got), np.asarray(expected)
    if got_arr.shape != exp_arr.shape:
        return False
    rtol, atol = tolerances(got_arr, rtol, atol)
    with np.errstate(all="ignore"):
        return bool(np.allclose(got_arr, exp_arr, rtol=rtol, atol=atol, equal_nan=equal_nan))


def plain(value):
    """``value`` with the numbers a check cannot read as they are made plain, the same way in self-check and grading:
    ``fractions.Fraction`` and ``decimal.Decimal`` become floats, numpy's longdouble (and clongdouble) float64
    (complex128), and an object array whose entries are all real numbers a float64 array. Tuples, lists and dicts keep
    their kind; anything else, and a value with nothing to convert, comes back as it is (the same object)."""
    return _plain(value, 0)


def _plain(value, depth: int):
    if depth > 32:
        return value
    if isinstance(value, (fractions.Fraction, decimal.Decimal)):
        try:
            return float(value)
        except (OverflowError, ValueError):
            return value
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind == "f" and value.dtype.itemsize > 8:
            return value.astype(np.float64)
        if value.dtype.kind == "c" and value.dtype.itemsize > 16:
            return value.astype(np.complex128)
        if value.dtype.kind == "O" and isinstance(value, np.ndarray) and value.size and all(
                isinstance(v, (numbers.Real, decimal.Decimal)) and not isinstance(v, (bool, np.bool_))
                for v in value.flat):
            try:
                return np.array([float(v) for v in value.flat], dtype=np.float64).reshape(value.shape)
            except (TypeError, ValueError, OverflowError):
                return value
        return value
    if isinstance(value, (tuple, list)):
        items = [_plain(v, depth + 1) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        items = {k: _plain(v, depth + 1) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    return value
