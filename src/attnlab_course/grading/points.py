"""Points per exercise, the instructor's overrides, and the roster that maps submitted files to learner ids.

* **Defaults** live in the solution notebooks, beside ``attnlab.minutes``: the exercise cell's metadata
  ``{"attnlab": {"exercise": "2.1", "role": "solution", "points": 2}}``. An exercise without ``points`` is worth 1.
* **Overrides** live in a small TOML file the instructor keeps (``--points FILE``)::

      [points]            # exercise id = points (0 leaves an exercise out of the grade)
      "2.1" = 2
      "2.3" = 5

      [titles]            # the assignment's name in the LMS, per notebook (default: the notebook's name)
      "02_masks" = "Notebook 2: masks"

* **The roster** (``--roster FILE``) is a CSV file with a header row: ``file`` (the submitted file's name, with or
  without ``.ipynb``) and ``id`` (the learner's id in the LMS: a Canvas user id, a Moodle id number or email, ...),
  and optionally ``name``, ``email``, ``sis_user_id``, ``sis_login_id`` and ``section``, which the exports use where
  the platform has such a column. A file not in the roster keeps its name as its learner id.

A passed exercise earns its points, anything else none: the verdict is the grader's, the points only weigh it.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..authoring import find_exercises

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

DEFAULT_POINTS = 1
ROSTER_COLUMNS = ("file", "id", "name", "email", "sis_user_id", "sis_login_id", "section")


class ConfigError(ValueError):
    """A points file or roster the grader cannot use; the message names the file and what is wrong."""


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: expected a number of points >= 0, got {value!r}")
    return value


def notebook_points(solution_path) -> dict[str, float]:
    """Each exercise's points from the solution notebook's metadata (``attnlab.points``, default 1), in order."""
    path = Path(solution_path)
    nb = nbformat.read(path, as_version=4)
    points = {}
    for ex in find_exercises(nb, str(path)):
        meta = nb.cells[ex.exercise_cell].metadata.get("attnlab", {})
        points[ex.id] = _number(meta.get("points", DEFAULT_POINTS), f"{path.name}: exercise {ex.id}: attnlab.points")
    return points


@dataclass
class Scheme:
    """Points per exercise (overrides on top of each notebook's defaults) and the LMS title of each notebook."""

    solutions_dir: Path
    overrides: dict[str, float] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    _cache: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)

    def points(self, notebook: str) -> dict[str, float]:
        """Points of each exercise of ``notebook`` (a solution notebook's stem), in notebook order."""
        if notebook not in self._cache:
            defaults = notebook_points(Path(self.solutions_dir) / f"{notebook}.ipynb")
            self._cache[notebook] = {ex: self.overrides.get(ex, p) for ex, p in defaults.items()}
        return self._cache[notebook]

    def title(self, notebook: str) -> str:
        return self.titles.get(notebook, notebook)


def load_scheme(solutions_dir, path=None) -> Scheme:
    """The scheme of ``path`` (a TOML file as in the module docstring), or the notebooks' defaults alone."""
    scheme = Scheme(Path(solutions_dir))
    if path is None:
        return scheme
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    unknown = set(data) - {"points", "titles"}
    if unknown:
        raise ConfigError(f"{path}: expected tables [points] and [titles], got {sorted(unknown)}")
    for ex, value in data.get("points", {}).items():
        scheme.overrides[str(ex)] = _number(value, f"{path}: [points] {ex!r}")
    for notebook, title in data.get("titles", {}).items():
        if not isinstance(title, str) or not title.strip():
            raise ConfigError(f"{path}: [titles] {notebook!r}: expected a non-empty string, got {title!r}")
        scheme.titles[str(notebook)] = title
    return scheme


@dataclass(frozen=True)
class Learner:
    """One roster row: the learner's id in the LMS and what else the roster says about them."""

    id: str
    name: str = ""
    email: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""


class Roster:
    """Submitted file names -> :class:`Learner` (see the module docstring)."""

    def __init__(self, learners: dict[str, Learner] | None = None):
        self._by_file = dict(learners or {})

    def learner(self, file_name: str) -> Learner:
        stem = file_name[:-len(".ipynb")] if file_name.endswith(".ipynb") else file_name
        found = self._by_file.get(file_name) or self._by_file.get(stem)
        return found or Learner(id=Path(file_name).stem)

    def __len__(self) -> int:
        return len(self._by_file)


def load_roster(path=None) -> Roster:
    """The roster of the CSV file at ``path`` (see the module docstring), or an empty one."""
    if path is None:
        return Roster()
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
            header = [] if not rows else list(rows[0])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    missing = {"file", "id"} - set(header)
    if not rows or missing:
        raise ConfigError(f"{path}: expected a header row with columns 'file' and 'id', got {header}")
    learners = {}
    for n, row in enumerate(rows, start=2):
        file_name, learner_id = (row.get("file") or "").strip(), (row.get("id") or "").strip()
        if not file_name or not learner_id:
            raise ConfigError(f"{path}, line {n}: expected a file name and an id, got {file_name!r} and {learner_id!r}")
        if file_name in learners:
            raise ConfigError(f"{path}, line {n}: the file {file_name!r} is listed twice")
        extra = {k: (row.get(k) or "").strip() for k in ROSTER_COLUMNS[2:]}
        learners[file_name] = Learner(learner_id, **extra)
    return Roster(learners)
