"""``attnlab-check``: the command line of the grader. It checks its arguments, says what isolation this host allows,
and hands the work to :mod:`.runner`, the printing to :mod:`.report` and the files a batch writes to :mod:`.outputs`.

``attnlab-check merge RESULTS...`` combines the results files of a batch's shards (``--shard K/N``) into what one
batch writes."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..paths import solutions_dir as default_solutions_dir
from . import exports, isolation, results, runner, sandbox
from .exports import ExportError
from .outputs import Outputs, write_all
from .points import ConfigError, Roster, Scheme, load_roster, load_scheme
from .report import format_report, format_summary, refuse_unsafe_output
from .runner import DEFAULT_TIMEOUT, default_jobs


def _add_output_options(parser) -> None:
    """The options that say what a batch (or a merge of its shards) writes, and with which points and roster."""
    out = parser.add_argument_group("what to write (with --batch, or merge)")
    out.add_argument("--csv", type=Path, metavar="FILE", help="the results, one row per submission")
    out.add_argument("--feedback", type=Path, metavar="DIR",
                     help="one self-contained HTML feedback page per submission, to hand back")
    out.add_argument("--export", action="append", default=[], choices=exports.FORMATS,
                     help="grades for an LMS: canvas.csv, moodle.csv or gradescope/NAME.json in --export-dir "
                          "(repeat for several)")
    out.add_argument("--export-dir", type=Path, default=Path("."), metavar="DIR",
                     help="where --export writes (default: the current folder)")
    out.add_argument("--similarity", type=Path, metavar="FILE",
                     help="an HTML report of learners whose exercise code is alike (evidence, not a verdict)")
    out.add_argument("--results", type=Path, metavar="FILE",
                     help="every submission's results as JSON, for 'attnlab-check merge'")
    out.add_argument("--points", type=Path, metavar="FILE",
                     help="a TOML file of points per exercise and assignment titles (default: 1 per exercise, or "
                          "the notebooks' attnlab.points)")
    out.add_argument("--roster", type=Path, metavar="FILE", help="a CSV file mapping file names to learner ids")
    parser.add_argument("--solutions", type=Path, default=None, metavar="DIR",
                        help="the solution notebooks (default: notebooks/solutions of this repository)")


def _outputs(parser, args) -> tuple[Outputs, Scheme, Roster]:
    """The outputs asked for, checked before any grading, with the points scheme and the roster."""
    solutions = args.solutions or default_solutions_dir()
    if not solutions.is_dir():
        parser.error(f"no solution notebooks in {solutions}; pass --solutions DIR")
    outputs = Outputs(args.csv, args.feedback, list(dict.fromkeys(args.export)), args.export_dir, args.similarity,
                      args.results)
    for path in outputs.planned():
        if refuse_unsafe_output(path):
            parser.error(refuse_unsafe_output(path))
    try:
        return outputs, load_scheme(solutions, args.points), load_roster(args.roster)
    except ConfigError as exc:
        parser.error(str(exc))


def _write(outputs, reports, scheme, roster, shard=(1, 1), folder_size=None) -> list[str] | None:
    try:
        return write_all(reports, outputs, scheme, roster, shard, folder_size)
    except (ExportError, ConfigError, ValueError, OSError) as exc:  # e.g. a notebook the --solutions do not have
        print(f"attnlab-check: {exc}", file=sys.stderr)
        return None


def merge_main(argv) -> int:
    """``attnlab-check merge RESULTS...``: what one batch would have written, from its shards' results files."""
    parser = argparse.ArgumentParser(
        prog="attnlab-check merge",
        description="Combine the results files of a batch's shards (--batch DIR --shard K/N --results FILE) into "
                    "what one batch over DIR writes: the CSV, feedback pages, exports and similarity report.")
    parser.add_argument("shards", nargs="+", type=Path, metavar="RESULTS", help="every shard's results file")
    _add_output_options(parser)
    args = parser.parse_args(argv)
    outputs, scheme, roster = _outputs(parser, args)
    try:
        reports = results.merge(args.shards)
    except results.ResultsError as exc:
        parser.error(str(exc))
    said = _write(outputs, reports, scheme, roster, (1, 1), len(reports))
    if said is None:
        return 2
    print(format_summary(reports, None, None))
    print("\n".join(said))
    return 1 if any(r.problem for r in reports) else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["merge"]:  # a notebook called "merge" is ./merge
        return merge_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="attnlab-check",
        description="Check the exercises of a learner notebook against its solution notebook, through nbval; or "
                    "grade a folder of them (--batch). 'attnlab-check merge' combines the shards of a batch.",
        epilog="Each submission's kernel runs in a bubblewrap sandbox (Linux); --batch refuses to run without one "
               "unless --no-sandbox is given.",
    )
    parser.add_argument("notebook", nargs="?", type=Path, help="the learner notebook to check")
    parser.add_argument("--batch", type=Path, metavar="DIR", help="grade every file in DIR (one per learner)")
    parser.add_argument("--shard", metavar="K/N", help="with --batch: grade only shard K of N (a hash of each file "
                                                      "name decides; combine with 'attnlab-check merge')")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds each exercise cell and check may run (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--jobs", type=int, default=None, help="with --batch: submissions graded at once "
                                                               "(default: one more than the available cores)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run learner code without the sandbox, with your privileges (trusted work only)")
    parser.add_argument("--all-cells", action="store_true",
                        help="run every cell of the solution notebook, not only those the exercises need")
    _add_output_options(parser)
    args = parser.parse_args(argv)
    if (args.notebook is None) == (args.batch is None):
        parser.error("give one learner notebook, or --batch DIR")
    asked = [name for name in ("csv", "feedback", "similarity", "results", "shard") if getattr(args, name)]
    if args.export:
        asked.append("export")
    if asked and not args.batch:
        parser.error(f"--{asked[0]} needs --batch")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    try:
        shard = results.parse_shard(args.shard) if args.shard else (1, 1)
    except ValueError as exc:
        parser.error(f"--shard: {exc}")
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
    outputs, scheme, roster = _outputs(parser, args)
    # every entry but folders: links, FIFOs and devices are listed too, and reported as not regular files
    paths = sorted((p for p in args.batch.iterdir()
                    if not p.name.startswith(".") and (p.is_symlink() or not p.is_dir())), key=lambda p: p.name)
    if not paths:
        parser.error(f"no files in {args.batch}")
    folder_size = len(paths)
    if shard != (1, 1):
        paths = [p for p in paths if results.shard_of(p.name, shard[1]) == shard[0]]
        print(f"Shard {shard[0]}/{shard[1]}: {len(paths)} of the {folder_size} files in {args.batch}.")
    jobs = args.jobs or default_jobs()
    no_cgroup = None if args.no_sandbox else isolation.cgroup_unavailable_reason()
    if no_cgroup:
        limits = runner.LIMITS
        print(f"note: no cgroup per grading ({no_cgroup}): limits are per process only ({limits.memory // 2**30} "
              f"GiB of memory each, {limits.processes} processes); --jobs {jobs} gradings may use {jobs} times that.")
    start = time.monotonic()
    reports = runner.grade_many(paths, solutions, args.timeout, jobs, use_sandbox=not args.no_sandbox,
                                sliced=not args.all_cells) if paths else []
    seconds = time.monotonic() - start
    said = _write(outputs, reports, scheme, roster, shard, folder_size)
    print(format_summary(reports, seconds, jobs))
    if said is None:
        return 2
    if said:
        print("\n".join(said))
    return 1 if any(r.problem for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
