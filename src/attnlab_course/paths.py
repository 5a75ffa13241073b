"""Where the course's files are: the repository, its notebooks and the solution notebooks. No other module works
these paths out; they all import them from here.

Two ways to have this package:

* in a checkout (``make install``: an editable install), it is ``src/attnlab_course`` of the repository, and
  :data:`ROOT` is the repository: ``notebooks/`` (the learner notebooks), ``notebooks/solutions/`` (the solution
  notebooks, the source of everything), ``docs/``, ``pyproject.toml``;
* installed from the ``attnlab-course`` wheel (``course/pyproject.toml``), there is no repository: the wheel ships
  the solution notebooks as ``attnlab_course/solutions/`` (``course/setup.py`` copies them at build time), which is
  all the grader needs.

The learner's distribution, ``attnlab``, has neither this package nor any notebook.

This module imports nothing but the standard library: ``course/setup.py`` loads it by file name to find the
notebooks it ships.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parents[1]  # the repository, when this package runs from a checkout's src/
NOTEBOOKS = ROOT / "notebooks"  # the learner notebooks
SOLUTIONS = NOTEBOOKS / "solutions"  # the solution notebooks of the checkout
DOCS = ROOT / "docs"
PYPROJECT = ROOT / "pyproject.toml"  # attnlab's: its version and its repository URL
SHIPPED_SOLUTIONS = PACKAGE / "solutions"  # the solution notebooks in an install from the attnlab-course wheel
SOLUTIONS_ENV = "ATTNLAB_SOLUTIONS"  # names another folder of solution notebooks


def in_checkout() -> bool:
    """Whether this package runs from a checkout of the repository (else from an installed wheel)."""
    return PYPROJECT.is_file() and SOLUTIONS.is_dir()


def solutions_dir() -> Path:
    """The folder of solution notebooks: ``$ATTNLAB_SOLUTIONS`` if set, else the ones the wheel ships, else the
    checkout's ``notebooks/solutions``, else ``notebooks/solutions`` under the current directory."""
    if os.environ.get(SOLUTIONS_ENV):
        return Path(os.environ[SOLUTIONS_ENV])
    if SHIPPED_SOLUTIONS.is_dir():
        return SHIPPED_SOLUTIONS
    if SOLUTIONS.is_dir():
        return SOLUTIONS
    return Path.cwd() / "notebooks" / "solutions"


def solution_notebooks(folder: Path) -> list[Path]:
    """Every solution notebook (``NN_topic.ipynb``) in ``folder``, in course order."""
    return sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))
