"""The file a learner handed in: read safely, checked for the shape of a notebook, and matched to its solution.

A submission is a file the instructor collected, and hostile until shown otherwise: it is opened without following
links and read with a bound on bytes and time (:func:`read_regular_file`), its name and its notebook id are checked
before they are used, and no message quotes what it holds. Then:

1. :func:`read_submission`: the file as a v4 notebook whose cells have the shape the grader relies on;
2. :func:`find_solution`: its solution notebook, by the notebook metadata ``attnlab.notebook`` that the learner
   notebooks carry, else by file name (``NN_topic.ipynb``, then ``NN_*``), else by the exercise ids in its cells;
3. :func:`learner_exercise_cells`: the learner's cell of each exercise (by the cell metadata ``attnlab.exercise``,
   else by cell id), or None where it was deleted.

Anything that is not a gradable notebook raises :class:`SubmissionError`, whose message the report shows.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from pathlib import Path

import nbformat

from ..authoring import Exercise, cell_role

MAX_FILE_BYTES = 20 * 2**20  # a submission larger than this is not read
MAX_NAME_CHARS = 200  # a submission's file name longer than this is not graded
READ_SECONDS = 10.0  # reading one submission may take this long
NOT_REGULAR = "not a regular file (a link, folder, FIFO or device is not graded: copy the notebook itself)"
_NOTEBOOK_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


class SubmissionError(Exception):
    """The file cannot be graded: not a notebook, or no solution notebook matches it."""


def read_regular_file(path, limit: int = MAX_FILE_BYTES, seconds: float = READ_SECONDS) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes, read within ``seconds``.

    A submission is a file the instructor collected, so it is opened without following a link (``O_NOFOLLOW``) and
    without waiting for a writer (``O_NONBLOCK``: a FIFO or a device never blocks the batch), and checked with
    ``fstat``; the messages never quote what the file holds.
    """
    try:
        before = os.lstat(path)
    except OSError as exc:
        raise SubmissionError(f"cannot read the file: {exc.strerror}") from None
    if not stat.S_ISREG(before.st_mode):
        raise SubmissionError(NOT_REGULAR)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.ENODEV):  # replaced by a link or a device since lstat
            raise SubmissionError(NOT_REGULAR) from None
        raise SubmissionError(f"cannot read the file: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
            raise SubmissionError(NOT_REGULAR)
        if info.st_size > limit:
            raise SubmissionError(_too_large(info.st_size, limit))
        chunks, total, give_up = [], 0, time.monotonic() + seconds
        while True:
            if time.monotonic() > give_up:
                raise SubmissionError(f"reading the file took longer than {seconds:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # a file of /proc or /sys that waits for data: not a notebook on disk
                raise SubmissionError(NOT_REGULAR) from None
            except OSError as exc:
                raise SubmissionError(f"cannot read the file: {exc.strerror}") from None
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise SubmissionError(_too_large(total, limit))
            chunks.append(chunk)
    finally:
        os.close(fd)


def _too_large(size: int, limit: int) -> str:
    return (f"the file is {size / 2**20:.0f} MiB; the grader reads notebooks of up to {limit // 2**20} MiB (clear the "
            "outputs and save again)")


def check_file_name(path) -> None:
    """SubmissionError for a file name the grader will not take (longer than ``MAX_NAME_CHARS``)."""
    name = Path(path).name
    if len(name) > MAX_NAME_CHARS:
        raise SubmissionError(f"the file name is {len(name)} characters long; the grader takes names of up to "
                              f"{MAX_NAME_CHARS} (rename the file)")


def read_submission(path: Path):
    """The submission as a v4 notebook whose cells have the shape the grader relies on, or SubmissionError."""
    check_file_name(path)
    try:
        text = read_regular_file(path).decode("utf-8")
    except UnicodeDecodeError:
        raise SubmissionError("not a notebook (not a text file)") from None
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several kinds on bad JSON, deep nesting or an unknown format
        # named by kind only: nbformat's messages quote the file, which may be anything the learner linked to
        why = {"NotJSONError": "not JSON", "RecursionError": "nested too deeply"}.get(type(exc).__name__,
                                                                                     "not a known notebook format")
        raise SubmissionError(f"not a notebook ({why})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise SubmissionError("not a notebook (no cells)")
    if not isinstance(nb.get("metadata"), dict):
        nb["metadata"] = nbformat.NotebookNode()
    for i, cell in enumerate(nb.cells):
        if not isinstance(cell, dict):
            raise SubmissionError(f"not a valid notebook (cell {i} is not a cell)")
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise SubmissionError(f"not a valid notebook (the source of cell {i} is not text)")
        cell["source"] = source
        if not isinstance(cell.get("cell_type"), str):
            raise SubmissionError(f"not a valid notebook (cell {i} has no cell type)")
        if not isinstance(cell.get("metadata", {}), dict):
            cell["metadata"] = nbformat.NotebookNode()
        if "id" in cell and not isinstance(cell["id"], str):
            del cell["id"]
    return nb


def find_solution(learner, path: Path, solutions_dir: Path) -> Path:
    """The solution notebook a submission belongs to (see the module docstring, step 2)."""
    solutions_dir = Path(solutions_dir)
    meta = learner.get("metadata", {}).get("attnlab")
    notebook_id = meta.get("notebook") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and "notebook" in meta and not (
            isinstance(notebook_id, str) and _NOTEBOOK_ID.fullmatch(notebook_id)):
        what = ("not text" if not isinstance(notebook_id, str) else f"{len(notebook_id)} characters long"
                if len(notebook_id) > 100 else "a character other than letters, digits, '_', '.' and '-'")
        raise SubmissionError(f"the notebook id in the file's metadata (attnlab.notebook) is not a course notebook "
                              f"name ({what})")
    candidates = []
    if isinstance(notebook_id, str):
        candidates.append(solutions_dir / f"{Path(notebook_id).name}.ipynb")
    candidates.append(solutions_dir / Path(path).name)
    number = re.match(r"(\d\d)_", Path(path).name)
    numbers = [number.group(1)] if number else []
    for cell in learner.cells:
        role = cell_role(cell)
        if role and re.match(r"\d+\.", role[0]):
            numbers.append(f"{int(role[0].split('.')[0]):02d}")
    for nn in numbers:
        candidates += sorted(solutions_dir.glob(f"{nn}_*.ipynb"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SubmissionError(f"no solution notebook in {solutions_dir} matches this notebook")


def learner_exercise_cells(learner, solution, exercises: list[Exercise]) -> dict:
    """The learner's cell of each exercise, or None when it was deleted."""
    by_exercise, by_id = {}, {}
    for cell in learner.cells:
        if cell.get("cell_type") != "code":
            continue
        role = cell_role(cell)
        if role is not None and role[1] == "solution":
            by_exercise[role[0]] = cell  # the last one wins, as it would when the notebook is run top to bottom
        if cell.get("id"):
            by_id[cell["id"]] = cell
    found = {}
    for ex in exercises:
        cell = by_exercise.get(ex.id)
        if cell is None:  # metadata lost (some editors drop it): fall back on the cell id
            same_id = by_id.get(solution.cells[ex.exercise_cell].get("id"))
            cell = same_id if same_id is not None and cell_role(same_id) is None else None
        found[ex.id] = cell
    return found

