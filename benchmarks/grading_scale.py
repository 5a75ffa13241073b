"""Submissions graded per minute per core: the figure to size a cluster with (docs/grading-at-scale.md).

    .venv/bin/python benchmarks/grading_scale.py [--submissions 8] [--shards 2]

A class of notebook 02 submissions is made from the test fixtures (correct, untouched and three kinds of mistakes,
in turn; no infinite loops, which cost their deadline whatever the machine). It is graded twice, by the real grader
in the sandbox where this host has one (else ``--no-sandbox``, and the JSON says so):

* ``batch``: one ``attnlab-check --batch DIR --jobs C`` on the C available cores;
* ``shards``: ``--shards N`` processes ``attnlab-check --batch DIR --shard K/N --jobs 1 --results ...`` at once, as
  N one-core cluster tasks would, then ``attnlab-check merge``; the merge's CSV must equal the batch's.

Each gives submissions per minute per core = submissions / wall minutes / cores used. Numbers depend on the load of
the machine; run it on a quiet one. They go to benchmarks/results/grading_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

KINDS = ["correct", "untouched", "inverted_and_nan", "off_by_one_and_inverted_attention", "honest_forms"]


def make_class(folder: Path, size: int) -> None:
    import make_submissions

    subs = {s.name: s for s in make_submissions.load() if s.notebook == "02_masks"}
    built = {kind: subs[kind].build() for kind in KINDS}
    import nbformat

    for i in range(size):
        kind = KINDS[i % len(KINDS)]
        nbformat.write(built[kind], folder / f"learner-{i:03d}-{kind}.ipynb")


def check(args: list[str]) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "attnlab_course.grading.cli", *args], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=8)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    from attnlab_course.grading import sandbox
    from attnlab_course.grading.runner import available_cores

    cores = available_cores()
    sandboxed = sandbox.unavailable_reason() is None
    options = [] if sandboxed else ["--no-sandbox"]
    with tempfile.TemporaryDirectory(prefix="attnlab-scale-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "class"
        folder.mkdir()
        make_class(folder, args.submissions)
        batch_seconds = check(["--batch", str(folder), "--jobs", str(cores), "--csv", str(tmp / "batch.csv"),
                               *options])
        start = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-m", "attnlab_course.grading.cli", "--batch", str(folder),
                                   "--shard", f"{k}/{args.shards}", "--jobs", "1", "--results",
                                   str(tmp / f"shard-{k}.json"), *options],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for k in range(1, args.shards + 1)]
        for p in procs:
            p.wait()
        check(["merge", *(str(tmp / f"shard-{k}.json") for k in range(1, args.shards + 1)), "--csv",
               str(tmp / "merged.csv")])
        shard_seconds = time.monotonic() - start
        same = (tmp / "batch.csv").read_bytes() == (tmp / "merged.csv").read_bytes()
    n = args.submissions
    result = {
        "submissions": n, "cores": cores, "sandbox": sandboxed, "load_average_at_end": os.getloadavg(),
        "batch": {"seconds": round(batch_seconds, 1), "jobs": cores,
                  "per_minute_per_core": round(n / (batch_seconds / 60) / cores, 2)},
        "shards": {"seconds": round(shard_seconds, 1), "processes": args.shards, "jobs_each": 1,
                   "per_minute_per_core": round(n / (shard_seconds / 60) / min(args.shards, cores), 2),
                   "merged_csv_equals_batch_csv": same},
    }
    out = ROOT / "benchmarks" / "results" / "grading_scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
