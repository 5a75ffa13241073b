"""The grader as a Gradescope autograder: ``python -m attnlab_course.grading.gradescope`` is what ``run_autograder``
runs (docs/grading-at-scale.md shows the zip: ``setup.sh``, ``run_autograder``, an optional ``points.toml``).

Gradescope puts the learner's upload in ``/autograder/submission`` and reads ``/autograder/results/results.json``
(its documented autograder specification). This grades the one notebook uploaded, with the same grader and points as
``--batch`` (:func:`.exports.gradescope_results`), in the bubblewrap sandbox where the container allows it. Where it
does not, it writes a result that says so and gives no score, unless the instructor chose ``--no-sandbox`` (the
learner's code then runs with the autograder's own privileges, inside Gradescope's container).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..paths import solutions_dir as default_solutions_dir
from . import exports, runner, sandbox
from .points import ConfigError, load_scheme
from .runner import Report


def _write_problem(path: Path, text: str) -> None:
    exports.write_gradescope_file(Report(Path("submission"), problem=text), path, scheme=None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab_course.grading.gradescope",
                                     description="Grade the notebook Gradescope uploaded and write its results.json.")
    parser.add_argument("--root", type=Path, default=Path("/autograder"), help="Gradescope's folder (/autograder)")
    parser.add_argument("--points", type=Path, default=None,
                        help="points and titles (default: ROOT/source/points.toml if there)")
    parser.add_argument("--solutions", type=Path, default=None, help="the solution notebooks")
    parser.add_argument("--timeout", type=float, default=runner.DEFAULT_TIMEOUT)
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade even where bubblewrap cannot run (the learner's code runs unsandboxed)")
    args = parser.parse_args(argv)
    out = args.root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    notebooks = sorted((args.root / "submission").glob("*.ipynb"))
    if len(notebooks) != 1:
        _write_problem(out, f"expected one notebook (.ipynb) in the upload, found {len(notebooks)}: upload only "
                            "your notebook")
        return 0
    missing = None if args.no_sandbox else sandbox.unavailable_reason()
    if missing:
        _write_problem(out, f"the autograder could not start its sandbox ({missing}); your instructor has been told, "
                            "and no score was given")
        print(f"attnlab-check: no sandbox ({missing}); pass --no-sandbox to grade without it", file=sys.stderr)
        return 0
    points = args.points or (args.root / "source" / "points.toml")
    solutions = args.solutions or default_solutions_dir()
    try:
        scheme = load_scheme(solutions, points if points.is_file() else None)
    except ConfigError as exc:
        _write_problem(out, f"the autograder is misconfigured ({exc}); no score was given")
        return 0
    report = runner.grade(notebooks[0], solutions, args.timeout, use_sandbox=not args.no_sandbox)
    exports.write_gradescope_file(report, out, scheme)
    print(f"{notebooks[0].name}: {len(report.results)} exercises graded; results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
