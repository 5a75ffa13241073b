"""How long grading takes: one submission with and without the sandbox, and a class of 30 (part of `make bench`),
optionally side by side with another checkout of the course in the same run.

    .venv/bin/python benchmarks/grading.py [--quick] [--baseline DIR] [--class-size N]

A class is 30 submissions of notebook 02 built from the test fixtures: 5 correct, 5 untouched, 5 with an infinite
loop, and 15 with assorted mistakes; graded with `attnlab-check --batch --jobs <cores>` in the sandbox.

``--baseline DIR`` times an older checkout too (``/work/baseline``, say, from before the course tooling became the
package ``attnlab_course``: its grader is ``attnlab.course.grading``), measurement by measurement beside this one,
so that both see the same machine load. Each tree is timed by a worker process of its own, running this file with
that tree's Python: ``DIR/.venv/bin/python`` when the tree has a virtual environment, else a throwaway one made of
this environment's packages with ``DIR/src`` first (nothing is written into DIR). Each tree grades the submissions
made by its own ``tests/make_submissions.py`` against its own solution notebooks.

The numbers go to benchmarks/results/grading.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIX = {"02-correct.ipynb": 5, "02-untouched.ipynb": 5, "02-loop_and_deleted.ipynb": 5,
       "02-inverted_and_nan.ipynb": 5, "02-off_by_one_and_inverted_attention.ipynb": 5, "02-cheats.ipynb": 5}


# --- the worker: runs with the Python of the tree it times ----------------------------------------------------------


def _grader(tree: Path):
    """The grading package of ``tree`` (``attnlab_course.grading``, or ``attnlab.course.grading`` before the move),
    checked to come from that tree."""
    for name in ("attnlab_course.grading", "attnlab.course.grading"):
        try:
            package = importlib.import_module(name)
        except ImportError:
            continue
        where = Path(package.__file__).resolve()
        if not where.is_relative_to(tree.resolve()):
            raise SystemExit(f"{name} comes from {where}, not from {tree}")
        return (importlib.import_module(f"{name}.cli"), importlib.import_module(f"{name}.runner"),
                importlib.import_module(f"{name}.sandbox"))
    raise SystemExit(f"no grader importable for {tree}")


def _class_names(size: int) -> list[tuple[str, int]]:
    """The first ``size`` submissions of the class, one of each kind in turn: (fixture name, copy number)."""
    order = [(name, n) for n in range(max(MIX.values())) for name, copies in MIX.items() if n < copies]
    return order[:size]


def _worker(tree: Path, phase: str, repeat: int, class_size: int) -> dict:
    sys.path.insert(0, str(tree / "tests"))
    import make_submissions
    import nbformat

    cli, runner, sandbox = _grader(tree)
    reason = sandbox.unavailable_reason()
    results = {"cores": runner.available_cores(), "sandbox_unavailable": reason}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        built = make_submissions.write_all(tmp / "fixtures")
        if phase == "one":
            correct = tmp / "fixtures" / "02-correct.ipynb"
            for use_sandbox in ([False] if reason else [False, True]):
                best = float("inf")
                for _ in range(repeat):
                    start = time.perf_counter()
                    report = runner.grade(correct, use_sandbox=use_sandbox)
                    best = min(best, time.perf_counter() - start)
                    assert report.results and all(r.status == "passed" for r in report.results), report
                results["with_sandbox_s" if use_sandbox else "without_sandbox_s"] = best
        elif not reason:
            folder = tmp / "class"
            folder.mkdir()
            for name, n in _class_names(class_size):
                nbformat.write(built[name].build(), folder / f"learner{n:02d}-{name}")
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()) as out:
                cli.main(["--batch", str(folder), "--csv", str(tmp / "results.csv")])
            results["batch_s"] = time.perf_counter() - start
            results["batch_size"] = class_size
            results["batch_summary"] = out.getvalue().strip().splitlines()
    return results


# --- the driver ------------------------------------------------------------------------------------------------------


def _overlay_python(tree: Path, where: Path) -> Path:
    """A throwaway venv in ``where`` whose site-packages links every package of this environment except this
    repository's own, and puts ``tree/src`` first (a ``.pth`` file): ``tree``'s attnlab on this environment's
    packages. The sandbox shows the kernel the folders those links point into."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = where / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(sysconfig.get_path("purelib"))
    for entry in sorted(ours.iterdir()):
        if entry.suffix == ".pth" or entry.name.startswith(("attnlab", "__editable__", "_distutils_hack")):
            continue
        if not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    (site / "00-tree.pth").write_text(str(tree / "src") + "\n", encoding="utf-8")
    return python


def _python_for(tree: Path, scratch: Path) -> Path:
    own = tree / ".venv" / "bin" / "python"
    if own.exists():
        return own
    if tree.resolve() == ROOT:
        return Path(sys.executable)
    return _overlay_python(tree, scratch / f"venv-{tree.name}")


def _run_worker(python: Path, tree: Path, phase: str, repeat: int, class_size: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # nothing written into another checkout
        env.pop("PYTHONPATH", None)
        command = [str(python), str(Path(__file__).resolve()), "--worker", str(tree), "--phase", phase,
                   "--repeat", str(repeat), "--class-size", str(class_size), "--out", out.name]
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the worker for {tree} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return json.loads(Path(out.name).read_text(encoding="utf-8"))


def _change(new: float, old: float) -> str:
    return f"{100 * (new - old) / old:+.0f}%"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one timing each instead of the best of three")
    parser.add_argument("--baseline", type=Path, help="another checkout to time side by side with this one")
    parser.add_argument("--class-size", type=int, default=30, help="submissions in the class (default 30)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["one", "class"], help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = _worker(args.worker, args.phase, args.repeat, args.class_size)
        args.out.write_text(json.dumps(result), encoding="utf-8")
        return 0

    trees = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    repeat = 1 if args.quick else 3
    results: dict = {name: {"tree": str(tree)} for name, tree in trees.items()}
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as scratch:
        pythons = {name: _python_for(tree, Path(scratch)) for name, tree in trees.items()}
        for phase in ("one", "class"):
            order = list(trees) if phase == "one" else list(trees)[::-1]  # neither tree always goes first
            for name in order:
                results[name].update(_run_worker(pythons[name], trees[name], phase, repeat, args.class_size))
    results["conditions"] = {"class_size": args.class_size, "repeat": repeat, "load_before": os.getloadavg()}

    for name, tree in trees.items():
        r = results[name]
        line = f"{name} ({tree}): one submission of 02, alone: {r['without_sandbox_s']:.1f} s without the sandbox"
        print(line + (f", {r['with_sandbox_s']:.1f} s with it" if "with_sandbox_s" in r else
                      f" (sandbox unavailable: {r['sandbox_unavailable']})"))
        if "batch_s" in r:
            print(f"  {r['batch_size']} submissions of 02, sandboxed, {r['cores']} at a time: {r['batch_s']:.0f} s")
            print("\n".join("  " + line for line in r["batch_summary"]))
    if "baseline" in results:
        this, base = results["this"], results["baseline"]
        for key, what in (("without_sandbox_s", "one submission without the sandbox"),
                          ("with_sandbox_s", "one submission with the sandbox"), ("batch_s", "the class")):
            if key in this and key in base:
                print(f"this tree against the baseline, {what}: {this[key]:.1f} s against {base[key]:.1f} s "
                      f"({_change(this[key], base[key])})")
    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "grading.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
