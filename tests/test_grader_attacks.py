"""The grader under attack: hostile submissions graded in one sandboxed batch, as an instructor would grade a class.

The submissions (tests/fixtures/attacks/*.toml, built from the current learner notebooks, plus a few malformed files,
links, a FIFO, a device and hostile file names made here) try to forge a pass, reach outside their sandbox, fill the
host's disk, memory or inodes, harm another submission or the batch, or break the report. Every test asserts the
verdict the attack gets and that nothing escaped: files of the course unchanged, no process left behind, the honest
submissions graded in the same batch graded right, the CSV and the terminal output free of formulas and control
characters, every name on one line. The grading's aggregate memory is set to 320 MiB in this batch (4 GiB by default)
and its tmpfs to 128 and 16 MiB (256 and 32) so that filling them stays quick.

A second, small batch (``test_grader_crowd.py``, a module of its own so that another pytest-xdist worker can run it
meanwhile) grades an honest and a hostile submission with ``--jobs 20`` and no cgroup.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import re
import stat
from dataclasses import replace
from pathlib import Path

import make_submissions
from helpers import processes_marked
import nbformat
import pytest

from attnlab_course.authoring import find_exercises
from attnlab_course.paths import solutions_dir
from attnlab_course.grading import cli, isolation, runner, sandbox, submission

if sandbox.unavailable_reason():
    pytest.skip(f"grader attack tests skipped: {sandbox.unavailable_reason()} ({sandbox.INSTALL_HINT})",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = {sub.file_name: sub for sub in make_submissions.load(make_submissions.ATTACKS)}
HONEST = ["02-correct.ipynb", "02-untouched.ipynb"]  # graded in the same batch: they must not be harmed
FORMULA_NAME = '=HYPERLINK("http:evil","click").ipynb'
ESCAPE_NAME = "02-\x1b[2K\rAll exercises passed\x1b[0m.ipynb"
NEWLINE_NAME = "02-x\nAll exercises passed: 30 of 30 learners.\nResults written to nowhere.ipynb"
NOT_REGULAR = {"02-link_to_solution.ipynb", "02-link_to_secret.ipynb", "02-link_to_kmsg.ipynb", "02-fifo.ipynb",
               "02-device.ipynb"}
SECRET = "SECRET-CONTENT-8f3a"
DAEMON_MARK = b"attnlab-attack-daemon"
# smaller than by default so that filling them stays quick: a grading's memory (its tmpfs pages included) and tmpfs
LIMITS = replace(runner.LIMITS, memory_total=320 * 2**20, tmp_size=128 * 2**20, runtime_size=16 * 2**20)
NO_CGROUP = isolation.cgroup_unavailable_reason()
CGROUP_ONLY = {"02-memory_two_processes.ipynb": "two processes under the per-process limit are stopped by a cgroup"}


PROTECTED = (ROOT / "src" / "attnlab", ROOT / "src" / "attnlab_course", solutions_dir())  # no submission changes them


def _tree_digest(*folders: Path) -> str:
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


def _learner_02():
    path = solutions_dir() / "02_masks.ipynb"
    solution = nbformat.read(path, as_version=4)
    from attnlab_course.authoring import learner_notebook

    return learner_notebook(solution, "02_masks"), find_exercises(solution, str(path))


def _malformed(folder: Path) -> None:
    """Files that are notebooks in name only, and a learner notebook with hostile names and a huge cell."""
    nb, exercises = _learner_02()
    raw = nbformat.writes(nb)
    broken = json.loads(raw)
    broken["cells"][exercises[0].exercise_cell]["source"] = {"not": "text"}  # a source that is not text
    (folder / "02-source_not_text.ipynb").write_text(json.dumps(broken))
    (folder / "02-cells_not_a_list.ipynb").write_text('{"cells": {"a": 1}, "metadata": {}, "nbformat": 4, '
                                                      '"nbformat_minor": 5}')
    (folder / "02-deep.ipynb").write_text('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (folder / "02-binary.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    huge = nbformat.reads(raw, as_version=4)
    huge.cells[exercises[0].exercise_cell].source += "\n" + "# padding\n" * 1_000_000  # 10 MB
    nbformat.write(huge, folder / "02-huge_cell.ipynb")
    named = nbformat.reads(raw, as_version=4)
    cell = named.cells[exercises[0].exercise_cell]
    cell.source = cell.source.replace("raise NotImplementedError",
                                      'raise ValueError("\\x1b[2K\\rExercise 2.1: passed\\x1b]0;owned\\x07\\b\\b")')
    nbformat.write(named, folder / ESCAPE_NAME)
    nbformat.write(nbformat.reads(raw, as_version=4), folder / FORMULA_NAME)
    nbformat.write(nbformat.reads(raw, as_version=4), folder / NEWLINE_NAME)
    odd = nbformat.reads(raw, as_version=4)
    odd.metadata["attnlab"]["notebook"] = "02_masks" + "x" * 300
    nbformat.write(odd, folder / "02-long_notebook_id.ipynb")


def _not_regular(folder: Path, secret_folder: Path) -> None:
    """Links to a solution, to a private file and to /proc/kmsg (reading it waits forever), a FIFO, a device."""
    (folder / "02-link_to_solution.ipynb").symlink_to(solutions_dir() / "02_masks.ipynb")
    (secret_folder / "secret.txt").write_text(SECRET)
    (folder / "02-link_to_secret.ipynb").symlink_to(secret_folder / "secret.txt")
    (folder / "02-link_to_kmsg.ipynb").symlink_to("/proc/kmsg")
    os.mkfifo(folder / "02-fifo.ipynb")
    if os.geteuid() == 0:
        os.mknod(folder / "02-device.ipynb", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # like /dev/null
    else:
        (folder / "02-device.ipynb").symlink_to("/dev/null")


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    make_submissions.write_all(folder, spec_dir=make_submissions.ATTACKS)
    honest = make_submissions.write_all(tmp_path_factory.mktemp("honest"))
    for name in HONEST:
        nbformat.write(honest[name].build(), folder / name)
    _malformed(folder)
    _not_regular(folder, tmp_path_factory.mktemp("private"))
    before = _tree_digest(*PROTECTED)
    csv_path = tmp_path_factory.mktemp("results") / "results.csv"
    reports: list = []
    grade_many = runner.grade_many
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(runner, "grade_many", lambda *a, **k: reports.extend(grade_many(*a, **k)) or reports)
        mp.setattr(runner, "LIMITS", LIMITS)
        status = cli.main(["--batch", str(folder), "--csv", str(csv_path), "--jobs", "2"])
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    survivors = _survivors()
    return {"status": status, "reports": {r.path.name: r for r in reports}, "rows": rows, "out": out.getvalue(),
            "before": before, "after": _tree_digest(*PROTECTED),
            "survivors": survivors}


def _survivors() -> list[str]:
    return processes_marked(DAEMON_MARK)


def _exercise_ids() -> list[str]:
    return [ex.id for ex in _learner_02()[1]]


@pytest.mark.parametrize("file_name", sorted(ATTACKS))
def test_each_attack_gets_the_expected_verdict(attacked, file_name):
    if file_name in CGROUP_ONLY and NO_CGROUP:
        pytest.skip(f"{CGROUP_ONLY[file_name]}, and this host gives none: {NO_CGROUP}")
    sub = ATTACKS[file_name]
    report = attacked["reports"][file_name]
    assert report.problem == "", report.problem
    got = {r.exercise: r for r in report.results}
    for ex_id, (status, *words) in sub.expected(_exercise_ids()).items():
        assert got[ex_id].status in status.split("|"), f"{sub.spec['about']}: {ex_id} {got[ex_id]}"
        for word in words:
            assert word in got[ex_id].message, f"{ex_id}: {word!r} not in {got[ex_id].message!r}"
    assert not any(r.status == "passed" for r in report.results), "no attack passes an exercise it did not solve"


def test_honest_work_in_the_same_batch_is_graded_right(attacked):
    assert [r.status for r in attacked["reports"]["02-correct.ipynb"].results] == ["passed"] * 3
    assert [r.status for r in attacked["reports"]["02-untouched.ipynb"].results] == ["not attempted"] * 3


def test_nothing_outside_the_sandbox_changed_and_nothing_outlived_it(attacked):
    assert attacked["after"] == attacked["before"], "the attnlab package or the solutions were modified"
    assert attacked["survivors"] == [], "a process started by a submission outlived its grading"


@pytest.mark.parametrize("name", ["02-source_not_text.ipynb", "02-cells_not_a_list.ipynb", "02-deep.ipynb",
                                  "02-binary.ipynb"])
def test_malformed_notebooks_cannot_be_graded_and_say_why(attacked, name):
    report = attacked["reports"][name]
    assert report.problem.startswith(("not a notebook", "not a valid notebook")), report.problem
    assert "Traceback" not in attacked["out"]
    assert f"Could not grade {name}: " in attacked["out"]


def test_a_huge_cell_gets_the_same_verdict_every_time(attacked):
    result = attacked["reports"]["02-huge_cell.ipynb"].results[0]
    assert result.status == "error" and "characters long" in result.message, result


def test_csv_cells_are_never_formulas(attacked):
    rows = attacked["rows"]
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)
    formula_rows = [row for row in rows if "HYPERLINK" in row[1]]
    assert formula_rows and formula_rows[0][0].startswith("'=") and formula_rows[0][1].startswith("'=")


def test_no_control_characters_reach_the_terminal_or_the_csv(attacked):
    text = attacked["out"] + "".join(cell for row in attacked["rows"] for cell in row)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    report = attacked["reports"][ESCAPE_NAME]
    assert report.results[0].status == "error"
    assert "All exercises passed: 1 of" in attacked["out"], "only 02-correct passed everything"


def test_links_fifos_and_devices_are_not_graded_nor_read(attacked):
    for name in NOT_REGULAR:
        assert attacked["reports"][name].problem == submission.NOT_REGULAR, name
    everything = attacked["out"] + "".join(cell for row in attacked["rows"] for cell in row)
    assert SECRET not in everything, "nothing of a linked file reaches the results"


def test_names_and_notebook_ids_stay_on_one_line(attacked):
    lines = attacked["out"].splitlines()
    assert not any(line.startswith(("All exercises passed: 30", "Results written to nowhere")) for line in lines)
    assert "02-x\\nAll exercises passed: 30 of 30 learners.\\nResults written to nowhere.ipynb" in [
        row[1] for row in attacked["rows"]]
    assert [r.status for r in attacked["reports"][NEWLINE_NAME].results] == ["not attempted"] * 3
    assert attacked["reports"]["02-long_notebook_id.ipynb"].problem.startswith("the notebook id in the file's")
    assert all("\n" not in cell for row in attacked["rows"] for cell in row)


def _numbers(report, prefix: str) -> list[int]:
    message = report.results[0].message
    assert prefix in message, message
    return [int(n) for n in message.split(prefix)[1].split("(")[0].split()]


@pytest.mark.skipif(os.geteuid() != 0, reason="the runtime folder is a host folder without root (bubblewrap's tmpfs "
                                              "has a size limit only)")
def test_disk_and_inode_fills_stop_at_the_sandboxes_tmpfs_limits(attacked):
    limits = LIMITS
    runtime, home, tmp, shm = _numbers(attacked["reports"]["02-disk_fill.ipynb"], "MiB written: ")
    assert runtime <= limits.runtime_size // 2**20, "the runtime folder is a small tmpfs, not the host disk"
    assert home + tmp + shm <= limits.tmp_size // 2**20, "home, /tmp and /dev/shm share one tmpfs"
    runtime, home, tmp, shm = _numbers(attacked["reports"]["02-inode_fill.ipynb"], "files made: ")
    assert runtime <= limits.inodes and home + tmp + shm <= limits.inodes, "each tmpfs has nr_inodes"


def test_batch_finishes_with_one_row_per_file(attacked):
    files = {row[1] for row in attacked["rows"][1:]}
    assert len(files) == len(attacked["reports"])
    assert attacked["status"] == 1, "some files could not be graded, so the exit status is 1"
