"""Authoring tools: learner notebooks generated from the solution notebooks, and re-execution in place.

    python -m attnlab_course.authoring learner notebooks/solutions/*.ipynb   # write notebooks/NN_topic.ipynb
    python -m attnlab_course.authoring verify [notebooks/solutions/*.ipynb]  # exit 1 if a learner notebook is out of date
    python -m attnlab_course.authoring execute NOTEBOOK...                    # re-run in a fresh kernel, outputs in place

The solution notebook ``notebooks/solutions/NN_topic.ipynb`` is the source of truth. Each "Try it" exercise is two
consecutive code cells:

* the exercise cell, metadata ``{"attnlab": {"exercise": "N.k", "role": "solution"}}``, defines a function whose
  reference body sits between the lines ``### BEGIN SOLUTION`` and ``### END SOLUTION``;
* the check cell, metadata ``{"attnlab": {"exercise": "N.k", "role": "check"}}``, is ``check("N.k", function)`` and
  its stored output is ``Exercise N.k: passed``.

The learner notebook is the same notebook with every solution region replaced by ``# your code here`` and
``raise NotImplementedError`` (at the region's indentation) and every check cell's output replaced by
``Exercise N.k: not attempted yet``. Everything else (prose, figures, stored outputs, cell ids, execution counts)
is copied, and the notebook metadata gains ``{"attnlab": {"notebook": "NN_topic"}}`` so that the grader finds the
solution whatever a submission's file name. Generation is deterministic and needs no kernel.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import paths

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = ("# your code here", "raise NotImplementedError")
EXERCISE_ID = re.compile(r"^[1-9][0-9]*\.[1-9][0-9]*$")
NBVAL_MARKER = re.compile(r"^\s*#\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$")


class FormatError(ValueError):
    """A solution notebook does not follow the exercise format (see the module docstring)."""


@dataclass(frozen=True)
class Exercise:
    """One "Try it" exercise of a solution notebook: its id and the indices of its two cells in ``nb.cells``."""

    id: str
    exercise_cell: int
    check_cell: int


def passed_line(exercise_id: str) -> str:
    return f"Exercise {exercise_id}: passed\n"


def not_attempted_line(exercise_id: str) -> str:
    return f"Exercise {exercise_id}: not attempted yet\n"


def cell_role(cell) -> tuple[str, str] | None:
    """``(exercise_id, role)`` from a cell's ``attnlab`` metadata, or None for an ordinary cell."""
    meta = cell.get("metadata", {}).get("attnlab")
    if not isinstance(meta, dict) or "exercise" not in meta or "role" not in meta:
        return None
    return str(meta["exercise"]), str(meta["role"])


def _stream_text(outputs) -> str | None:
    """The stdout text of ``outputs`` if that is all they hold, else None."""
    if not outputs or any(o.get("output_type") != "stream" or o.get("name") != "stdout" for o in outputs):
        return None
    return "".join(o.get("text", "") for o in outputs)


def stub_solution(source: str, where: str = "cell") -> str:
    """Replace each ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region of ``source`` by the learner's stub.

    The stub takes the indentation of the ``### BEGIN SOLUTION`` line. Raises FormatError on unbalanced markers.

    Examples
    --------
    >>> print(stub_solution("def f(x):\\n    ### BEGIN SOLUTION\\n    return 2 * x\\n    ### END SOLUTION"))
    def f(x):
        # your code here
        raise NotImplementedError
    """
    out, indent = [], None
    for lineno, line in enumerate(source.split("\n"), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if indent is not None:
                raise FormatError(f"{where}, line {lineno}: {BEGIN} inside another solution region")
            indent = line[: len(line) - len(line.lstrip())]
        elif marker == END:
            if indent is None:
                raise FormatError(f"{where}, line {lineno}: {END} without {BEGIN}")
            out += [indent + s for s in STUB]
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise FormatError(f"{where}: {BEGIN} is never closed by {END}")
    return "\n".join(out)


def _has_region(source: str) -> bool:
    return any(line.strip() in (BEGIN, END) for line in source.split("\n"))


def find_exercises(nb, name: str = "notebook") -> list[Exercise]:
    """The exercises of a solution notebook, validated against the format in the module docstring."""
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    exercises: list[Exercise] = []
    seen: set[str] = set()
    for pos, i in enumerate(code):
        cell, where = nb.cells[i], f"{name}, cell {i}"
        role = cell_role(cell)
        if role is None:
            if _has_region(cell.source):
                raise FormatError(f"{where} has a solution region but no attnlab exercise metadata")
            continue
        ex_id, kind = role
        if not EXERCISE_ID.match(ex_id):
            raise FormatError(f"{where}: exercise id {ex_id!r} is not of the form 'N.k'")
        if kind == "check":
            if not exercises or exercises[-1].check_cell != i:
                raise FormatError(f"{where}: check cell of exercise {ex_id} does not follow its exercise cell")
            continue
        if kind != "solution":
            raise FormatError(f"{where}: attnlab role {kind!r} is neither 'solution' nor 'check'")
        if ex_id in seen:
            raise FormatError(f"{where}: exercise {ex_id} appears twice")
        if not _has_region(cell.source):
            raise FormatError(f"{where}: exercise {ex_id} has no {BEGIN} ... {END} region")
        stub_solution(cell.source, where)  # raises on unbalanced markers
        if pos + 1 == len(code) or cell_role(nb.cells[code[pos + 1]]) != (ex_id, "check"):
            raise FormatError(f"{where}: exercise {ex_id} is not followed by its check cell (role 'check')")
        check = nb.cells[code[pos + 1]]
        if not re.fullmatch(rf'\s*check\(\s*["\']{re.escape(ex_id)}["\']\s*,\s*[A-Za-z_]\w*\s*\)\s*', check.source):
            raise FormatError(f"{name}, cell {code[pos + 1]}: a check cell must be exactly check({ex_id!r}, function)")
        if _stream_text(check.outputs) != passed_line(ex_id) or check.execution_count is None:
            raise FormatError(
                f"{name}, cell {code[pos + 1]}: the stored output of check {ex_id} must be {passed_line(ex_id)!r};"
                " execute the solution notebook (make notebooks)"
            )
        seen.add(ex_id)
        exercises.append(Exercise(ex_id, i, code[pos + 1]))
    return exercises


def learner_notebook(solution, notebook_id: str, name: str = "notebook"):
    """The learner's copy of a solution notebook (a new NotebookNode; ``solution`` is not changed)."""
    nb = copy.deepcopy(solution)
    for ex in find_exercises(nb, name):
        nb.cells[ex.exercise_cell].source = stub_solution(nb.cells[ex.exercise_cell].source)
        nb.cells[ex.check_cell].outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=not_attempted_line(ex.id))
        ]
    attnlab_meta = dict(nb.metadata.get("attnlab", {}))
    attnlab_meta["notebook"] = notebook_id
    nb.metadata["attnlab"] = attnlab_meta
    return nb


def learner_path(solution_path: Path) -> Path:
    """``notebooks/solutions/NN_topic.ipynb`` -> ``notebooks/NN_topic.ipynb``."""
    solution_path = Path(solution_path)
    return solution_path.parent.parent / solution_path.name


def render_learner(solution_path: Path) -> str:
    """The exact text of the learner notebook generated from ``solution_path``."""
    solution_path = Path(solution_path)
    solution = nbformat.read(solution_path, as_version=4)
    nb = learner_notebook(solution, solution_path.stem, name=str(solution_path))
    return nbformat.writes(nb) + "\n"


def learner_work(path: Path, solution=None) -> list[str]:
    """Exercises of the learner notebook at ``path`` where a stub was replaced by code: someone's work.

    A generated learner notebook has one stub (``# your code here``, ``raise NotImplementedError``) per solution
    region of each exercise cell, whatever else the solution notebook changed since; fewer stubs than the solution
    (default: than one) has regions means a learner has written there.
    """
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # not readable as a notebook: nothing that nbformat could read is lost
        return []
    regions = {}
    for cell in solution.cells if solution is not None else []:
        role = cell_role(cell)
        if role is not None and role[1] == "solution":
            regions[role[0]] = sum(line.strip() == BEGIN for line in cell.source.split("\n"))
    done = []
    for cell in nb.cells:
        role = cell_role(cell)
        if role is None or role[1] != "solution":
            continue
        lines = [line.strip() for line in cell.get("source", "").split("\n")]
        stubs = sum(lines[i:i + 2] == list(STUB) for i in range(len(lines)))
        if stubs < regions.get(role[0], 1):
            done.append(role[0])
    return done


def write_learner(solution_paths, force: bool = False) -> list[Path]:
    """Generate the learner notebook of each solution notebook; return the files that changed.

    A learner notebook that holds a learner's work (see :func:`learner_work`) is not overwritten unless ``force``;
    FormatError names it instead.
    """
    changed = []
    for solution_path in map(Path, solution_paths):
        text, target = render_learner(solution_path), learner_path(solution_path)
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        work = learner_work(target, nbformat.read(solution_path, as_version=4)) if target.exists() else []
        if work and not force:
            raise FormatError(
                f"{target} holds work on exercise(s) {', '.join(work)}; not overwritten. Save it under another "
                "name first, or pass --force to replace it."
            )
        target.write_text(text, encoding="utf-8")
        changed.append(target)
    return changed


def solution_notebooks(solutions_dir: Path | None = None) -> list[Path]:
    """Every ``NN_*.ipynb`` in the solutions folder (default: :func:`.paths.solutions_dir`)."""
    return paths.solution_notebooks(solutions_dir or paths.solutions_dir())


def stale_learner_notebooks(solution_paths=None) -> list[str]:
    """Learner notebooks that are missing or differ from what ``learner`` would write now, with the reason."""
    stale = []
    for solution_path in map(Path, solution_notebooks() if solution_paths is None else solution_paths):
        target = learner_path(solution_path)
        if not target.exists():
            stale.append(f"{target} is missing")
        elif target.read_text(encoding="utf-8") != render_learner(solution_path):
            stale.append(f"{target} is out of date with {solution_path}")
    return stale


def execute(path: Path, timeout: float = 120) -> None:
    """Re-execute a notebook in place in a fresh kernel of this Python, cwd = the notebook's folder.

    Cell and notebook metadata are kept, except the per-cell timing (``metadata.execution``) that a previous run may
    have recorded: it changes on every run and is not recorded again.
    """
    import subprocess

    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_manager_class=_current_env_kernel_manager(),
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    client.execute(stderr=subprocess.DEVNULL)  # the kernel's own log; cell output arrives by messages
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def _current_env_kernel_manager():
    """A KernelManager class whose "python3" kernel is always this interpreter (never a user-wide kernelspec)."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from traitlets import default

    class CurrentEnvSpecs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            spec = ipykernel.kernelspec.get_kernel_dict()
            spec["argv"][0] = sys.executable
            return self.kernel_spec_class(resource_dir=ipykernel.kernelspec.RESOURCES, **spec)

    class CurrentEnvKernelManager(KernelManager):
        @default("kernel_spec_manager")
        def _default_kernel_spec_manager(self):
            return CurrentEnvSpecs(parent=self)

    return CurrentEnvKernelManager


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab_course.authoring", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("learner", help="generate notebooks/NN_topic.ipynb from notebooks/solutions/NN_topic.ipynb")
    p.add_argument("solutions", nargs="+", type=Path)
    p.add_argument("--force", action="store_true", help="overwrite learner notebooks even if they hold work")
    p = sub.add_parser("verify", help="exit 1 if a learner notebook is missing or out of date")
    p.add_argument("solutions", nargs="*", type=Path)
    p = sub.add_parser("execute", help="re-execute notebooks in place in a fresh kernel")
    p.add_argument("notebooks", nargs="+", type=Path)
    p.add_argument("--timeout", type=float, default=120, help="seconds per cell (default 120)")
    args = parser.parse_args(argv)

    try:
        if args.command == "learner":
            for path in args.solutions:
                print(f"{learner_path(path)}: {'written' if write_learner([path], args.force) else 'up to date'}")
        elif args.command == "verify":
            stale = stale_learner_notebooks(args.solutions or None)
            for line in stale:
                print(line, file=sys.stderr)
            if stale:
                print("run `make learner` to regenerate them", file=sys.stderr)
                return 1
        else:
            from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

            for path in args.notebooks:
                print(f"executing {path}", flush=True)
                try:
                    execute(path, timeout=args.timeout)
                except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
                    print(f"error: {path} was not changed: {exc}", file=sys.stderr)
                    return 1
    except FormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
