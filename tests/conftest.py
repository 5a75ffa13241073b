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

import os

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
