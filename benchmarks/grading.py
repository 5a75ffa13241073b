"""How long grading takes: one submission with and without the sandbox, and a class of 30 (part of `make bench`).

    .venv/bin/python benchmarks/grading.py [--quick]

A class is 30 submissions of notebook 02 built from the test fixtures: 5 correct, 5 untouched, 5 with an infinite
loop, and 15 with assorted mistakes; graded with `attnlab-check --batch --jobs <cores>` in the sandbox. The numbers go
to benchmarks/results/grading.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import make_submissions  # noqa: E402

from attnlab_course.grading import cli, runner, sandbox  # noqa: E402

MIX = {"02-correct.ipynb": 5, "02-untouched.ipynb": 5, "02-loop_and_deleted.ipynb": 5,
       "02-inverted_and_nan.ipynb": 5, "02-off_by_one_and_inverted_attention.ipynb": 5, "02-cheats.ipynb": 5}


def one(path: Path, use_sandbox: bool, repeat: int) -> float:
    """Best wall-clock seconds of grading ``path`` alone."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        report = runner.grade(path, use_sandbox=use_sandbox)
        best = min(best, time.perf_counter() - start)
        assert all(r.status == "passed" for r in report.results), report
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one timing each instead of the best of three")
    args = parser.parse_args(argv)
    reason = sandbox.unavailable_reason()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        built = make_submissions.write_all(tmp / "fixtures")
        correct = tmp / "fixtures" / "02-correct.ipynb"
        repeat = 1 if args.quick else 3
        results = {"cores": runner.available_cores(), "without_sandbox_s": one(correct, False, repeat)}
        if reason:
            print(f"sandbox unavailable ({reason}): only the unsandboxed time is measured")
        else:
            results["with_sandbox_s"] = one(correct, True, repeat)
            folder = tmp / "class"
            folder.mkdir()
            for name, copies in MIX.items():
                for n in range(copies):
                    nbformat.write(built[name].build(), folder / f"learner{n:02d}-{name}")
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()) as out:
                cli.main(["--batch", str(folder), "--csv", str(tmp / "results.csv")])
            results["batch_of_30_s"] = time.perf_counter() - start
            results["batch_summary"] = out.getvalue().strip().splitlines()
    print(f"one submission of 02, alone: {results['without_sandbox_s']:.1f} s without the sandbox"
          + (f", {results['with_sandbox_s']:.1f} s with it" if "with_sandbox_s" in results else ""))
    if "batch_of_30_s" in results:
        print(f"30 submissions of 02 (5 infinite loops), sandboxed, {results['cores']} at a time: "
              f"{results['batch_of_30_s']:.0f} s")
        print("\n".join(results["batch_summary"]))
    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "grading.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
