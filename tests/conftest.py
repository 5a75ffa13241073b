"""Shared set-up for the unit tests: hypothesis profiles, a headless matplotlib, and input factories.

Hypothesis profiles (choose with ``HYPOTHESIS_PROFILE=name``):

- ``ci`` (default): derandomised, so every run draws the same examples and a failure reproduces exactly; no example
  database is written into the working tree; few enough examples that the unit suite stays fast on two cores.
- ``dev``: many more examples, drawn at random on each run, for a deeper search before a release (a failure prints
  the ``@reproduce_failure`` blob to replay it).

The tests import the reference implementation as ``import oracle`` and the input factories as ``import helpers``
(``tests/`` has no ``__init__.py``, so pytest puts it on ``sys.path``).
"""

from __future__ import annotations

import json
import os
import time

import matplotlib
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

matplotlib.use("Agg")  # no display: figures are drawn to memory only

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,  # timings on a shared machine are not a property of the code
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", parent=settings.get_profile("ci"), max_examples=1000, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng():
    """A fresh, seeded generator per test: tests never share random state."""
    return np.random.default_rng(20240601)


@pytest.fixture
def close_figures():
    """Close every matplotlib figure a test opened, so figures never pile up across tests."""
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


@pytest.fixture(autouse=True)
def self_check_and_grading_agree(request, monkeypatch):
    """In the exercise tests, every ``check(exercise_id, answer)`` is also graded, and both verdicts must agree.

    Every right answer, classic mistake and stub that the tests of the checkers try (tests/test_exercises_nb*.py) is
    judged twice: by the self-check a learner runs (``check``, whose verdict is recorded), and by the grading's
    trusted judge calling the same function through the kernel-side agent over a real socket pair, as
    ``attnlab-check`` does. The status and the message must be the same.
    """
    if not request.module.__name__.startswith("test_exercises_nb"):
        yield
        return
    import helpers
    from attnlab.exercises import _judge

    original_check = request.module.check
    judge = _judge.judge
    seen = []

    def recording_judge(exercise_id, answer):
        verdict, exc = judge(exercise_id, answer)
        seen.append(verdict)
        return verdict, exc

    def parity_check(exercise_id, answer):
        graded, _ = helpers.judge_over_a_socket_pair(exercise_id, answer)
        seen.clear()
        try:
            original_check(exercise_id, answer)
        finally:
            if seen:
                assert graded == seen[-1], f"self-check: {seen[-1]}\ngrading:    {graded}"
            else:  # the self-check failed before judging (the source scan): the grading must fail the same way
                assert graded.status == "failed", graded

    monkeypatch.setattr(_judge, "judge", recording_judge)
    monkeypatch.setattr(request.module, "check", parity_check)
    monkeypatch.setattr(helpers, "check", parity_check)
    yield


_SESSION_START = time.time()


def pytest_terminal_summary(terminalreporter):
    """The explorers' update times that the browser tests of this session measured (``tests/browser/conftest.py``
    writes them to the timings file; under pytest-xdist its workers do, and this summary is the controller's)."""
    from helpers import EXPLORER_TIMINGS

    stored = json.loads(EXPLORER_TIMINGS.read_text()) if EXPLORER_TIMINGS.exists() else {}
    measured = {name: t for name, t in stored.items() if t.get("measured_at", 0) >= _SESSION_START}
    if not measured:
        return
    terminalreporter.section("explorer update times (release of a control to the new picture)")
    for name, t in sorted(measured.items()):
        terminalreporter.write_line(f"{name}: median {1000 * t['median_seconds']:.0f} ms, "
                                    f"max {1000 * t['max_seconds']:.0f} ms over {len(t['steps_seconds'])} steps "
                                    f"({t['action']})")


@pytest.fixture(scope="module", params=["textbook", "fast"])
def tiled_path(request):
    """Run a test through the textbook tile loops of ``tiled_attention`` and ``tiled_attention_backward`` and through
    their fast paths, whatever the size (module-scoped, so that hypothesis's examples share it)."""
    import attnlab.backward
    import attnlab.online

    previous = attnlab.online.FAST_PATH_MIN_SCORES, attnlab.backward.TILED_FAST_PATH_MIN_SCORES
    attnlab.online.FAST_PATH_MIN_SCORES = attnlab.backward.TILED_FAST_PATH_MIN_SCORES = (
        0 if request.param == "fast" else np.inf)
    yield request.param
    attnlab.online.FAST_PATH_MIN_SCORES, attnlab.backward.TILED_FAST_PATH_MIN_SCORES = previous
