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

import importlib
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
    """``got`` as a float ndarray of ``shape``, or fail saying what is wrong with it (None, not numbers, a shape)."""
    if got is None:
        fail(f"{what} returned None", f"an array of shape {shape}", "None", "did you forget the `return`?")
    try:
        arr = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        fail(f"{what} did not return numbers", f"an array of shape {shape}", type(got).__name__)
    if arr.shape != shape:
        fail(f"{what} has the wrong shape", f"shape {shape}", f"shape {arr.shape}", hint)
    return arr
