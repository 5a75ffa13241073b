"""The Colab cell: a first code cell in every notebook that sets the notebook up on Google Colab, and does nothing else.

    python -m attnlab_course.colab --write notebooks/solutions/*.ipynb notebooks/00_start_here.ipynb
    python -m attnlab_course.colab --check notebooks/solutions/*.ipynb notebooks/00_start_here.ipynb  # exit 1: stale

On Colab, a notebook opened from GitHub arrives alone: no repository, no ``attnlab``. The Colab cell, run first,
pip-installs ``attnlab`` from the course repository at this release's tag and turns on the widget manager Colab needs
for the explorers (``google.colab.output.enable_custom_widget_manager()``). Anywhere else it only looks at
``sys.modules`` (Colab's kernel has imported ``google.colab`` before any cell runs) and at the environment variable
``COLAB_RELEASE_TAG`` (set on Colab's hosted runtimes), so it prints nothing, installs nothing and imports nothing
new: nbval, the grader and a JupyterLab learner never notice it.

Which version it installs: the tag ``v<version>`` of the repository named in pyproject.toml (``[project.urls]
Repository``), where ``<version>`` is attnlab's version. A notebook cannot name the commit it is committed in, so
the release tag stands for it: ``make release TAG=v<version>`` (:mod:`attnlab_course.release`) sets the version and
rewrites this cell in every notebook with the course's other links; commit, and tag the commit ``v<version>``.
``--ref`` and ``--repository`` override both for a one-off cell (e.g. ``--ref main`` to try a branch).

The cell is the code cell with metadata ``{"attnlab": {"role": "colab"}}``. ``--write`` puts exactly one such cell
immediately before the notebook's first other code cell (after the title and any opening prose, so the header stays
the first cell), with the current source; a notebook that already has it up to date is left byte for byte as it was.
The learner notebooks get the cell from their solution notebook (``make learner`` copies it as is).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from . import paths

ROLE = "colab"
CELL_ID = "colab-setup"

TEMPLATE = '''\
# Google Colab only: install the course library, attnlab, at this notebook's release and turn on Colab's widget
# manager for the explorers. Anywhere else (JupyterLab, Binder, a class hub) this cell does nothing.
import os
import sys

if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
    import subprocess

    release = "{requirement}"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", release], check=True)
    from google.colab import output

    output.enable_custom_widget_manager()'''


def _project() -> tuple[str, str]:
    """``(version, repository URL)`` from pyproject.toml next to the sources, else from the installed metadata."""
    if paths.PYPROJECT.is_file():
        from . import release

        now = release.current()
        return now.version, now.repository
    from importlib.metadata import metadata

    meta = metadata("attnlab")
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    return meta["Version"], urls["Repository"]


def requirement(repository: str | None = None, ref: str | None = None) -> str:
    """The pip requirement the cell installs, e.g. ``attnlab @ git+https://github.com/o/r@v0.1.0``."""
    version, default_repository = _project()
    repository = (repository or default_repository).rstrip("/")
    return f"attnlab @ git+{repository}@{ref or 'v' + version}"


def cell_source(req: str | None = None) -> str:
    """The source of the Colab cell that installs ``req`` (default: :func:`requirement`)."""
    return TEMPLATE.format(requirement=req or requirement())


def is_colab_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("attnlab")
    return cell.get("cell_type") == "code" and isinstance(meta, dict) and meta.get("role") == ROLE


def with_colab_cell(nb, source: str | None = None):
    """A copy of ``nb`` with one up-to-date Colab cell before its first other code cell (see the module docstring).

    An existing Colab cell keeps its id, outputs and execution count when its source does not change.
    """
    import copy

    source = source or cell_source()
    nb = copy.deepcopy(nb)
    old = [c for c in nb.cells if is_colab_cell(c)]
    cells = [c for c in nb.cells if not is_colab_cell(c)]
    if old and old[0].source == source:
        cell = old[0]
    else:
        cell = nbformat.v4.new_code_cell(source, metadata={"attnlab": {"role": ROLE}})
        if old and old[0].get("id"):
            cell.id = old[0].id
        elif all(c.get("id") != CELL_ID for c in cells):
            cell.id = CELL_ID  # else keep nbformat's random id: ids are unique within a notebook
    first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    cells.insert(first_code, cell)
    nb.cells = cells
    return nb


def is_up_to_date(nb, source: str | None = None) -> bool:
    """Whether ``nb`` has exactly the Colab cell :func:`with_colab_cell` would give it, where it would put it."""
    return nbformat.writes(with_colab_cell(nb, source)) == nbformat.writes(nb)


def write(notebooks, source: str | None = None) -> list[Path]:
    """Insert or update the Colab cell of each notebook in place; return the files that changed."""
    changed = []
    for path in map(Path, notebooks):
        nb = nbformat.read(path, as_version=4)
        if is_up_to_date(nb, source):
            continue
        path.write_text(nbformat.writes(with_colab_cell(nb, source)) + "\n", encoding="utf-8")
        changed.append(path)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab_course.colab", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="insert or update the Colab cell in place")
    action.add_argument("--check", action="store_true", help="exit 1 if a notebook's Colab cell is missing or stale")
    parser.add_argument("--ref", help="the git tag, branch or commit to install (default: v<attnlab version>)")
    parser.add_argument("--repository", help="the repository URL (default: pyproject.toml's Repository)")
    args = parser.parse_args(argv)
    source = cell_source(requirement(args.repository, args.ref))
    if args.write:
        changed = set(write(args.notebooks, source))
        for path in args.notebooks:
            print(f"{path}: {'written' if path in changed else 'up to date'}")
        return 0
    stale = [p for p in args.notebooks if not is_up_to_date(nbformat.read(p, as_version=4), source)]
    for path in stale:
        print(f"{path}: the Colab cell is missing or out of date (python -m attnlab_course.colab --write {path})",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
