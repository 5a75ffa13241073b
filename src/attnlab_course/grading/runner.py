"""Grading a submission, or a class of them: the runner that puts the other parts together.

``attnlab-check NOTEBOOK`` (or ``make check NB=NOTEBOOK``) grades one submission with :func:`grade`;
``attnlab-check --batch DIR --csv results.csv`` grades every file of DIR (one per learner) with :func:`grade_many`,
in parallel, each in its own processes and sandbox. One grading:

1. reads the file and finds its solution notebook and the learner's exercise cells (:mod:`.submission`);
2. draws the grading's secret seed, from which the checks draw their inputs, and a random token per exercise;
3. runs ``pytest --nbval`` (strict) in a process of its own, under a hard wall-clock deadline (:func:`run_nbval`),
   with the learner's kernel in a bubblewrap sandbox (:mod:`.sandbox`) and, as root, a uid and a cgroup of its own
   on the host (:mod:`.isolation`). That process is forked from a server that has imported pytest, nbval and the
   rest once (:mod:`.warm`); it launches the kernel first (:mod:`.kernel`), while this one builds the notebook it
   runs (:mod:`.notebook`): the solution's cells with the learner's exercise cells, less the notebook's own cells
   that no exercise needs and the imports that nothing kept reads (:mod:`.slicing`);
4. takes each exercise's verdict from that process's record (:mod:`.record`): the trusted side
   (:mod:`.nbval_hooks`, :mod:`.trusted`) settled it there as a :class:`~attnlab.exercises._protocol.Verdict`.
   This module never works a verdict out from what nbval printed. It adds a verdict only for what the trusted
   side could not see: its own process stopped, by the deadline or by a crash;
5. when the kernel stopped during an exercise, grades the exercises after it in another run without that one.

Each exercise ends as passed, failed (the check's message), not attempted, error (the learner's exception), timed out
(a deadline fired) or missing (the exercise cell was deleted): a :class:`Report` per submission.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attnlab.exercises._protocol import STATUSES, Verdict

from ..authoring import FormatError, find_exercises
from ..paths import solutions_dir as default_solutions_dir
from . import isolation, record, sandbox, warm
from .notebook import graded_name, grading_notebook, slice_notebook, strip_nbval_markers
from .submission import SubmissionError, find_solution, learner_exercise_cells, read_submission

__all__ = ["DEFAULT_TIMEOUT", "STATUSES", "Report", "Result", "SubmissionError", "available_cores", "default_jobs",
           "grade", "grade_many", "run_nbval"]

DEFAULT_TIMEOUT = 5.0  # seconds each exercise cell and check may run
SETUP_TIMEOUT = 120.0  # seconds each of the notebook's own cells may run
MAX_CELL_CHARS = 100_000  # an exercise cell longer than this is not run
GRADER_MEMORY = 4 * 2**30  # address space of the trusted pytest process that runs nbval for one submission
LIMITS = sandbox.Limits()  # of every sandboxed grading (per process, and per grading where a cgroup can be made)

Result = Verdict  # the one verdict type of the protocol: an exercise, a status of STATUSES, the learner's message

# pytest for one grading, started cold (off Linux: see .warm), without rfc3987_syntax. nbformat
# imports jsonschema, which imports that package when it is installed (jupyter's dependencies install it) and builds a
# parser for IRIs at import: 3 s of CPU in every grading process, for a format check nbformat's validation never makes.
# Without it jsonschema skips that check, as it does wherever the package is absent.
# It launches the learner's kernel first, before pytest loads (:func:`.kernel.start_early`).
PYTEST_MAIN = ("import sys; sys.modules['rfc3987_syntax'] = None; "
               "from attnlab_course.grading import kernel; kernel.start_early(sys.argv); "
               "import pytest; sys.exit(pytest.main())")


@dataclass
class Report:
    """The grading of one submission. ``problem`` is set when it could not be graded at all."""

    path: Path
    notebook: str = ""
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem: str = ""
    seconds: float = 0.0
    code: dict[str, str] = field(default_factory=dict)  # the learner's source of each exercise cell they kept

    @property
    def passed(self) -> bool:
        return not self.problem and bool(self.results) and all(r.status == "passed" for r in self.results)


# --- one run of nbval ----------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One nbval run: what its record says (:class:`.record.Record`), whether the deadline stopped it, and how its
    process ended."""

    record: record.Record
    deadline_hit: bool = False
    exit_status: int = 0
    log: str = ""

    @property
    def crashed(self) -> bool:
        """The trusted process itself stopped early (it ran out of memory, or was killed)."""
        return not self.deadline_hit and self.exit_status not in (0, 1)


def deadline_for(n_exercises: int, timeout: float, setup_timeout: float) -> float:
    """Seconds one nbval run of a notebook may take in all: the notebook's own cells, then each exercise's two cells."""
    return min(setup_timeout, 60.0) + 30.0 + n_exercises * 2 * (timeout + 5)


@contextlib.contextmanager
def _host(use_sandbox: bool):
    """The grading's leased uid and cgroup on the host (:mod:`.isolation`), ended however the run ends."""
    host = isolation.start_grading(use_sandbox, LIMITS)
    try:
        yield host
    finally:
        host.end()


def run_nbval(nb, timeout: float = DEFAULT_TIMEOUT, setup_timeout: float = SETUP_TIMEOUT, *, grading: dict,
              use_sandbox=False, deadline: float | None = None) -> Run:
    """Run ``nb`` with strict nbval and the grader's hooks in a fresh temporary directory, the kernel sandboxed when
    ``use_sandbox``. ``grading`` holds the exercise sources, tokens and seed the trusted side needs.

    ``nb`` may be a function that makes the notebook: it is called once the pytest process has started, which starts
    the kernel meanwhile (see :mod:`.nbval_hooks`), and the notebook is handed over when it is complete."""
    with tempfile.TemporaryDirectory(prefix="attnlab-grade-") as tmp, _host(use_sandbox) as host:
        tmp = Path(tmp)
        uid = host.uid
        if uid is not None:
            os.chmod(tmp, 0o711)  # the sandbox's uid must reach its folder inside
        runtime, seed = sandbox.runtime_dir(tmp, uid)
        trusted_dir = tmp / "trusted"  # never shown to the kernel
        trusted_dir.mkdir(mode=0o700)
        notebook, record_file, ini = trusted_dir / "submission.ipynb", trusted_dir / "record.jsonl", tmp / "pytest.ini"
        ini.write_text("[pytest]\n")
        env = _grader_environ()
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only nbval and our hooks: faster and unaffected by other plugins
        env["IPYTHONDIR"] = str(runtime / "ipython")
        env["MPLCONFIGDIR"] = str(runtime / "mpl")
        config = {**grading, "socket": str(runtime / "check.sock"), "runtime": str(runtime), "uid": uid,
                  "key": secrets.token_hex(32),  # the first message on the socket must carry it
                  "notebook": str(notebook), "notebook_wait": SETUP_TIMEOUT}
        if use_sandbox:
            read_only = sandbox.python_paths()
            box = sandbox.Config(
                runtime=str(runtime), read_only=read_only, hidden=sandbox.hidden_paths(read_only), uid=uid,
                env={"ATTNLAB_CHECK_SOCKET": config["socket"], "ATTNLAB_CHECK_KEY": config["key"],
                     "IPYTHONDIR": env["IPYTHONDIR"], "MPLCONFIGDIR": env["MPLCONFIGDIR"]},
                limits=LIMITS, cgroup_procs=host.cgroup.procs_files if host.cgroup else [],
                runtime_seed=str(seed) if seed != runtime else "")
            box.write(trusted_dir / "sandbox.json")
            config["sandbox_config"] = str(trusted_dir / "sandbox.json")
        (trusted_dir / "grading.json").write_text(json.dumps(config), encoding="utf-8")
        args = [
            "-c", str(ini), "--rootdir", str(tmp),
            "-p", "attnlab_course.grading.nbval_hooks", "-p", "nbval.plugin", "-p", "no:cacheprovider",
            "--nbval", "--nbval-current-env", f"--nbval-cell-timeout={timeout:g}",
            f"--attnlab-setup-timeout={setup_timeout:g}", f"--attnlab-record={record_file}",
            f"--attnlab-grading={trusted_dir / 'grading.json'}",
            "-q", "--no-header", "-p", "no:warnings", str(notebook),
        ]
        started = time.monotonic()
        log_file = trusted_dir / "pytest.log"
        proc = _start_pytest(args, env=env, cwd=trusted_dir, log=log_file,
                             private_runtime=str(trusted_dir / "sandbox.json") if uid is not None else "")
        deadline_hit = False
        try:
            nb = nb() if callable(nb) else nb  # while pytest starts, and starts the kernel
            partial = trusted_dir / "submission.partial"
            nbformat.write(nb, partial)
            os.replace(partial, notebook)  # the hooks wait for this name: the notebook appears complete
            limit = deadline or (setup_timeout + 60 + len(nb.cells) * (timeout + 10))
            if proc.wait(timeout=max(0.0, limit - (time.monotonic() - started))) is None:
                deadline_hit = True
        except subprocess.TimeoutExpired:
            deadline_hit = True
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
            host.end()  # whatever the submission left running, signals ignored or not: its cgroup, its uid
        log = _tail(log_file)
        lines = record_file.read_text(encoding="utf-8", errors="replace").splitlines() if record_file.exists() else []
        found = record.read(lines)
        if not found.cells and not found.broken and not deadline_hit:
            tail = "\n".join(log.strip().splitlines()[-15:])
            raise RuntimeError(f"nbval did not run (pytest exit status {proc.returncode}):\n{tail}")
        return Run(found, deadline_hit, proc.returncode, log)


LOG_TAIL = 64 * 1024  # bytes of the end of pytest's output kept in a Run


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _grader_environ() -> dict[str, str]:
    """This process's environment less pytest's variables and the check socket's, which belong to one grading."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ATTNLAB_CHECK"))}


def _start_pytest(args: list[str], *, env: dict, cwd: Path, log: Path, private_runtime: str):
    """The grading's pytest process, running pytest with ``args`` in a session of its own, with at most
    :data:`GRADER_MEMORY` of address space and its output in ``log``: forked from the runner's warm server
    (:mod:`.warm`) on Linux, else started cold. Returns an object with ``pid``, ``returncode``, ``wait(timeout)`` (the
    status, or None while it runs) and ``kill()`` (its whole session). ``private_runtime``: as root, the sandbox
    configuration whose runtime folder becomes a private tmpfs first."""
    if warm.available:
        # no BLAS threads in a process that forks
        server_env = {**_grader_environ(), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        return warm.Server.get(server_env).start(args, env=env, cwd=str(cwd), log=str(log), memory=GRADER_MEMORY,
                                                 private_runtime=private_runtime)
    return _Cold([sys.executable, "-c", PYTEST_MAIN, *args], env=env, cwd=cwd, log=log)


class _Cold:
    """pytest started as a new process (off Linux: see :data:`.warm.available`), with the interface of
    :class:`.warm.Child`."""

    def __init__(self, command: list[str], *, env: dict, cwd: Path, log: Path):
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid

    @property
    def returncode(self):
        return self.proc.returncode

    def wait(self, timeout=None):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """Stop pytest and the kernel it started (they share a session on POSIX; the sandbox dies with its parent)."""
        if hasattr(os, "killpg"):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            self.proc.kill()


# --- one submission ----------------------------------------------------------------------------------------------


def settle_run(run: Run, pending: list[str]) -> tuple[dict[str, Result], list[str], str | None]:
    """The results one run settled among the ``pending`` exercises, its notes, and the exercise to leave out of the
    next run (the one the kernel stopped during), if any.

    Every result is a verdict of the trusted side, except where the run's own process stopped before it could
    write one: then the exercise that was running is an error, and the others wait for the next run (after a
    crash) or timed out (after the deadline).
    """
    found = run.record
    if found.broken:  # nbval could not start the kernel: not the learner's doing
        raise RuntimeError(f"nbval could not run the notebook: {found.broken}")
    results = {ex_id: found.verdicts[ex_id] for ex_id in pending if ex_id in found.verdicts}
    notes, culprit = list(found.notes), None
    if found.stopped:
        culprit = found.stopped_in
    elif run.crashed:
        culprit = found.last_cell
        if culprit is not None and culprit not in results:
            results[culprit] = Result(culprit, "error", "the grader's process stopped while running your code (exit "
                                                        f"status {run.exit_status}); did your code print a flood of "
                                                        "output or use all the memory?")
        elif culprit is None:
            notes.append(f"the grader's process stopped (exit status {run.exit_status}) in a cell that is not an "
                         "exercise; the exercises after it were not graded")
            results.update({ex_id: Result(ex_id, "error", "not graded: the grading stopped before this exercise")
                            for ex_id in pending if ex_id not in results})
    elif run.deadline_hit:
        results.update({ex_id: Result(ex_id, "timed out", "not graded: the grading of this notebook went past its "
                                                          "deadline (an exercise before it kept the kernel busy?)")
                        for ex_id in pending if ex_id not in results})
    return results, notes, culprit


def _solution(path: Path):
    """The solution notebook and its exercises, read once per version of the file (a batch reads it once)."""
    info = path.stat()
    return _read_solution(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=32)
def _read_solution(path: str, mtime_ns: int, size: int):
    solution = nbformat.read(path, as_version=4)  # never changed: grading_notebook works on a copy
    return solution, find_exercises(solution, path)


def grade(path, solutions_dir=None, timeout: float = DEFAULT_TIMEOUT, *, use_sandbox: bool = False,
          sliced: bool = True) -> Report:
    """Grade one submission; never raises for a bad submission (see ``Report.problem``).

    ``use_sandbox`` runs the learner's kernel in a bubblewrap sandbox (Linux; see :mod:`.sandbox`); as root, each
    run also gets a uid and a cgroup of its own (:mod:`.isolation`), whatever else runs at the same time.
    ``sliced`` runs only the notebook's own cells that the exercises need (:mod:`.slicing`); without it, all of them.
    """
    start = time.monotonic()
    report = Report(Path(path))
    try:
        learner = read_submission(report.path)
        try:
            solution_path = find_solution(learner, report.path, solutions_dir or default_solutions_dir())
        except (AttributeError, TypeError, KeyError, ValueError) as exc:  # valid JSON, not shaped like a notebook
            raise SubmissionError(f"not a valid notebook ({type(exc).__name__})") from None
        report.notebook = solution_path.stem
        solution, exercises = _solution(solution_path)
        try:
            cells = learner_exercise_cells(learner, solution, exercises)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            raise SubmissionError(f"not a valid notebook ({type(exc).__name__})") from None
        results = {ex.id: Result(ex.id, "missing", "the exercise cell is not in your notebook (deleted?)")
                   for ex in exercises if cells[ex.id] is None}
        report.code = {ex.id: cells[ex.id].get("source", "") for ex in exercises if cells[ex.id] is not None}
        for ex in exercises:
            size = len(cells[ex.id].get("source", "")) if cells[ex.id] is not None else 0
            if size > MAX_CELL_CHARS:
                results[ex.id] = Result(ex.id, "error", f"your exercise cell is {size:,} characters long; the "
                                                        f"grader runs exercise cells of up to {MAX_CELL_CHARS:,}")
        skip = set(results)
        sources = {ex.id: strip_nbval_markers(cells[ex.id].get("source", "")) for ex in exercises
                   if ex.id not in skip}
        grading = {"seed": secrets.randbits(63), "tokens": {ex.id: secrets.token_hex(16) for ex in exercises},
                   "sources": sources, "order": [ex.id for ex in exercises],
                   "graded": {ex.id: graded_name(solution.cells[ex.check_cell].source, ex.id) for ex in exercises}}
        while len(results) < len(exercises):
            pending = [ex.id for ex in exercises if ex.id not in results]

            def notebook(skip=frozenset(skip)):
                nb = grading_notebook(solution, exercises, cells, skip, grading["tokens"])
                return slice_notebook(nb)[0] if sliced else nb

            run = run_nbval(notebook, timeout, grading=grading, use_sandbox=use_sandbox,
                            deadline=deadline_for(len(pending), timeout, SETUP_TIMEOUT))
            found, notes, culprit = settle_run(run, pending)
            results.update(found)
            report.notes += [n for n in notes if n not in report.notes]
            if culprit is not None and culprit not in skip:
                skip.add(culprit)  # the next run grades the others without it
                results.setdefault(culprit, Result(culprit, "error", "the kernel stopped while running your code"))
            else:  # nothing more to learn from another run
                for ex_id in pending:
                    results.setdefault(ex_id, Result(ex_id, "error", "not graded: the check did not run"))
        report.results = [results[ex.id] for ex in exercises]
    except SubmissionError as exc:
        report.problem = str(exc)
    except (FormatError, RuntimeError) as exc:
        report.problem = f"grading failed: {exc}"
    except RecursionError:
        report.problem = "not a valid notebook (nested too deeply)"
    report.seconds = time.monotonic() - start
    return report


# --- a class -------------------------------------------------------------------------------------------------------


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_jobs() -> int:
    """Submissions a batch grades at once unless told: one more than the cores. A grading keeps about one core busy
    but waits at times, on its kernel's start and on messages between its processes; one more grading fills those
    gaps (a class of 30 of notebook 02 on 2 cores: 44-46 s two at a time, 40-42 s three at a time)."""
    return available_cores() + 1


def grade_many(paths, solutions_dir=None, timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None,
               progress: bool = True, use_sandbox: bool = False, sliced: bool = True) -> list[Report]:
    """Grade many submissions in parallel (``jobs`` at once, default: :func:`default_jobs`), in input order.

    Each submission is graded by processes of its own (pytest + its sandboxed kernel), under a hard deadline; a
    submission that hangs, floods output, exhausts memory or kills its kernel only fills its own row.
    """
    from tqdm import tqdm

    paths = [Path(p) for p in paths]
    jobs = max(1, jobs or default_jobs())

    def one(path):
        return grade(path, solutions_dir, timeout, use_sandbox=use_sandbox, sliced=sliced)

    reports: dict[Path, Report] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(one, p): p for p in paths}
        bar = tqdm(as_completed(futures), total=len(futures), unit="notebook", file=sys.stderr,
                   disable=None if progress else True)  # None: shown on a terminal only
        for future in bar:
            path = futures[future]
            try:
                reports[path] = future.result()
            except Exception as exc:  # a bug of ours must not stop the rest of the class
                reports[path] = Report(path, problem=f"grading failed: {type(exc).__name__}: {exc}")
    return [reports[p] for p in paths]
