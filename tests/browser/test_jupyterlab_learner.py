"""A learner notebook in JupyterLab: "Run all" shows no error and every explorer moves (see ``test_jupyterlab.py``,
where ``LEARNER_NOTEBOOKS`` says which one and why).

It runs in this module rather than beside the solution notebooks so that pytest-xdist's ``--dist loadscope`` can
run the two halves of the browser suite on different workers (each starts its own JupyterLab).
"""

from __future__ import annotations

import pytest

from .test_jupyterlab import LEARNER_NOTEBOOKS, run_and_check

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("relpath", LEARNER_NOTEBOOKS)
def test_learner_notebook_runs_in_jupyterlab(relpath, lab_page, timings):
    run_and_check(relpath, lab_page, timings)
