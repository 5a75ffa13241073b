"""Grading runs only the cells the exercises need (:mod:`attnlab_course.grading.slicing`).

Without a kernel: what the dependency analysis keeps and drops on small notebooks (names read, changed through a
method, an alias, a notebook function or a callable passed on; state outside the names; opaque cells), the attacks a
learner can make through the exercise cells (hide a check cell, change what the checks run on, reach a dropped name
dynamically), the kernel started while the notebook is prepared, and a dead kernel seen at once. With kernels: one
submission of every notebook whose exercises are in turn correct, stubs and wrong, graded sliced and in full with the
same secret seed: the same verdicts and messages. (The fixture submissions of test_grader.py, whose expected verdicts were set by full runs, are
graded sliced there, as every grading now is.)
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import make_submissions
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output
from nbval import kernel as nbval_kernel

from attnlab_course.authoring import find_exercises, learner_notebook
from attnlab_course.grading import kernel, nbval_hooks, runner, slicing, submission
from attnlab_course.grading import notebook as gradingnb
from attnlab_course.paths import solutions_dir

IMPORTS = "%matplotlib inline\nimport warnings\nimport matplotlib.pyplot as plt\nimport numpy as np\nimport attnlab\n" \
          "from attnlab import plot\nfrom attnlab.widgets import explorer\nfrom attnlab.exercises import check"


def _kept(own_cells: list[str], exercise: str, check: str = 'check("9.1", answer)') -> list[str]:
    """The own cells kept before one exercise cell and its check."""
    sources = [IMPORTS, *own_cells, exercise, check]
    keep, _ = slicing.slice_cells(sources, [True] * (len(sources) - 2) + [False, False])
    assert keep[-2:] == [True, True]
    return [s for s, k in zip(sources[1:-2], keep[1:-2]) if k]




FIGURE = 'fig, ax = plt.subplots()\nplot.heatmap(weights, ax=ax, title="w")\nplt.show()'
EXPLORER = "def draw(T=3, *, view):\n    view.fig = plt.figure()\n\n\nexplorer(draw, T=(1, 5))"
TIMING = ("import time\nstart = time.perf_counter()\nattnlab.attention(q, q, q)\nseconds = time.perf_counter() - start\n"
          "print(f'{seconds:.3f} s')")
DATA = "rng = np.random.default_rng(0)\nq = rng.normal(size=(4, 8))\nweights = attnlab.softmax(q @ q.T)"
PLAIN = "def answer(x):\n    return np.sqrt(x)"


def test_figures_explorers_and_timings_nothing_reads_are_dropped():
    assert _kept([DATA, FIGURE, EXPLORER, TIMING], PLAIN) == []


def test_a_cell_binding_a_name_the_exercise_reads_is_kept_with_what_it_needs():
    uses_q = "def answer(x):\n    return x + q.sum()"
    assert _kept([DATA, FIGURE, EXPLORER, TIMING], uses_q) == [DATA]
    uses_seconds = "def answer(x):\n    return x * seconds"
    assert _kept([DATA, FIGURE, TIMING], uses_seconds) == [DATA, TIMING], "the timing needs q"


@pytest.mark.parametrize("change", [
    "rng.normal()",  # a method may change its object
    "np.copyto(q, 0)",  # a callee may change its argument
    "q[0] = 1",  # an item store
    "alias = q\nalias += 1",  # an alias
    "def bump():\n    q[0] += 1\n\n\nbump()",  # a notebook function that changes it
    "def bump():\n    global q\n    q = 0\n\n\nbump()",  # ... or rebinds it
    "fns = [lambda: q.fill(0)]\nfns[0]()",  # a callable made from it
    "[a.fill(0) for a in (q,)]",  # a comprehension's local
    "del q",
    "def bump():\n    pass\n\n\ndef bump():\n    q[0] = 1\n\n\nbump()",  # either definition may run
])
def test_a_cell_that_may_change_what_the_exercise_reads_is_kept(change):
    uses = "def answer(x):\n    return x + q.sum() + rng.normal()"
    assert change in _kept([DATA, change, FIGURE], uses)


@pytest.mark.parametrize("own_cells", [
    ["def helper(x):\n    return x * scale", "scale = 2"],  # a global a function reads, bound after its definition
    ["def helper(x):\n    return inner(x)", "def inner(x):\n    return x * scale", "scale = 2"],  # ... through a call
    ["from math import sqrt\ndef helper(x):\n    return sqrt(x)", "sqrt = abs"],  # an import rebound later
    ["def draw(x):\n    return x * scale", "helper = lambda x: draw(x)", "scale = 2"],  # an object made with it
])
def test_what_a_function_reads_when_it_runs_is_kept_up_to_the_cell_that_calls_it(own_cells):
    assert _kept([DATA, *own_cells, FIGURE], "def answer(x):\n    return helper(x)") == own_cells


def test_a_learner_who_rebinds_check_does_not_make_the_check_cells_need_the_setup():
    rebinds = 'def answer(x):\n    return x\n\n\ncheck = lambda *a: print("Exercise 9.1: passed")'
    assert _kept([DATA, FIGURE, EXPLORER, TIMING], rebinds,
                 check='from attnlab.exercises import check\ncheck("9.1", answer)') == []
    reads_later = "def answer(x):\n    return x"
    assert _kept([DATA], reads_later, check="import numpy as np\ncheck = lambda: q\ncheck()") == [DATA], \
        "a name read after a statement that is not an import still reads the earlier cells"


@pytest.mark.parametrize("change", [
    'warnings.simplefilter("error")', 'np.seterr(all="raise")', "np.random.seed(1)", "np.set_printoptions(3)",
    'import os\nos.environ["OPENBLAS_NUM_THREADS"] = "1"', "import somewhere_unknown",
    'np.save("data.npy", q)', 'plt.savefig("figure.png")', "print(open('notes.txt', 'w'))",
])
def test_a_cell_that_changes_state_outside_the_names_is_kept(change):
    assert change in _kept([DATA, change, FIGURE], PLAIN)


def test_state_that_is_restored_or_only_plotting_drops():
    restored = 'with warnings.catch_warnings():\n    warnings.simplefilter("ignore")\n    weights.sum()\n' \
               'with np.errstate(over="ignore"):\n    np.exp(q)'
    assert _kept([DATA, restored, 'plt.rcParams["font.size"] = 9', FIGURE], PLAIN) == []
    plots = "def answer(x):\n    plt.figure()\n    return x"
    assert 'plt.rcParams["font.size"] = 9' in _kept([DATA, 'plt.rcParams["font.size"] = 9', FIGURE], plots)


def test_an_opaque_own_cell_is_kept_with_every_cell_before_it():
    assert _kept([DATA, FIGURE, "%load_ext autoreload", TIMING], PLAIN) == [DATA, FIGURE, "%load_ext autoreload"]
    assert _kept([DATA, FIGURE, "exec('z = 1')", TIMING], PLAIN) == [DATA, FIGURE, "exec('z = 1')"]


# --- imports nothing reads ------------------------------------------------------------------------------------------


def _slim(exercise: str, *own_cells: str) -> str:
    """The imports cell as a grading with ``own_cells`` and one exercise runs it."""
    sources = [IMPORTS, *own_cells, exercise, 'check("9.1", answer)']
    slim = {}
    keep, _ = slicing.slice_cells(sources, [True] * (1 + len(own_cells)) + [False, False], slim)
    assert keep[0]
    return slim.get(0, IMPORTS)


def test_imports_nothing_reads_are_left_out_and_what_is_read_stays():
    assert _slim(PLAIN, DATA, FIGURE) == "import numpy as np\nfrom attnlab.exercises import check"
    assert _slim("def answer(x):\n    return attnlab.softmax(x)").splitlines() == [
        "import attnlab", "from attnlab import plot", "from attnlab.widgets import explorer",
        "from attnlab.exercises import check"], "attnlab is read: every import from it stays (attnlab.plot.x)"
    assert _slim("def answer(x):\n    warnings.warn('w')\n    return x") == \
        "import warnings\nfrom attnlab.exercises import check"
    assert _slim("def answer(x):\n    return x", DATA) == "from attnlab.exercises import check", \
        "what a dropped cell (DATA) reads is not needed"
    assert _slim("def answer(x):\n    return x + q", DATA).splitlines() == [
        "import numpy as np", "import attnlab", "from attnlab import plot", "from attnlab.widgets import explorer",
        "from attnlab.exercises import check"], "what a kept cell (DATA) reads is"


def test_plotting_imports_and_the_magic_stay_when_a_kept_cell_plots():
    for plots in ("def answer(x):\n    plt.figure()\n    return x",  # the learner's own plot
                  "def answer(x):\n    import matplotlib.pyplot as p\n    p.gcf()\n    return x"):
        slim = _slim(plots, 'plt.rcParams["font.size"] = 9')
        assert slim.startswith("%matplotlib inline") and "import matplotlib.pyplot as plt" in slim, slim
    one = "%matplotlib inline\nimport numpy as np, matplotlib.pyplot as plt\nfrom attnlab.exercises import check"
    slim = {}
    slicing.slice_cells([one, PLAIN, 'check("9.1", answer)'], [True, False, False], slim)
    assert slim[0] == "import numpy as np\nfrom attnlab.exercises import check", "one name of two, and the magic"


@pytest.mark.parametrize("cell", [
    "%load_ext autoreload\nimport numpy as np",  # another magic: not slimmed (and opaque)
    "!pip list\nimport numpy as np",
    "import numpy as np\nnp = np",  # bound otherwise too: a variable
    "from . import x",
    "if True:\n    %matplotlib inline\nimport numpy as np",
    "import numpy as np; import warnings",  # two statements on one line
])
def test_a_cell_the_slimming_cannot_read_plainly_is_run_as_it_is(cell):
    slim = {}
    slicing.slice_cells([cell, "x = 1", PLAIN, 'check("9.1", answer)'], [True, True, False, False], slim)
    assert 0 not in slim or "np" in slim[0], slim


# --- attacks through the exercise cells --------------------------------------------------------------------------


@pytest.mark.parametrize("reach", [
    "globals()['weights']", "eval('weights')", "vars()['weights']", "answer.__globals__['weights']",
    "__import__('__main__').weights", "import sys\n    sys.modules['__main__'].weights",
    "get_ipython().user_ns['weights']", "import inspect\n    inspect.currentframe().f_globals['weights']",
    "_", "Out[3]", "getattr(__import__('__main__'), 'wei' + 'ghts')", "(lambda: 0).__builtins__",
])
def test_an_exercise_that_reaches_names_dynamically_runs_every_cell(reach):
    sources = [IMPORTS, DATA, FIGURE, EXPLORER, f"def answer(x):\n    return {reach}", 'check("9.1", answer)']
    keep, why = slicing.slice_cells(sources, [True] * 4 + [False, False])
    assert all(keep), why


def test_an_exercise_that_does_not_parse_runs_every_cell():
    sources = [IMPORTS, DATA, FIGURE, "def answer(x:\n    return", 'check("9.1", answer)']
    assert all(slicing.slice_cells(sources, [True] * 3 + [False, False])[0])


def _solution():
    """A solution notebook: imports, data, a figure, an explorer, two exercises, then a cell after them."""
    nb = new_notebook()
    nb.cells = [new_code_cell(IMPORTS), new_code_cell(DATA), new_code_cell(FIGURE), new_code_cell(EXPLORER)]
    for n, name in enumerate(("double", "square"), start=1):
        ex = f"9.{n}"
        nb.cells.append(new_code_cell(f"def {name}(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION",
                                      metadata={"attnlab": {"exercise": ex, "role": "solution"}}))
        nb.cells.append(new_code_cell(f'check("{ex}", {name})', metadata={"attnlab": {"exercise": ex, "role": "check"}},
                                      execution_count=2 * n,
                                      outputs=[new_output("stream", name="stdout", text=f"Exercise {ex}: passed\n")]))
    return nb


HOSTILE = [
    'def double(x):\n    return x\n\n\ncheck = lambda *a: print("Exercise 9.2: passed")',  # replace check
    "def double(x):\n    return x\n# NBVAL_SKIP\n#%% [markdown]\n",  # markers and fake cell boundaries
    'def double(x):\n    return x\n\n\nplt = np = attnlab = None',  # rebind what the own cells use
    '"""\n',  # a cell that does not parse
    "%%bash\necho hi",  # a cell magic
    "def double(x):\n    return x\n\n\nweights = q = rng = 0",  # rebind what the own cells bind
]


@pytest.mark.parametrize("source", HOSTILE)
def test_no_exercise_cell_can_remove_a_check_or_change_the_cells_it_runs_with(source):
    solution = _solution()
    learner = learner_notebook(solution, "09_tiny")
    exercises = find_exercises(solution)
    learner.cells[exercises[0].exercise_cell].source = source
    cells = submission.learner_exercise_cells(learner, solution, exercises)
    full = gradingnb.grading_notebook(solution, exercises, cells, tokens={"9.1": "T1", "9.2": "T2"})
    sliced, why = gradingnb.slice_notebook(full)
    roles = [(c.metadata.get("attnlab") or {}).get("role") for c in sliced.cells]
    assert roles.count("check") == 2 and roles.count("solution") == 2
    full_sources = [c.source for c in full.cells]

    def twin(cell) -> int:
        if cell.source in full_sources:
            return full_sources.index(cell.source)
        # else the imports cell, less imports that nothing kept reads: each of its lines is one of the cell's
        assert set(cell.source.splitlines()) <= set(IMPORTS.splitlines()), cell.source
        return 0

    positions = [twin(c) for c in sliced.cells]
    assert positions == sorted(positions), "the kept cells run in the full run's order"
    for cell, n in zip(sliced.cells, positions):  # the full run's cell: source, metadata and expected output
        assert cell == {**full.cells[n], "source": cell.source} and (cell.source == full.cells[n].source or n == 0)


def test_the_trusted_side_gets_the_same_setup_sliced_or_not(tmp_path, monkeypatch):
    """Seed aside (drawn per grading), the checks' inputs, tokens, sources and graded names do not depend on
    slicing; only the notebook's own cells differ."""
    solution_dir = tmp_path / "solutions"
    solution_dir.mkdir()
    nbformat.write(_solution(), solution_dir / "09_tiny.ipynb")
    path = tmp_path / "alice.ipynb"
    nbformat.write(learner_notebook(_solution(), "09_tiny"), path)
    seen = {}

    def fake_run_nbval(nb, timeout, *, grading, **kwargs):
        seen.setdefault("gradings", []).append({k: v for k, v in grading.items() if k not in ("seed", "tokens")})
        seen.setdefault("cells", []).append([c.source for c in nb().cells])
        return runner.Run(runner.record.Record())

    monkeypatch.setattr(runner, "run_nbval", fake_run_nbval)
    runner.grade(path, solution_dir, sliced=True)
    runner.grade(path, solution_dir, sliced=False)
    assert seen["gradings"][0] == seen["gradings"][1]
    sliced, full = seen["cells"]
    # every check cell imports check itself, so no import of the first cell is needed, and the cell goes
    assert sliced == full[4:] and full[:4] == [IMPORTS, DATA, FIGURE, EXPLORER]


# --- the kernel starts while the notebook is prepared ------------------------------------------------------------


def test_the_kernel_starts_before_the_notebook_exists_and_nbval_gets_that_kernel(tmp_path, monkeypatch):
    notebook = tmp_path / "submission.ipynb"
    launched = []

    def launch(grading, kernel_name, **kwargs):
        launched.append((kernel_name, kwargs, notebook.exists()))
        return f"kernel {len(launched)}"

    monkeypatch.setattr(kernel, "launch", launch)
    monkeypatch.setattr(nbval_hooks, "_connect", lambda km, startup_timeout: (km, f"client of {km}"))
    early = kernel.launch_early({}, notebook)
    (kernel_name, kwargs, existed), = launched
    assert not existed, "the kernel was launched before the notebook was there"
    assert kernel_name == nbval_kernel.CURRENT_ENV_KERNEL_NAME and kwargs["cwd"] == str(tmp_path)
    threading.Timer(0.3, notebook.write_text, ["{}"]).start()
    before = time.monotonic()
    nbval_hooks._wait_for(notebook, 30)
    assert notebook.exists() and time.monotonic() - before >= 0.2, "the run waits for the notebook"
    start = nbval_hooks._kernel_starter({}, early)
    assert start(startup_timeout=60, kernel_name="x") == ("kernel 1", "client of kernel 1"), "nbval gets that one"
    assert start(startup_timeout=60, kernel_name="x") == ("kernel 2", "client of kernel 2"), "a restart: a new one"


def test_a_kernel_that_fails_to_launch_early_fails_nbvals_start(monkeypatch):
    def launch(grading, kernel_name, **kwargs):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(kernel, "launch", launch)
    start = nbval_hooks._kernel_starter({}, kernel.launch_early({}, solutions_dir() / "missing.ipynb"))
    with pytest.raises(RuntimeError, match="no kernel"):
        start(startup_timeout=60, kernel_name="x")


# --- sliced and full gradings agree ------------------------------------------------------------------------------

NOTEBOOKS = sorted(p.stem for p in solutions_dir().glob("[0-9][0-9]_*.ipynb"))
KINDS = ("correct", "stub", "wrong")


def _mixed(notebook: str, offset: int):
    """One submission of ``notebook`` whose exercises are, in turn, correct (the solution), a stub (as generated)
    and wrong (it returns None), starting with ``KINDS[offset]``: every kind in every notebook, in one grading."""
    path = solutions_dir() / f"{notebook}.ipynb"
    ids = [ex.id for ex in find_exercises(nbformat.read(path, as_version=4), str(path))]
    kinds = {ex: KINDS[(offset + n) % 3] for n, ex in enumerate(ids)}
    spec = {"base": "learner", "code": {ex: "return None" for ex, kind in kinds.items() if kind == "wrong"}}
    sub = make_submissions.Submission(notebook, "mixed", spec)
    solution = nbformat.read(path, as_version=4)
    nb = sub.build()
    for ex in find_exercises(solution, str(path)):
        if kinds[ex.id] == "correct":
            nb.cells[ex.exercise_cell].source = solution.cells[ex.exercise_cell].source
    return nb, kinds


def _agree(notebook: str, tmp_path, monkeypatch) -> None:
    """Grade one mixed submission sliced and in full, with the same secret seed (so the checks draw the same
    inputs): the verdicts, messages included, must be the same, and what each kind gets as expected."""
    nb, kinds = _mixed(notebook, NOTEBOOKS.index(notebook))
    path = tmp_path / f"{notebook}-mixed.ipynb"
    nbformat.write(nb, path)
    seed = 20261202 + NOTEBOOKS.index(notebook)
    monkeypatch.setattr(runner, "secrets", SimpleNamespace(randbits=lambda bits: seed,
                                                           token_hex=runner.secrets.token_hex))
    sliced, full = runner.grade(path, sliced=True), runner.grade(path, sliced=False)
    assert not sliced.problem and not full.problem, (sliced.problem, full.problem)
    assert [(r.exercise, r.status, r.message) for r in sliced.results] == \
        [(r.exercise, r.status, r.message) for r in full.results]
    assert sliced.notes == [], sliced.notes
    expected = {"correct": "passed", "stub": "not attempted", "wrong": "failed"}
    assert {r.exercise: r.status for r in full.results} == {ex: expected[k] for ex, k in kinds.items()}


# one class per notebook, so that pytest-xdist's loadscope spreads them over its workers
for _nb in NOTEBOOKS:
    globals()[f"TestSlicedAndFullAgree{_nb[:2]}"] = type(
        f"TestSlicedAndFullAgree{_nb[:2]}", (), {
            "test_correct_stub_and_wrong_exercises_get_the_same_verdicts": (
                lambda self, tmp_path, monkeypatch, _n=_nb: _agree(_n, tmp_path, monkeypatch))})


# --- a dead kernel is seen at once ---------------------------------------------------------------------------------


def test_a_wait_for_a_kernel_message_ends_when_the_kernel_dies_and_not_before():
    from queue import Empty

    class Kernel:
        alive_until = 0.0

        def is_alive(self):
            return time.monotonic() < self.alive_until

        def get_message(self, stream, timeout=None):
            time.sleep(timeout or 0)
            raise Empty

    wait = nbval_hooks._while_alive(Kernel.get_message, poll=0.02)
    dead, alive = Kernel(), Kernel()
    alive.alive_until = time.monotonic() + 60
    for kernel, least, most in ((dead, 0.0, 0.5), (alive, 0.3, 5.0)):
        start = time.monotonic()
        with pytest.raises(Empty):
            wait(kernel, "shell", timeout=0.3)
        assert least <= time.monotonic() - start < most, "a dead kernel: at once; a live one: the whole timeout"
