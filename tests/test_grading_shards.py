"""``--shard K/N`` and ``attnlab-check merge``: N shards graded as separate processes, merged, write exactly what one
batch over the folder writes: the CSV, every feedback page, the Canvas, Moodle and Gradescope exports, the
similarity report and the results file, byte for byte.

The batches run ``tests/grading_stub.py``: the real command line and grader with nbval replaced by a deterministic
stand-in, so that five processes grade the fixture submissions (and a few awkward files) in seconds."""

from __future__ import annotations

import csv
import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import make_submissions
import pytest

from attnlab_course.grading import results

STUB = Path(__file__).resolve().parent / "grading_stub.py"
N = 3
AWKWARD = {  # files that are not notebooks, and a copy of a submission under a name with a newline and markup
    "notes.txt": "my answers are in my head\n",
    "02-corrupt.ipynb": '{"cells": [{"cell_type": "code", ',
}


def _folder(root: Path) -> Path:
    folder = root / "submissions"
    folder.mkdir()
    make_submissions.write_all(folder)
    for name, text in AWKWARD.items():
        (folder / name).write_text(text)
    shutil.copy(folder / "02-inverted_and_nan.ipynb", folder / '02-<i>new\nline"&.ipynb')
    (root / "roster.csv").write_text("file,id,name,email\n02-correct.ipynb,s001,Ada Lovelace,ada@example.org\n"
                                     "04-correct,s002,=HYPERLINK(1),b@example.org\n")
    (root / "points.toml").write_text('[points]\n"2.3" = 5\n"4.1" = 0.5\n\n[titles]\n"02_masks" = "Masks (02)"\n')
    return folder


def _outputs(out: Path, root: Path) -> list[str]:
    return ["--csv", str(out / "results.csv"), "--feedback", str(out / "feedback"), "--export", "canvas",
            "--export", "moodle", "--export", "gradescope", "--export-dir", str(out / "exports"),
            "--similarity", str(out / "similarity.html"), "--results", str(out / "results.json"),
            "--points", str(root / "points.toml"), "--roster", str(root / "roster.csv")]


def _run(args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)


def _same_trees(a: Path, b: Path) -> list[str]:
    """Files that differ, or are in one tree only."""
    names = {p.relative_to(a) for p in a.rglob("*")} | {p.relative_to(b) for p in b.rglob("*")}
    return sorted(str(n) for n in names if not ((a / n).is_dir() and (b / n).is_dir()) and not (
        (a / n).is_file() and (b / n).is_file() and filecmp.cmp(a / n, b / n, shallow=False)))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    folder = _folder(root)
    one, merged = root / "one", root / "merged"
    batch = ["--batch", str(folder), "--no-sandbox", "--jobs", "1"]
    procs = [_run([str(STUB), *batch, *_outputs(one, root)])]
    procs += [_run([str(STUB), *batch, "--shard", f"{k}/{N}", "--results", str(root / f"shard-{k}.json")])
              for k in range(1, N + 1)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    statuses = [p.returncode for p in procs]
    shards = [str(root / f"shard-{k}.json") for k in range(1, N + 1)]
    merge = _run(["-m", "attnlab_course.grading.cli", "merge", *shards, *_outputs(merged, root)])
    logs.append(merge.communicate(timeout=120)[0])
    statuses.append(merge.returncode)
    return {"root": root, "folder": folder, "one": one, "merged": merged, "logs": logs, "statuses": statuses}


def test_the_merge_of_the_shards_writes_exactly_what_one_batch_writes(graded):
    one, merged = graded["one"], graded["merged"]
    # 1: some file could not be graded (the batch, the merge, and the shards that got one of the two), else 0
    statuses = graded["statuses"]
    assert statuses[0] == statuses[-1] == 1 and set(statuses[1:-1]) <= {0, 1} and 1 in statuses[1:-1], graded["logs"]
    written = sorted(str(p.relative_to(one)) for p in one.rglob("*") if p.is_file())
    # the CSV, the similarity report, the results, 2 exports; and a feedback page and a Gradescope JSON per file
    assert len(written) == 5 + 2 * len(list(graded["folder"].iterdir())), written
    assert _same_trees(one, merged) == []


def test_each_file_is_graded_in_exactly_one_shard(graded):
    names = sorted(p.name for p in graded["folder"].iterdir())
    shards = [results.read(graded["root"] / f"shard-{k}.json") for k in range(1, N + 1)]
    graded_names = [r.path.name for _, _, reports in shards for r in reports]
    assert sorted(graded_names) == names
    assert all(reports for _, _, reports in shards), "every shard got a share of the 18 files"
    for (k, n), size, reports in shards:
        assert n == N and size == len(names)
        assert all(results.shard_of(r.path.name, N) == k for r in reports)


def test_points_roster_and_titles_reach_the_csv_and_the_exports(graded):
    with open(graded["one"] / "results.csv", newline="", encoding="utf-8") as f:
        rows = {row["file"]: row for row in csv.DictReader(f)}
    assert rows["02-correct.ipynb"]["learner"] == "s001"
    assert (rows["02-correct.ipynb"]["points"], rows["02-correct.ipynb"]["max points"]) == ("7", "7")  # 1 + 1 + 5
    assert rows["04-correct.ipynb"]["learner"] == "s002"
    canvas = (graded["one"] / "exports" / "canvas.csv").read_text(encoding="utf-8")
    assert canvas.splitlines()[0].endswith("Masks (02),04_heads_and_kv_cache,06_online_softmax")
    assert canvas.splitlines()[1] == "Points Possible,,,,,7,2.5,3"
    assert "'=HYPERLINK(1)" in canvas and "Ada Lovelace,s001" in canvas


def test_merge_refuses_missing_repeated_and_foreign_shards(graded, tmp_path):
    root = graded["root"]
    shard = [root / f"shard-{k}.json" for k in range(1, N + 1)]
    with pytest.raises(results.ResultsError, match=f"missing 2/{N}"):
        results.merge([shard[0], shard[2]])
    with pytest.raises(results.ResultsError, match="also in"):
        results.merge([shard[0], shard[0], shard[1], shard[2]])
    (tmp_path / "x.json").write_text('{"format": "something else"}')
    with pytest.raises(results.ResultsError, match="not a results file of this grader"):
        results.merge([tmp_path / "x.json"])


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "1-3", "2"])
def test_a_shard_must_be_k_of_n(text):
    with pytest.raises(ValueError, match="expected K/N"):
        results.parse_shard(text)


def test_the_shard_of_a_name_is_stable_and_spreads_names():
    assert [results.shard_of(f"learner-{i}.ipynb", 4) for i in range(6)] == [
        results.shard_of(f"learner-{i}.ipynb", 4) for i in range(6)]
    counts = [sum(results.shard_of(f"learner-{i}.ipynb", 4) == k for i in range(400)) for k in range(1, 5)]
    assert min(counts) > 70, counts  # about 100 each
