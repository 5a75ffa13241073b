"""``attnlab-check``: the command line of the grader. It checks its arguments, says what isolation this host allows,
and hands the work to :mod:`.runner` and the printing to :mod:`.report`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..paths import solutions_dir as default_solutions_dir
from . import isolation, runner, sandbox
from .report import format_report, format_summary, refuse_unsafe_output, write_csv
from .runner import DEFAULT_TIMEOUT, available_cores


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="attnlab-check",
        description="Check the exercises of a learner notebook against its solution notebook, through nbval.",
        epilog="Each submission's kernel runs in a bubblewrap sandbox (Linux); --batch refuses to run without one "
               "unless --no-sandbox is given.",
    )
    parser.add_argument("notebook", nargs="?", type=Path, help="the learner notebook to check")
    parser.add_argument("--batch", type=Path, metavar="DIR", help="grade every file in DIR (one per learner)")
    parser.add_argument("--csv", type=Path, metavar="FILE", help="with --batch: write the results to this CSV file")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds each exercise cell and check may run (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--jobs", type=int, default=None, help="with --batch: submissions graded at once "
                                                               "(default: the available cores)")
    parser.add_argument("--solutions", type=Path, default=None, metavar="DIR",
                        help="the solution notebooks (default: notebooks/solutions of this repository)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run learner code without the sandbox, with your privileges (trusted work only)")
    parser.add_argument("--all-cells", action="store_true",
                        help="run every cell of the solution notebook, not only those the exercises need")
    args = parser.parse_args(argv)
    if (args.notebook is None) == (args.batch is None):
        parser.error("give one learner notebook, or --batch DIR")
    if args.csv and not args.batch:
        parser.error("--csv needs --batch")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    solutions = args.solutions or default_solutions_dir()
    if not solutions.is_dir():
        parser.error(f"no solution notebooks in {solutions}; pass --solutions DIR")

    missing = None if args.no_sandbox else sandbox.unavailable_reason()
    if args.notebook is not None:
        if not args.notebook.exists() and not args.notebook.is_symlink():
            parser.error(f"{args.notebook} is not a file")
        if missing:
            print(f"note: no sandbox ({missing}); your code runs with your own privileges, as in the notebook.")
        report = runner.grade(args.notebook, solutions, args.timeout, use_sandbox=not (args.no_sandbox or missing),
                              sliced=not args.all_cells)
        print(format_report(report))
        return 2 if report.problem else (0 if report.passed else 1)

    if missing:
        print(f"attnlab-check: cannot grade a batch safely: {missing}; {sandbox.INSTALL_HINT}.", file=sys.stderr)
        return 2
    if not args.batch.is_dir():
        parser.error(f"{args.batch} is not a folder")
    if args.csv and refuse_unsafe_output(args.csv):
        parser.error(refuse_unsafe_output(args.csv))
    # every entry but folders: links, FIFOs and devices are listed too, and reported as not regular files
    paths = sorted(p for p in args.batch.iterdir() if not p.name.startswith(".") and (p.is_symlink() or not p.is_dir()))
    if not paths:
        parser.error(f"no files in {args.batch}")
    jobs = args.jobs or available_cores()
    no_cgroup = None if args.no_sandbox else isolation.cgroup_unavailable_reason()
    if no_cgroup:
        limits = runner.LIMITS
        print(f"note: no cgroup per grading ({no_cgroup}): limits are per process only ({limits.memory // 2**30} "
              f"GiB of memory each, {limits.processes} processes); --jobs {jobs} gradings may use {jobs} times that.")
    start = time.monotonic()
    reports = runner.grade_many(paths, solutions, args.timeout, jobs, use_sandbox=not args.no_sandbox,
                                sliced=not args.all_cells)
    if args.csv:
        write_csv(reports, args.csv)
    print(format_summary(reports, time.monotonic() - start, jobs))
    if args.csv:
        print(f"Results written to {args.csv}")
    return 1 if any(r.problem for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
