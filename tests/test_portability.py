"""Stored notebook outputs hold on other CPUs: the notebooks rerun under nbval with other machines forced on this one.

nbval compares every output with the one stored when the notebook was executed, on one machine. Another CPU makes
OpenBLAS pick another matrix kernel and numpy another SIMD loop, so the last bits of a matmul, a sum or an exp
differ, and any printed digit that depends on them (a chaotic training run, an ill-conditioned result, a number on a
rounding boundary) would fail there. These tests force other machines' code paths on this one and require the same
outputs, with the same nbval options as the main run (``pyproject.toml``):

- ``openblas-haswell``, ``openblas-sandybridge``, ``openblas-skylakex``: OpenBLAS's AVX2, AVX and AVX-512 kernels
  (``OPENBLAS_CORETYPE``), each where this CPU can run it and it is not already this CPU's own kernel (the main run
  covers that one);
- ``openblas-nehalem``: the SSE kernels of CPUs before AVX;
- ``numpy-no-avx512``: numpy without its AVX-512 loops, as on an AVX2 machine (``NPY_DISABLE_CPU_FEATURES``);
- ``numpy-baseline``: numpy with none of its dispatched loops beyond the wheel's baseline;
- ``one-thread``: one BLAS thread and one core, so attnlab's thread pool and OpenBLAS's threads are both off.

To stay within the test budget, each run forces several of these at once (the ``RUNS`` below): a difference under
any of them fails the run, and the failing cell's diff says which output moved. Each run checks, before executing
anything, that every configuration took effect (the OpenBLAS kernel that threadpoolctl reports, the numpy features
that are off), and a configuration this machine cannot run is left out with its reason, printed by ``-rs``. Each run
forces one OpenBLAS kernel, the newest this CPU can run that the other has not: on an AVX-512 CPU, whose own kernel
is SkylakeX, that is Haswell and Sandybridge, and Nehalem is left out (its skip says so). The
solution notebooks are run (the learner notebooks differ only in their exercise cells, whose outputs are not
numeric); 00 computes nothing.
"""

from __future__ import annotations

import json
import os
import pathlib
import functools
import platform
import re
import subprocess
import sys
from xml.etree import ElementTree

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks" / "solutions").glob("*.ipynb"))

# What this machine is: its OpenBLAS kernel and its numpy SIMD features, read in a fresh process.
_PROBE = """
import json, numpy, threadpoolctl
from numpy._core import _multiarray_umath as m
blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({
    "blas": blas[0]["internal_api"] if blas else None,
    "kernel": blas[0].get("architecture") if blas else None,
    "dispatch": list(m.__cpu_dispatch__),
    "found": sorted(k for k, v in m.__cpu_features__.items() if v),
}))
"""

# The CPU flags (from /proc/cpuinfo) each OpenBLAS x86-64 kernel needs.
KERNEL_FLAGS = {
    "Haswell": {"avx2", "fma"},
    "Sandybridge": {"avx"},
    "SkylakeX": {"avx512f", "avx512bw", "avx512dq", "avx512vl"},
    "Nehalem": {"sse4_2", "ssse3"},
}
ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")  # nbval's colours, as the JUnit report writes them
ONE_CORE = "one core"  # not a variable of the child's environment: the child is pinned to one core instead
AVX512_DISPATCH = ("X86_V4", "AVX512F", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL", "AVX512_SPR")


def probe(env: dict | None = None) -> dict:
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                            env={**os.environ, **(env or {})})
    return json.loads(result.stdout)


def cpu_flags() -> set[str]:
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def openblas_kernel(name: str, machine: dict, flags: set[str]) -> tuple[dict, str | None]:
    """The environment that forces OpenBLAS's ``name`` kernel, or the reason it cannot run here."""
    if machine["blas"] != "openblas":
        return {}, f"numpy's BLAS is {machine['blas']}, not OpenBLAS"
    if platform.machine() not in ("x86_64", "AMD64"):
        return {}, f"OpenBLAS's {name} kernel is for x86-64 CPUs, this is {platform.machine()}"
    if not KERNEL_FLAGS[name] <= flags:
        return {}, f"this CPU lacks {' '.join(sorted(KERNEL_FLAGS[name] - flags))} for OpenBLAS's {name} kernel"
    if (machine["kernel"] or "").lower() == name.lower():
        return {}, f"{name} is already this CPU's own OpenBLAS kernel (the main nbval run covers it)"
    return {"OPENBLAS_CORETYPE": name}, None


def numpy_features(which: str, machine: dict) -> tuple[dict, str | None]:
    found = set(machine["found"])
    if which == "no-avx512":
        off = [f for f in machine["dispatch"] if f in found and f in AVX512_DISPATCH]
        reason = "this CPU has no AVX-512, so numpy already runs without its AVX-512 loops"
    else:
        off = [f for f in machine["dispatch"] if f in found]
        reason = "numpy has no loops beyond its baseline for this CPU"
    return ({"NPY_DISABLE_CPU_FEATURES": " ".join(off)}, None) if off else ({}, reason)


@functools.cache
def configurations() -> dict[str, tuple[dict, str | None]]:
    """Every configuration by name: the environment that forces it, or why it cannot run on this machine."""
    machine, flags = probe(), cpu_flags()
    configs = {f"openblas-{name.lower()}": openblas_kernel(name, machine, flags) for name in KERNEL_FLAGS}
    configs["numpy-no-avx512"] = numpy_features("no-avx512", machine)
    configs["numpy-baseline"] = numpy_features("baseline", machine)
    one = (None if hasattr(os, "sched_setaffinity") else "pinning a process to one core needs os.sched_setaffinity")
    configs["one-thread"] = ({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", ONE_CORE: "1"}, one)
    return configs


# Each run forces several configurations at once. Two runs of the solution notebooks cost about 2 x 60 s of CPU on
# this machine's kind; together they cover every configuration above that the CPU supports. The kernels that need
# newer CPUs come first in each list: where one is missing, the next that this CPU can run takes its place.
RUNS = {
    "run-a": (("openblas-skylakex", "openblas-haswell", "openblas-sandybridge"), ("numpy-no-avx512",),
              ("one-thread",)),
    "run-b": (("openblas-haswell", "openblas-sandybridge", "openblas-nehalem"), ("numpy-baseline",)),
}


@functools.cache
def plans() -> dict[str, tuple[dict, tuple[str, ...], tuple[str, ...]]]:
    """Each run's merged environment, the configurations it forces, and why others of its lists were left out.

    From each list a run takes the first configuration this machine can run and no earlier run forces, or else
    the first it can run at all."""
    configs, taken, result = configurations(), set(), {}
    for run, groups in RUNS.items():
        env, used, left_out = {}, [], []
        for group in groups:
            runnable = [name for name in group if configs[name][1] is None]
            left_out += [f"{name}: {configs[name][1]}" for name in group if name not in runnable]
            fresh = [name for name in runnable if name not in taken]
            if fresh or runnable:
                name = (fresh or runnable)[0]
                env.update(configs[name][0])
                used.append(name)
                taken.add(name)
        result[run] = (env, tuple(used), tuple(left_out))
    return result


def plan(run: str) -> tuple[dict, tuple[str, ...], tuple[str, ...]]:
    env, used, left_out = plans()[run]
    return dict(env), used, left_out


def one_core():
    """Run the child on a single core, so neither OpenBLAS nor attnlab's pool can use a second one."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


@pytest.mark.parametrize("name", ["openblas-haswell", "openblas-sandybridge", "openblas-skylakex", "openblas-nehalem",
                                  "numpy-no-avx512", "numpy-baseline", "one-thread"])
def test_every_configuration_runs_or_says_why_not(name):
    env, reason = configurations()[name]
    if reason:
        pytest.skip(f"{name}: {reason}")
    if any(name in plan(run)[1] for run in RUNS):
        return
    # Each run forces one OpenBLAS kernel. Where the CPU can run three besides its own (an AVX-512 one runs Haswell,
    # Sandybridge and Nehalem), the two newest are forced and the oldest is left out: say so, unless it was needed.
    kernels = [used for run in RUNS for used in plan(run)[1] if used.startswith("openblas-")]
    assert name.startswith("openblas-") and len(kernels) == len(RUNS), f"{name} can run here, but no run forces it"
    pytest.skip(f"{name}: can run here, but each of the {len(RUNS)} runs already forces a newer kernel "
                f"({', '.join(kernels)}); a run per kernel would double the test's time")


KERNEL_START = "Kernel died before replying to kernel_info"


def _nbval(notebooks: list[str], env: dict, pinned: bool, report: pathlib.Path, what: str) -> dict[str, list[str]]:
    """One pytest process running ``notebooks`` under nbval with ``env``: the failing cells of each notebook, a line
    each with nbval's diff, from the run's JUnit report."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", f"--junitxml={report}", *notebooks]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env},
                            preexec_fn=one_core if pinned else None, timeout=1800)
    assert report.exists(), f"{what} did not run:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"
    failures: dict[str, list[str]] = {notebook: [] for notebook in notebooks}
    ran = set()
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        # nbval's items are named after their notebook: classname notebooks.solutions.05_cost.ipynb
        notebook = case.get("classname", "").replace(".", "/").replace("/ipynb", ".ipynb")
        ran.add(notebook)
        for problem in [*case.iter("failure"), *case.iter("error")]:
            text = ANSI.sub("", f"{(problem.get('message') or '')[:300]}\n{(problem.text or '')[-3000:]}")
            failures.setdefault(notebook, []).append(f"{case.get('name')}: {text}")
    for notebook in set(notebooks) - ran:
        failures[notebook].append(f"not run; pytest said:\n{result.stdout[-3000:]}")
    return failures


class NotebookRun:
    """The solution notebooks under nbval, under one run's configurations (a class per run, so that xdist's
    ``--dist loadscope`` sends the runs to different workers). A run is one pytest process over every notebook (a
    process per notebook cost 8 x 2 s of start-up and probing per run); each notebook's test reports its own cells."""

    run = ""

    @pytest.fixture(scope="class")
    @classmethod
    def outcome(cls, tmp_path_factory) -> dict[str, list[str]]:
        """The run's failures by notebook, each a line per failing cell with nbval's diff (empty: all held)."""
        env, used, left_out = plan(cls.run)
        if not used:
            pytest.skip(f"{cls.run}: no configuration can run on this machine ({'; '.join(left_out)})")
        pinned = env.pop(ONE_CORE, None) is not None

        # Every forced configuration must have taken effect, or the run would prove nothing.
        seen = probe(env)
        if "OPENBLAS_CORETYPE" in env:
            assert (seen["kernel"] or "").lower() == env["OPENBLAS_CORETYPE"].lower(), seen
        if "NPY_DISABLE_CPU_FEATURES" in env:
            assert not set(env["NPY_DISABLE_CPU_FEATURES"].split()) & set(seen["found"]), seen

        forced = ", ".join([f"{k}={v}" for k, v in env.items()] + (["one core"] if pinned else []))
        folder = tmp_path_factory.mktemp(cls.run)
        failures = _nbval(NOTEBOOKS, env, pinned, folder / "junit.xml", f"{cls.run} ({forced})")
        # A kernel that died as it started (jupyter_client's ports, picked free, can be taken by another process
        # before the kernel binds them) compared no output: that notebook runs once more.
        again = [n for n, lines in failures.items() if lines and all(KERNEL_START in line for line in lines)]
        if again:
            failures |= {n: [f"{line} (a second run too)" for line in lines] for n, lines in
                         _nbval(again, env, pinned, folder / "again.xml", f"{cls.run} ({forced})").items()}
        return {n: [f"under {', '.join(used)} ({forced}): {line}" for line in lines] for n, lines in failures.items()}

    @pytest.mark.parametrize("notebook", NOTEBOOKS)
    def test_notebook_outputs_hold_under_other_cpu_configurations(self, notebook, outcome):
        assert not outcome[notebook], f"{notebook}: outputs differ from the stored ones.\n" + "\n".join(outcome[notebook])


class TestRunA(NotebookRun):
    run = "run-a"


class TestRunB(NotebookRun):
    run = "run-b"
