"""Grade a learner's "Try it" exercises through nbval: ``attnlab-check NOTEBOOK`` or ``make check NB=NOTEBOOK``.

How one submission is graded:

1. Read it (at most ``MAX_FILE_BYTES``; every cell checked for the shape a notebook's cells have) and find its
   solution notebook: by the notebook metadata ``attnlab.notebook`` that the learner notebooks carry, else by file
   name (``NN_topic.ipynb``, then ``NN_*``), else by the exercise ids in its cells.
2. Build a grading notebook from the solution notebook. Each of its exercise cells is replaced by the learner's cell of
   the same exercise (found by the cell metadata ``attnlab.exercise``, else by cell id), keeping only the learner's
   source, with any nbval marker comment blanked out. Every check cell is the solution's, with a fresh ``from
   attnlab.exercises import check`` in front and, as its expected output, ``Exercise N.k: passed [TOKEN]`` with a
   random token per exercise and grading. Every other cell is the solution's, with its output ignored. Outputs the
   learner saved are never read.
3. Run it with ``pytest --nbval`` (strict), in a subprocess of its own with a hard wall-clock deadline, the kernel in
   a bubblewrap sandbox (:mod:`.sandbox`) unless ``sandbox=False``. Random inputs of the checks come from a secret
   seed drawn for this grading.
4. The verdict of each exercise is decided on the trusted side (:mod:`.trusted`, run in that pytest process by
   :mod:`.nbval_hooks`): the checker calls the learner's function in the kernel through a socket that carries only
   the messages of :mod:`attnlab.exercises._protocol`, and the judge decides. The kernel prints the token only when
   told to, so nbval's comparison of the check cell must agree too: an exercise passes only when both say so. The
   hooks write that one :class:`Verdict` per exercise to the run's record; this module reads it and never works a
   verdict out again from nbval's messages.
5. Report per exercise: passed, failed (the check's message), not attempted, error (the learner's exception), timed
   out (a deadline fired), or missing (the exercise cell was deleted).

``attnlab-check --batch DIR --csv results.csv`` grades every file of DIR (one per learner) in parallel, each in its
own processes and sandbox.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import errno
import json
import os
import re
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import isolation, sandbox
from ..paths import solutions_dir as default_solutions_dir
from ..authoring import (
    Exercise,
    FormatError,
    cell_role,
    find_exercises,
    passed_line,
)
from attnlab.exercises import _protocol, _wire
from attnlab.exercises._protocol import STATUSES, Verdict

DEFAULT_TIMEOUT = 5.0
SETUP_TIMEOUT = 120.0
_NBVAL_MARKER = re.compile(r"^\s*#+\s*(NBVAL_\w+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$")
_KERNEL_DEAD = "Kernel dead"
MAX_FILE_BYTES = 20 * 2**20  # a submission larger than this is not read
MAX_CELL_CHARS = 100_000  # an exercise cell longer than this is not run
MAX_NAME_CHARS = 200  # a submission's file name longer than this is not graded
READ_SECONDS = 10.0  # reading one submission may take this long
NOT_REGULAR = "not a regular file (a link, folder, FIFO or device is not graded: copy the notebook itself)"
_NOTEBOOK_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
GRADER_MEMORY = 4 * 2**30  # address space of the trusted pytest process that runs nbval for one submission
LIMITS = sandbox.Limits()  # of every sandboxed grading (per process, and per grading where a cgroup can be made)


class SubmissionError(Exception):
    """The file cannot be graded: not a notebook, or no solution notebook matches it."""


Result = Verdict  # the one verdict type of the protocol: an exercise, a status of STATUSES, the learner's message


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
    """The solution notebook a submission belongs to (see the module docstring, step 1)."""
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


def graded_name(check_source: str, exercise_id: str) -> str | None:
    """The name of the function a check cell passes to ``check`` (``check("2.1", my_causal_mask)``), if plain."""
    try:
        tree = ast.parse(check_source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == exercise_id and isinstance(node.args[1], ast.Name)):
            return node.args[1].id
    return None


def strip_nbval_markers(source: str) -> str:
    """Blank out nbval marker comments (line numbers stay the same)."""
    return "\n".join("" if _NBVAL_MARKER.match(line) else line for line in source.split("\n"))


def grading_notebook(solution, exercises: list[Exercise], learner_cells: dict, skip=frozenset(), tokens=None):
    """The notebook nbval runs (see the module docstring, step 2); exercises in ``skip`` are left out.

    ``tokens`` maps each exercise to the token its check cell must print; without it the expected output is the
    plain ``Exercise N.k: passed`` line.
    """
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
        line = passed_line(ex.id) if tokens is None else f"Exercise {ex.id}: passed [{tokens[ex.id]}]\n"
        check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=line)]
        check.execution_count = check.execution_count or 1
    last_check = max((ex.check_cell for ex in exercises if ex.check_cell not in drop), default=-1)
    cells = []
    for i, cell in enumerate(nb.cells[: last_check + 1]):  # what follows the last check cannot change a result
        if cell.cell_type != "code" or i in drop:
            continue
        if cell_role(cell) is None:  # the notebook's own cells (the Colab set-up cell too): outputs not compared
            tags = list(cell.metadata.get("tags", []))
            cell.metadata["tags"] = tags + ["nbval-ignore-output"]
        cells.append(cell)
    nb.cells = cells
    return nb


# --- running nbval -----------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What one nbval run found: the record of each cell, the trusted verdicts, and whether its deadline fired."""

    records: list[dict]
    verdicts: dict[str, tuple[int, Verdict]]  # exercise -> (index in records of the cell that settled it, verdict)
    deadline_hit: bool = False
    log: str = ""


def deadline_for(n_exercises: int, timeout: float, setup_timeout: float) -> float:
    """Seconds one nbval run of a notebook may take in all: the notebook's own cells, then each exercise's two cells."""
    return min(setup_timeout, 60.0) + 30.0 + n_exercises * 2 * (timeout + 5)


def _limit_grader_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GRADER_MEMORY, GRADER_MEMORY))


def _runtime_dir(tmp: Path, uid: int | None) -> tuple[Path, Path]:
    """The kernel's own folder (connection file, sockets, IPython profile, matplotlib's font cache), private to the
    grading (mode 0700), and the folder its first contents are written to. Without root they are the same folder;
    as root the runtime folder is a tmpfs of the grading's own mount namespace (see :func:`.sandbox.private_runtime`)
    and the contents are copied into it from ``seed``."""
    runtime = seed = tmp / "run"
    runtime.mkdir(mode=0o700)
    if uid is not None:
        seed = tmp / "seed"
    profile = seed / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.InlineBackend.figure_formats = set()\nc.HistoryManager.enabled = False\n")
    mpl = seed / "mpl"
    mpl.mkdir()
    try:
        import matplotlib

        for cache in Path(matplotlib.get_cachedir()).glob("fontlist-*.json"):
            shutil.copy(cache, mpl / cache.name)  # no font scan in every kernel
    except Exception:  # no matplotlib, or no cache yet: the kernel builds its own
        pass
    os.chmod(seed, 0o700)
    return runtime, seed


@contextlib.contextmanager
def _host(use_sandbox: bool):
    """The grading's leased uid and cgroup on the host (:mod:`.isolation`), ended however the run ends."""
    host = isolation.start_grading(use_sandbox, LIMITS)
    try:
        yield host
    finally:
        host.end()


def run_nbval(nb, timeout: float = DEFAULT_TIMEOUT, setup_timeout: float = SETUP_TIMEOUT, *, use_sandbox=False,
              grading: dict | None = None, deadline: float | None = None) -> Run:
    """Run ``nb`` with strict nbval in a fresh temporary directory, the kernel sandboxed when ``use_sandbox``.

    ``grading`` (exercise sources, tokens and seed) turns on the trusted checks; without it the check cells judge
    themselves in the kernel, as in a learner's own run.
    """
    with tempfile.TemporaryDirectory(prefix="attnlab-grade-") as tmp, _host(use_sandbox and bool(grading)) as host:
        tmp = Path(tmp)
        uid = host.uid
        if uid is not None:
            os.chmod(tmp, 0o711)  # the sandbox's uid must reach its folder inside
        runtime, seed = _runtime_dir(tmp, uid)
        trusted_dir = tmp / "trusted"  # never shown to the kernel
        trusted_dir.mkdir(mode=0o700)
        notebook, record, ini = trusted_dir / "submission.ipynb", trusted_dir / "record.jsonl", tmp / "pytest.ini"
        nbformat.write(nb, notebook)
        ini.write_text("[pytest]\n")
        command = [
            sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(tmp),
            "-p", "nbval.plugin", "-p", "attnlab_course.grading.nbval_hooks", "-p", "no:cacheprovider",
            "--nbval", "--nbval-current-env", f"--nbval-cell-timeout={timeout:g}",
            f"--attnlab-setup-timeout={setup_timeout:g}", f"--attnlab-record={record}",
            "-q", "--no-header", "-p", "no:warnings", str(notebook),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ATTNLAB_CHECK"))}
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only nbval and our hooks: faster and unaffected by other plugins
        env["IPYTHONDIR"] = str(runtime / "ipython")
        env["MPLCONFIGDIR"] = str(runtime / "mpl")
        if grading is not None:
            config = {**grading, "socket": str(runtime / "check.sock"), "runtime": str(runtime), "uid": uid,
                      "key": secrets.token_hex(32)}  # the first message on the socket must carry it
            if use_sandbox:
                box = sandbox.Config(
                    runtime=str(runtime), read_only=sandbox.python_paths(), hidden=sandbox.hidden_paths(), uid=uid,
                    env={"ATTNLAB_CHECK_SOCKET": config["socket"], "ATTNLAB_CHECK_KEY": config["key"],
                         "IPYTHONDIR": env["IPYTHONDIR"], "MPLCONFIGDIR": env["MPLCONFIGDIR"]},
                    limits=LIMITS, cgroup_procs=host.cgroup.procs_files if host.cgroup else [],
                    runtime_seed=str(seed) if seed != runtime else "")
                box.write(trusted_dir / "sandbox.json")
                config["sandbox_config"] = str(trusted_dir / "sandbox.json")
            (trusted_dir / "grading.json").write_text(json.dumps(config), encoding="utf-8")
            command.insert(-1, f"--attnlab-grading={trusted_dir / 'grading.json'}")
        if uid is not None:  # as root: the runtime folder becomes a private tmpfs
            command = [sys.executable, "-I", "-S", sandbox.__file__, "--private-runtime",
                       str(trusted_dir / "sandbox.json"), "--", *command]
        limit = deadline or (setup_timeout + 60 + len(nb.cells) * (timeout + 10))
        proc = subprocess.Popen(command, cwd=trusted_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True,
                                preexec_fn=_limit_grader_memory if sys.platform.startswith("linux") else None)
        deadline_hit = False
        try:
            log, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            deadline_hit = True
            _kill(proc)
            log, _ = proc.communicate()
        finally:
            if proc.poll() is None:
                _kill(proc)
            host.end()  # whatever the submission left running, signals ignored or not: its cgroup, its uid
        lines = record.read_text(encoding="utf-8", errors="replace").splitlines() if record.exists() else []
        if not lines and not deadline_hit:
            tail = "\n".join(log.strip().splitlines()[-15:])
            raise RuntimeError(f"nbval did not run (pytest exit status {proc.returncode}):\n{tail}")
        records, verdicts = read_record(lines)
        if not deadline_hit and proc.returncode not in (0, 1):
            # pytest stopped early (it ran out of memory, or was killed): what it had recorded still counts
            records.append({"kind": "cell", "attnlab": None, "when": "call", "ok": False, "timed_out": False,
                            "message": f"{_KERNEL_DEAD}: the grader's process stopped (exit status {proc.returncode})"
                                       "; did your code print a flood of output or use all the memory?",
                            "outputs": [], "first_line": ""})
        return Run(records, verdicts, deadline_hit, log)


def read_record(lines) -> tuple[list[dict], dict[str, tuple[int, Verdict]]]:
    """The cell records and the verdicts of a run's record file (JSON lines written by :mod:`.nbval_hooks`)."""
    records, verdicts = [], {}
    for line in lines:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line of a run stopped while writing it
        if item.get("kind") == "verdict":
            try:
                verdict = _protocol.part_from_data(Verdict, item)
            except _wire.WireError:
                continue
            verdicts.setdefault(verdict.exercise, (len(records) - 1, verdict))
        else:
            records.append(item)
    return records, verdicts


def _kill(proc) -> None:
    """Stop pytest and the kernel it started (they share a session on POSIX; the sandbox dies with its parent)."""
    if hasattr(os, "killpg"):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:
        proc.kill()


# --- reading the results -----------------------------------------------------------------------------------------


def _read_records(run, pending: list[str], timeout: float):
    """Results of the ``pending`` exercises from one nbval run (a :class:`Run`): the verdicts the trusted side wrote,
    and for the exercises it could not settle (the kernel stopped, the deadline fired), what stopped them.

    Returns ``(results, notes, culprit)``. When the kernel died, only the exercises before that point have results,
    and ``culprit`` is the exercise during which it died (None if it died in one of the notebook's own cells).
    """
    records, verdicts = run.records, run.verdicts
    for rec in records:
        if rec["when"] == "setup" and not rec["ok"]:  # nbval could not start the kernel: not the learner's doing
            raise RuntimeError(f"nbval could not run the notebook: {rec['message'].strip()[:300]}")
    dead = next((i for i, r in enumerate(records) if r["message"].startswith(_KERNEL_DEAD)), len(records))
    notes = []
    for rec in records[:dead]:
        if "exercise" not in (rec["attnlab"] or {}) and not rec["ok"] and rec["when"] == "call":
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
        where, verdict = verdicts.get(ex_id, (len(records), None))
        if verdict is not None and where < dead:  # settled by a cell that ran before the kernel stopped
            result = verdict
        elif ex_id == culprit:
            result = Result(ex_id, "error", "the kernel died while running your code (did it call exit(), or use "
                                            "all the memory?)")
        elif dead < len(records) and culprit is None:
            result = Result(ex_id, "error", "not graded: the kernel stopped before this exercise")
        elif run.deadline_hit:
            result = Result(ex_id, "timed out", "not graded: the grading of this notebook went past its deadline "
                                                "(an exercise before it kept the kernel busy?)")
        else:
            continue  # left for the next run
        results[ex_id] = result
    return results, notes, culprit


def grade(path, solutions_dir=None, timeout: float = DEFAULT_TIMEOUT, *, use_sandbox: bool = False) -> Report:
    """Grade one submission; never raises for a bad submission (see ``Report.problem``).

    ``use_sandbox`` runs the learner's kernel in a bubblewrap sandbox (Linux; see :mod:`.sandbox`); as root, each
    run also gets a uid and a cgroup of its own (:mod:`.isolation`), whatever else runs at the same time.
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
        solution = nbformat.read(solution_path, as_version=4)
        exercises = find_exercises(solution, str(solution_path))
        try:
            cells = learner_exercise_cells(learner, solution, exercises)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            raise SubmissionError(f"not a valid notebook ({type(exc).__name__})") from None
        results = {ex.id: Result(ex.id, "missing", "the exercise cell is not in your notebook (deleted?)")
                   for ex in exercises if cells[ex.id] is None}
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
            nb = grading_notebook(solution, exercises, cells, skip, grading["tokens"])
            run = run_nbval(nb, timeout, use_sandbox=use_sandbox, grading=grading,
                            deadline=deadline_for(len(pending), timeout, SETUP_TIMEOUT))
            found, notes, culprit = _read_records(run, pending, timeout)
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
    except RecursionError:
        report.problem = "not a valid notebook (nested too deeply)"
    report.seconds = time.monotonic() - start
    return report


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def grade_many(paths, solutions_dir=None, timeout: float = DEFAULT_TIMEOUT, jobs: int | None = None,
               progress: bool = True, use_sandbox: bool = False) -> list[Report]:
    """Grade many submissions in parallel (``jobs`` at once, default: the available cores), in input order.

    Each submission is graded by processes of its own (pytest + its sandboxed kernel), under a hard deadline; a
    submission that hangs, floods output, exhausts memory or kills its kernel only fills its own row.
    """
    from tqdm import tqdm

    paths = [Path(p) for p in paths]
    jobs = max(1, jobs or available_cores())

    def one(path):
        return grade(path, solutions_dir, timeout, use_sandbox=use_sandbox)

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
