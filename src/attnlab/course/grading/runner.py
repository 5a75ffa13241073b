"""Check a learner's "Try it" exercises through nbval: ``attnlab-check NOTEBOOK`` or ``make check NB=NOTEBOOK``.

How one submission is graded:

1. Find its solution notebook: by the notebook metadata ``attnlab.notebook`` that the learner notebooks carry, else by
   file name (``NN_topic.ipynb``, then ``NN_*``), else by the exercise ids in its cells.
2. Build a grading notebook from the solution notebook. Each of its exercise cells is replaced by the learner's cell of
   the same exercise (found by the cell metadata ``attnlab.exercise``, else by cell id), keeping only the learner's
   source, with any nbval marker comment blanked out. Every check cell is the solution's, with its expected output
   ``Exercise N.k: passed`` and a fresh ``from attnlab.exercises import check`` in front, so a learner who redefines
   ``check`` is still checked by the real one. Every other cell is the solution's, with its output ignored. Outputs
   the learner saved are never read.
3. Run it with ``pytest --nbval`` (strict) in a temporary directory, in a subprocess, with a per-cell timeout for the
   exercise cells (``--timeout``). nbval interrupts a cell that runs too long and goes on with the next cells, so the
   other exercises are still graded; if the kernel cannot be interrupted it is stopped, and the notebook is run again
   without that exercise.
4. Read back each check cell's fresh output and report, per exercise: passed, failed (the check's message), not
   attempted, error (the learner's exception), timed out, or missing (the exercise cell was deleted).

Learner code runs with the privileges of whoever runs the grader: grade untrusted submissions in a container.

``attnlab-check --batch DIR --csv results.csv`` grades every file of DIR (one per learner) in parallel.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..authoring import (
    Exercise,
    FormatError,
    cell_role,
    default_solutions_dir,
    find_exercises,
    not_attempted_line,
    passed_line,
)

DEFAULT_TIMEOUT = 5.0
SETUP_TIMEOUT = 120.0
STATUSES = ("passed", "failed", "not attempted", "error", "timed out", "missing")
_NBVAL_MARKER = re.compile(r"^\s*#+\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$")
_CELL_FRAME = re.compile(r"Cell In\[\d+\], line (\d+)(?:, in (\w+))?")
_KERNEL_DEAD = "Kernel dead"


class SubmissionError(Exception):
    """The file cannot be graded: not a notebook, or no solution notebook matches it."""


@dataclass
class Result:
    """The result of one exercise: a status from STATUSES and, unless passed, a message for the learner."""

    exercise: str
    status: str
    message: str = ""


@dataclass
class Report:
    """The grading of one submission. ``problem`` is set when it could not be graded at all."""

    path: Path
    notebook: str = ""
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problem and bool(self.results) and all(r.status == "passed" for r in self.results)


# --- finding the pieces ------------------------------------------------------------------------------------------


def read_submission(path: Path):
    """The submission as a v4 notebook, or SubmissionError saying why it is not one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SubmissionError("not a notebook (not a text file)") from None
    except OSError as exc:
        raise SubmissionError(f"cannot read the file: {exc.strerror}") from None
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several kinds on bad JSON or an unknown format
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SubmissionError(f"not a notebook ({first[:120]})") from None
    if not isinstance(nb.get("cells"), list):
        raise SubmissionError("not a notebook (no cells)")
    return nb


def find_solution(learner, path: Path, solutions_dir: Path) -> Path:
    """The solution notebook a submission belongs to (see the module docstring, step 1)."""
    solutions_dir = Path(solutions_dir)
    meta = learner.get("metadata", {}).get("attnlab")
    notebook_id = meta.get("notebook") if isinstance(meta, dict) else None
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


def strip_nbval_markers(source: str) -> str:
    """Blank out nbval marker comments (line numbers stay the same)."""
    return "\n".join("" if _NBVAL_MARKER.match(line) else line for line in source.split("\n"))


def grading_notebook(solution, exercises: list[Exercise], learner_cells: dict, skip=frozenset()):
    """The notebook nbval runs (see the module docstring, step 2); exercises in ``skip`` are left out."""
    nb = copy.deepcopy(solution)
    drop = set()
    for ex in exercises:
        learner_cell = learner_cells.get(ex.id)
        if learner_cell is None or ex.id in skip:
            drop |= {ex.exercise_cell, ex.check_cell}
            continue
        cell = nb.cells[ex.exercise_cell]
        cell.source = strip_nbval_markers(learner_cell.get("source", ""))
        cell.metadata = {"attnlab": {"exercise": ex.id, "role": "solution"}, "tags": ["nbval-ignore-output"]}
        cell.outputs, cell.execution_count = [], None
        check = nb.cells[ex.check_cell]
        check.source = "from attnlab.exercises import check\n" + check.source
        check.metadata = {"attnlab": {"exercise": ex.id, "role": "check"}}
        check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=passed_line(ex.id))]
        check.execution_count = check.execution_count or 1
    last_check = max((ex.check_cell for ex in exercises if ex.check_cell not in drop), default=-1)
    cells = []
    for i, cell in enumerate(nb.cells[: last_check + 1]):  # what follows the last check cannot change a result
        if cell.cell_type != "code" or i in drop:
            continue
        if "attnlab" not in cell.metadata:
            tags = list(cell.metadata.get("tags", []))
            cell.metadata["tags"] = tags + ["nbval-ignore-output"]
        cells.append(cell)
    nb.cells = cells
    return nb


# --- running nbval -----------------------------------------------------------------------------------------------


def run_nbval(nb, timeout: float = DEFAULT_TIMEOUT, setup_timeout: float = SETUP_TIMEOUT) -> list[dict]:
    """Run ``nb`` with strict nbval in a fresh temporary directory; the record of every cell (see _nbval_hooks)."""
    with tempfile.TemporaryDirectory(prefix="attnlab-grade-") as tmp:
        tmp = Path(tmp)
        work = tmp / "work"  # the kernel's working directory
        work.mkdir()
        notebook, record, ini = work / "submission.ipynb", tmp / "record.json", tmp / "pytest.ini"
        nbformat.write(nb, notebook)
        ini.write_text("[pytest]\n")
        command = [
            sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(tmp),
            "-p", "nbval.plugin", "-p", "attnlab.course.grading.nbval_hooks", "-p", "no:cacheprovider",
            "--nbval", "--nbval-current-env", f"--nbval-cell-timeout={timeout:g}",
            f"--attnlab-setup-timeout={setup_timeout:g}", f"--attnlab-record={record}",
            "-q", "--no-header", "-p", "no:warnings", str(notebook),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only nbval and our hooks: faster and unaffected by other plugins
        # A fresh IPython profile: no user startup files, and figures are not rendered (their outputs are ignored,
        # and rendering PNGs is most of a notebook's run time).
        profile = tmp / "ipython" / "profile_default"
        profile.mkdir(parents=True)
        (profile / "ipython_kernel_config.py").write_text(
            "c.InlineBackend.figure_formats = set()\nc.HistoryManager.enabled = False\n")
        env["IPYTHONDIR"] = str(tmp / "ipython")
        limit = setup_timeout + 60 + len(nb.cells) * (timeout + 10)
        proc = subprocess.Popen(command, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill(proc)
            proc.communicate()
            raise RuntimeError(f"grading did not finish within {limit:.0f} s") from None
        finally:
            if proc.poll() is None:
                _kill(proc)
        if not record.exists():
            tail = "\n".join(log.strip().splitlines()[-15:])
            raise RuntimeError(f"nbval did not run (pytest exit status {proc.returncode}):\n{tail}")
        return json.loads(record.read_text(encoding="utf-8"))


def _kill(proc) -> None:
    """Stop pytest and the kernel it started (they share a session on POSIX)."""
    if hasattr(os, "killpg"):
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()


# --- reading the results -----------------------------------------------------------------------------------------


def _stdout_stderr(rec: dict) -> tuple[str, str]:
    streams = [o for o in rec["outputs"] if o["output_type"] == "stream"]
    return ("".join(o["text"] for o in streams if o["name"] == "stdout"),
            "".join(o["text"] for o in streams if o["name"] == "stderr"))


def _location(error: dict, in_check: bool) -> str:
    """Where in the learner's cell an exception was raised, from the traceback (empty when unknown)."""
    frames = _CELL_FRAME.findall("\n".join(error.get("traceback", [])))
    if not frames:
        return ""
    line, function = frames[-1]
    if function:
        return f" (line {line} of your exercise cell, in {function})"
    return "" if in_check else f" (line {line} of your exercise cell)"


def _cell_result(ex_id: str, rec: dict, timeout: float, in_check: bool) -> Result:
    """The result of an exercise from the record of its exercise cell (``in_check=False``) or its check cell."""
    if rec["ok"]:
        return Result(ex_id, "passed")
    errors = [o for o in rec["outputs"] if o["output_type"] == "error"]
    if rec["message"].startswith("Timeout") or (errors and errors[-1]["ename"] == "KeyboardInterrupt"):
        what = "your function did not return" if in_check else "your exercise cell did not finish"
        why = ": an infinite loop, or far too much work?"
        if "Failed to interrupt" in rec["message"] or "waiting for output" in rec["message"]:
            why = " and could not be interrupted (does it catch KeyboardInterrupt, or did it stop the kernel?)"
        return Result(ex_id, "timed out", f"{what} within {timeout:g} s{why}")
    if errors:
        ename, evalue = errors[-1]["ename"], errors[-1]["evalue"]
        if ename == "ExerciseFailed":  # also when the learner called check in their own cell
            return Result(ex_id, "failed", evalue)
        message = f"{ename}: {evalue}" if evalue else ename
        if ename == "NameError" and in_check:
            message += " (did you rename the function, or does your exercise cell stop with an error?)"
        return Result(ex_id, "error", message + _location(errors[-1], in_check))
    stdout, stderr = _stdout_stderr(rec)
    if in_check and stdout == not_attempted_line(ex_id) and not stderr:
        return Result(ex_id, "not attempted")
    if in_check and rec["message"].startswith("Cell outputs differ"):
        extra = (stdout.replace(passed_line(ex_id), "") + stderr).strip()
        if passed_line(ex_id) in stdout or not_attempted_line(ex_id) in stdout:
            verdict = "the answer is right" if passed_line(ex_id) in stdout else "the function is not written yet"
            return Result(ex_id, "failed", f"{verdict}, but your function printed or warned while it was checked; "
                                           f"a check must print only {passed_line(ex_id).strip()!r}. It printed:\n"
                                           f"{extra}")
        return Result(ex_id, "failed", f"the check printed {stdout.strip()!r} instead of "
                                       f"{passed_line(ex_id).strip()!r}")
    return Result(ex_id, "error", rec["message"].strip().splitlines()[0] if rec["message"].strip() else "failed")


def _read_records(records: list[dict], pending: list[str], timeout: float):
    """Results of the ``pending`` exercises from one nbval run.

    Returns ``(results, notes, culprit)``. When the kernel died, only the exercises before that point have results,
    and ``culprit`` is the exercise during which it died (None if it died in one of the notebook's own cells).
    """
    for rec in records:
        if rec["when"] == "setup" and not rec["ok"]:  # nbval could not start the kernel: not the learner's doing
            raise RuntimeError(f"nbval could not run the notebook: {rec['message'].strip()[:300]}")
    dead = next((i for i, r in enumerate(records) if r["message"].startswith(_KERNEL_DEAD)), len(records))
    cells: dict[str, dict] = {}
    notes = []
    for rec in records[:dead]:
        meta = rec["attnlab"] or {}
        if "exercise" in meta:
            cells.setdefault(meta["exercise"], {})[meta["role"]] = rec
        elif not rec["ok"] and rec["when"] == "call":
            errors = [o for o in rec["outputs"] if o["output_type"] == "error"]
            what = f"{errors[-1]['ename']}: {errors[-1]['evalue']}" if errors else rec["message"].strip()
            notes.append(f"a cell of the notebook that is not an exercise failed ({rec.get('first_line', '')!r}): "
                         f"{what.splitlines()[0] if what else 'failed'}; does an exercise cell change a shared name?")
    culprit = None
    if dead < len(records):
        last = (records[dead - 1]["attnlab"] or {}) if dead > 0 else {}
        culprit = last.get("exercise")
        if culprit is None:
            notes.append("the kernel stopped in a cell that is not an exercise; the exercises after it were not graded")
    results = {}
    for ex_id in pending:
        recs = cells.get(ex_id, {})
        exercise_rec, check_rec = recs.get("solution"), recs.get("check")
        if exercise_rec is not None and not exercise_rec["ok"]:
            result = _cell_result(ex_id, exercise_rec, timeout, in_check=False)
        elif check_rec is not None:
            result = _cell_result(ex_id, check_rec, timeout, in_check=True)
        elif ex_id == culprit:
            result = Result(ex_id, "error", "the kernel died while running your code (did it call exit(), or use "
                                            "all the memory?)")
        elif dead < len(records) and culprit is None:
            result = Result(ex_id, "error", "not graded: the kernel stopped before this exercise")
        else:
            continue  # left for the next run
        results[ex_id] = result
    return results, notes, culprit


def grade(path, solutions_dir=None, timeout: float = DEFAULT_TIMEOUT) -> Report:
    """Grade one submission; never raises for a bad submission (see ``Report.problem``)."""
    start = time.monotonic()
    report = Report(Path(path))
    try:
        learner = read_submission(report.path)
        try:
            solution_path = find_solution(learner, report.path, solutions_dir or default_solutions_dir())
        except (AttributeError, TypeError, KeyError) as exc:  # valid JSON, but not shaped like a notebook
            raise SubmissionError(f"not a valid notebook ({type(exc).__name__}: {exc})") from None
        report.notebook = solution_path.stem
        solution = nbformat.read(solution_path, as_version=4)
        exercises = find_exercises(solution, str(solution_path))
        try:
            cells = learner_exercise_cells(learner, solution, exercises)
        except (AttributeError, TypeError, KeyError) as exc:
            raise SubmissionError(f"not a valid notebook ({type(exc).__name__}: {exc})") from None
        results = {ex.id: Result(ex.id, "missing", "the exercise cell is not in your notebook (deleted?)")
                   for ex in exercises if cells[ex.id] is None}
        skip = set(results)
        while len(results) < len(exercises):
            pending = [ex.id for ex in exercises if ex.id not in results]
            records = run_nbval(grading_notebook(solution, exercises, cells, skip), timeout)
            found, notes, culprit = _read_records(records, pending, timeout)
            results.update(found)
            report.notes += [n for n in notes if n not in report.notes]
            if culprit is None and len(results) < len(exercises):
                for ex_id in pending:  # no culprit and nothing more to learn: stop rather than loop
                    results.setdefault(ex_id, Result(ex_id, "error", "not graded: the check did not run"))
            if culprit is not None:
                skip.add(culprit)
        report.results = [results[ex.id] for ex in exercises]
    except SubmissionError as exc:
        report.problem = str(exc)
    except (FormatError, RuntimeError) as exc:
        report.problem = f"grading failed: {exc}"
    report.seconds = time.monotonic() - start
    return report


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def grade_many(paths, solutions_dir=None, timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None,
               progress: bool = True) -> list[Report]:
    """Grade many submissions in parallel (``jobs`` at once, default: the available cores), in input order."""
    from tqdm import tqdm

    paths = [Path(p) for p in paths]
    jobs = jobs or available_cores()
    reports: dict[Path, Report] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # each grading is its own pytest + kernel process
        futures = {pool.submit(grade, p, solutions_dir, timeout): p for p in paths}
        bar = tqdm(as_completed(futures), total=len(futures), unit="notebook", file=sys.stderr,
                   disable=None if progress else True)  # None: shown on a terminal only
        for future in bar:
            path = futures[future]
            try:
                reports[path] = future.result()
            except Exception as exc:  # a bug of ours must not stop the rest of the class
                reports[path] = Report(path, problem=f"grading failed: {type(exc).__name__}: {exc}")
    return [reports[p] for p in paths]


