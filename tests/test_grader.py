"""The grader, ``attnlab-check``.

The fixture submissions (tests/fixtures/submissions/*.toml, built from the current solution notebooks by
make_submissions.py) are graded once per module, in one batch run of the command line, two at a time; the tests then
read the per-exercise results. Everything else here runs without a kernel.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json

import make_submissions
import markupsafe
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from attnlab_course.grading import cli, record, runner, sandbox, submission, trusted
from attnlab_course.grading import notebook as gradingnb
from attnlab_course.grading import report as reporting
from attnlab_course.authoring import find_exercises, learner_notebook
from attnlab_course.paths import solutions_dir

SUBMISSIONS = {sub.file_name: sub for sub in make_submissions.load()}
NOT_NOTEBOOKS = {"notes.txt": "my answers are in my head\n", "02-corrupt.ipynb": '{"cells": [{"cell_type": "code", '}


def _exercise_ids(notebook: str) -> list[str]:
    path = solutions_dir() / f"{notebook}.ipynb"
    return [ex.id for ex in find_exercises(nbformat.read(path, as_version=4), str(path))]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """``attnlab-check --batch DIR --csv FILE`` over every fixture submission plus two files that are not notebooks."""
    folder = tmp_path_factory.mktemp("submissions")
    make_submissions.write_all(folder)
    for name, text in NOT_NOTEBOOKS.items():
        (folder / name).write_text(text)
    out = tmp_path_factory.mktemp("results")
    csv_path = out / "results.csv"
    reports = []
    grade_many = runner.grade_many
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(stdout):
        mp.setattr(runner, "grade_many", lambda *a, **k: reports.extend(grade_many(*a, **k)) or reports)
        options = ["--no-sandbox"] if sandbox.unavailable_reason() else []  # the attack tests need it; these do not
        status = cli.main(["--batch", str(folder), "--csv", str(csv_path), "--feedback", str(out / "feedback"),
                           "--results", str(out / "results.json"), *options])
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = {row["file"]: row for row in csv.DictReader(f)}
    return {"status": status, "reports": {r.path.name: r for r in reports}, "rows": rows, "out": stdout.getvalue(),
            "dir": out}


@pytest.mark.parametrize("file_name", sorted(SUBMISSIONS))
def test_each_exercise_gets_the_expected_result(batch, file_name):
    sub = SUBMISSIONS[file_name]
    report = batch["reports"][file_name]
    assert report.problem == "" and report.notebook == sub.notebook
    assert report.notes == [], "every cell of the notebook itself ran without error"
    expected = sub.expected(_exercise_ids(sub.notebook))
    got = {r.exercise: r for r in report.results}
    assert list(got) == list(expected), "the report lists the notebook's exercises, in order"
    wrong = {}
    for ex_id, (status, *words) in expected.items():
        result = got[ex_id]
        missing = [w for w in words if w.lower() not in result.message.lower()]
        if result.status != status or missing:
            wrong[ex_id] = f"expected {status} with {words}, got {result.status}: {result.message}"
    assert not wrong, f"{file_name} ({sub.spec['about']}):\n" + "\n".join(f"{k}: {v}" for k, v in wrong.items())


def test_only_a_fully_correct_submission_passes(batch):
    for name, report in batch["reports"].items():
        assert report.passed == (name in {"02-correct.ipynb", "04-correct.ipynb", "06-correct.ipynb",
                                          "02-honest_forms.ipynb", "04-honest_forms.ipynb"}), name


def test_files_that_are_not_notebooks_are_reported_and_the_rest_graded(batch):
    assert batch["status"] == 1  # some files could not be graded
    for name in NOT_NOTEBOOKS:
        assert batch["reports"][name].problem.startswith("not a notebook"), batch["reports"][name].problem
        assert f"Could not grade {name}: not a notebook" in batch["out"]
    assert f"Graded {len(SUBMISSIONS)} of {len(SUBMISSIONS) + len(NOT_NOTEBOOKS)} submissions" in batch["out"]


def test_csv_has_one_row_per_learner_and_one_column_per_exercise(batch):
    rows = batch["rows"]
    assert set(rows) == set(SUBMISSIONS) | set(NOT_NOTEBOOKS)
    for name, report in batch["reports"].items():
        row = rows[name]
        assert row["learner"] == name.rsplit(".", 1)[0]
        assert {ex: row[ex] for ex in (r.exercise for r in report.results)} == {
            r.exercise: r.status for r in report.results}
        assert int(row["passed"]) == sum(r.status == "passed" for r in report.results)
    assert rows["notes.txt"]["details"].startswith("not a notebook") and rows["notes.txt"]["2.1"] == ""
    assert "2.1 timed out" in rows["02-loop_and_deleted.ipynb"]["details"]


def test_summary_counts_each_status_per_exercise(batch):
    line = next(line.split() for line in batch["out"].splitlines() if line.strip().startswith("2.2 "))
    counts = dict(zip(runner.STATUSES, map(int, line[1:])))
    statuses = [r.status for rep in batch["reports"].values() for r in rep.results if r.exercise == "2.2"]
    assert counts == {s: statuses.count(s) for s in runner.STATUSES}
    assert sum(counts.values()) == sum(name.startswith("02-") for name in SUBMISSIONS)


def test_table_shows_every_exercise_with_its_message(batch):
    report = batch["reports"]["02-inverted_and_nan.ipynb"]
    lines = reporting.format_report(report).splitlines()
    assert lines[1].split() == ["exercise", "result", "details"]
    assert lines[2].split()[:2] == ["2.1", "failed"] and any("hint:" in line for line in lines)
    rows = [line[2:].split(maxsplit=1) for line in lines if line.startswith("  2.")]
    assert [ex for ex, _ in rows] == [r.exercise for r in report.results]
    assert all(rest.startswith(r.status) for (_, rest), r in zip(rows, report.results))
    passed = sum(r.status == "passed" for r in report.results)
    assert lines[-1] == f"{passed} of {len(report.results)} exercises passed."


def test_feedback_pages_and_the_results_file_carry_what_the_grader_decided(batch):
    """The same batch also wrote a feedback page per file and the results file that shards are merged from."""
    from attnlab_course.grading import feedback, results

    (k, n), size, stored = results.read(batch["dir"] / "results.json")
    assert (k, n) == (1, 1) and size == len(batch["reports"])
    for rep in stored:
        graded = batch["reports"][rep.path.name]
        assert (rep.notebook, rep.results, rep.notes, rep.problem, rep.code) == (
            graded.notebook, graded.results, graded.notes, graded.problem, graded.code)
    page = (batch["dir"] / "feedback" / feedback.page_name("02-inverted_and_nan.ipynb")).read_text(encoding="utf-8")
    failed = batch["reports"]["02-inverted_and_nan.ipynb"].results[0]
    assert failed.status == "failed" and "hint:" in failed.message
    assert str(markupsafe.escape(failed.message.split("\n")[-1])) in page  # the full message, to its hint
    assert "return j &gt; i" in page  # the learner's own code


# --- without a kernel -------------------------------------------------------------------------------------------


def _solution():
    """A small solution notebook in the course format: one teaching cell, two exercises, one cell after them."""
    nb = new_notebook()
    nb.cells = [new_markdown_cell("# Tiny"), new_code_cell("import numpy as np", execution_count=1)]
    for n, (name, body) in enumerate((("double", "return 2 * x"), ("square", "return x * x")), start=1):
        ex = f"9.{n}"
        source = f"def {name}(x):\n    ### BEGIN SOLUTION\n    {body}\n    ### END SOLUTION"
        nb.cells.append(new_code_cell(source, execution_count=2 * n,
                                      metadata={"attnlab": {"exercise": ex, "role": "solution"}}))
        nb.cells.append(new_code_cell(f'check("{ex}", {name})', execution_count=2 * n + 1,
                                      metadata={"attnlab": {"exercise": ex, "role": "check"}},
                                      outputs=[new_output("stream", name="stdout", text=f"Exercise {ex}: passed\n")]))
    nb.cells.append(new_code_cell("print('after the exercises')", execution_count=9))
    return nb


def test_grading_notebook_takes_only_the_learners_exercise_source():
    solution = _solution()
    learner = learner_notebook(solution, "09_tiny")
    exercise, check = learner.cells[2], learner.cells[3]
    exercise.source = "# NBVAL_SKIP\ndef double(x):\n    #   NBVAL_RAISES_EXCEPTION\n    return 2 * x"
    exercise.metadata["tags"] = ["raises-exception"]
    exercise.outputs = [new_output("stream", name="stdout", text="saved\n")]
    check.source, check.metadata["tags"] = "print('Exercise 9.1: passed')", ["nbval-skip"]
    exercises = find_exercises(solution)
    cells = submission.learner_exercise_cells(learner, solution, exercises)
    nb = gradingnb.grading_notebook(solution, exercises, cells)
    assert [c.source.split("\n")[0] for c in nb.cells] == [
        "import numpy as np", "", "from attnlab.exercises import check", "def square(x):",
        "from attnlab.exercises import check"]  # markdown and the cell after the last check are left out
    ex_cell, check_cell = nb.cells[1], nb.cells[2]
    assert ex_cell.source == "\ndef double(x):\n\n    return 2 * x"  # markers blanked, line numbers kept
    assert ex_cell.metadata == {"attnlab": {"exercise": "9.1", "role": "solution"}, "tags": ["nbval-ignore-output"]}
    assert ex_cell.outputs == []
    assert check_cell.source == 'from attnlab.exercises import check\ncheck("9.1", double)'
    assert check_cell.metadata == {"attnlab": {"exercise": "9.1", "role": "check"}}
    assert check_cell.outputs == [new_output("stream", name="stdout", text="Exercise 9.1: passed\n")]
    assert "nbval-ignore-output" in nb.cells[0].metadata["tags"]


def test_a_deleted_exercise_cell_is_left_out_with_its_check():
    solution = _solution()
    learner = learner_notebook(solution, "09_tiny")
    del learner.cells[4]  # exercise 9.2
    exercises = find_exercises(solution)
    cells = submission.learner_exercise_cells(learner, solution, exercises)
    assert cells["9.2"] is None
    nb = gradingnb.grading_notebook(solution, exercises, cells)
    assert [c.metadata.get("attnlab", {}).get("exercise") for c in nb.cells] == [None, "9.1", "9.1"]


def test_exercise_cells_are_found_by_cell_id_when_their_metadata_is_lost():
    solution = _solution()
    learner = learner_notebook(solution, "09_tiny")
    for cell in learner.cells:
        cell.metadata = {}
    learner.cells[2].source = "def double(x):\n    return x + x"
    cells = submission.learner_exercise_cells(learner, solution, find_exercises(solution))
    assert cells["9.1"].source == "def double(x):\n    return x + x" and cells["9.2"] is not None


def test_the_solution_is_found_from_metadata_file_name_or_exercise_ids(tmp_path):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for name in ("02_masks.ipynb", "09_tiny.ipynb"):
        nbformat.write(_solution(), solutions / name)
    learner = learner_notebook(_solution(), "09_tiny")
    assert submission.find_solution(learner, tmp_path / "anything.ipynb", solutions).name == "09_tiny.ipynb"
    del learner.metadata["attnlab"]
    assert submission.find_solution(learner, tmp_path / "02_masks.ipynb", solutions).name == "02_masks.ipynb"
    assert submission.find_solution(learner, tmp_path / "02_masks_alice.ipynb", solutions).name == "02_masks.ipynb"
    assert submission.find_solution(learner, tmp_path / "alice.ipynb", solutions).name == "09_tiny.ipynb"  # ids 9.k
    learner.cells = []
    with pytest.raises(submission.SubmissionError, match="no solution notebook"):
        submission.find_solution(learner, tmp_path / "alice.ipynb", solutions)


@pytest.mark.parametrize("content", [b"", b"hello", b"\x89PNG\r\n\x1a\n\x00\x00", b'{"cells": [', b'{"a": 1}', b"[]"])
def test_a_file_that_is_not_a_notebook_is_a_submission_error(tmp_path, content):
    path = tmp_path / "alice.ipynb"
    path.write_bytes(content)
    with pytest.raises(submission.SubmissionError, match="not a notebook"):
        submission.read_submission(path)
    report = runner.grade(path, tmp_path)
    assert report.problem.startswith("not a notebook") and not report.passed


def _cell(ok=True, message="", outputs=(), timed_out=False, kernel_alive=True):
    """What the nbval hooks tell the trusted side of one cell that nbval ran."""
    return {"ok": ok, "timed_out": timed_out, "kernel_alive": kernel_alive, "message": message,
            "outputs": list(outputs)}


def _error(ename, evalue, traceback=()):
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": list(traceback)}


def _stdout(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_the_trusted_side_settles_each_exercise_from_the_judge_and_its_cells():
    """The one verdict per exercise, as the nbval hooks settle it: a failed exercise cell decides; else the judge's
    verdict, which a pass keeps only when nbval's comparison of the check cell agrees."""
    passed, failed = trusted.Verdict("9.1", "passed"), trusted.Verdict("9.1", "failed", "wrong\n  expected: 1")
    check_ok = _cell()
    assert trusted.check_cell_verdict("9.1", failed, check_ok, 5) == failed
    assert trusted.check_cell_verdict("9.1", passed, check_ok, 5) == passed
    noisy = _cell(False, "Cell outputs differ", [_stdout("debug\nExercise 9.1: passed [T]\n")])
    verdict = trusted.check_cell_verdict("9.1", passed, noisy, 5)
    assert verdict.status == "failed" and "printed" in verdict.message and "debug" in verdict.message
    forged = _cell(False, "Cell outputs differ", [_stdout("Exercise 9.1: passed\n")])
    assert trusted.check_cell_verdict("9.1", None, forged, 5) == trusted.Verdict("9.1", "failed", trusted.NO_VERDICT)
    renamed = _cell(False, "Cell execution caused an exception", [_error("NameError", "name 'f'")])
    assert "did you rename the function" in trusted.check_cell_verdict("9.1", None, renamed, 5).message
    stuck = _cell(False, "", [_error("KeyboardInterrupt", "")], timed_out=True)
    assert trusted.exercise_cell_verdict("9.5", stuck, 5).message.endswith("within 5 s: an infinite loop, or far too "
                                                                           "much work?")
    unstoppable = _cell(False, "", [], timed_out=True, kernel_alive=False)
    assert "could not be interrupted" in trusted.exercise_cell_verdict("9.5", unstoppable, 5).message
    interrupted = _cell(False, "", [_error("KeyboardInterrupt", "")])  # raised by the learner: no deadline fired
    assert trusted.exercise_cell_verdict("9.5", interrupted, 5).status == "error"
    broken = _cell(False, "Cell execution caused an exception", [_error(
        "ValueError", "bad shape", ["Cell In[1], line 2", "Cell In[1], line 7, in sq()"])])
    assert trusted.exercise_cell_verdict("9.2", broken, 5).message == "ValueError: bad shape (line 7 of your " \
                                                                     "exercise cell, in sq)"
    assert trusted.exercise_cell_verdict("9.2", _cell(), 5) is None


def _lines(*items):
    return [json.dumps(item) for item in items]


def _verdict(ex_id, status, message=""):
    return {"kind": "verdict", "exercise": ex_id, "status": status, "message": message}


def test_the_runner_takes_the_verdicts_of_the_record_and_nothing_from_nbvals_messages():
    lines = _lines({"kind": "cell", "exercise": None}, {"kind": "cell", "exercise": "9.1"},
                   _verdict("9.1", "failed", "wrong"), _verdict("9.1", "passed"),  # the first verdict counts
                   {"kind": "cell", "exercise": "9.2"}, _verdict("9.2", "passed!"),  # not a status: no verdict
                   {"kind": "note", "text": "a cell of the notebook that is not an exercise failed"},
                   {"kind": "cell", "exercise": "9.3"}, _verdict("9.3", "error", "the kernel died"),
                   {"kind": "stopped", "exercise": "9.3"}, {"kind": "stopped", "exercise": "9.2"}) + ['{"kind": "ve']
    found = record.read(lines)
    assert set(found.verdicts) == {"9.1", "9.3"} and found.cells == 4 and found.last_cell == "9.3"
    assert found.stopped and found.stopped_in == "9.3", "the first stop counts"
    results, notes, culprit = runner.settle_run(runner.Run(found, exit_status=1), ["9.1", "9.2", "9.3"])
    assert results == {"9.1": runner.Result("9.1", "failed", "wrong"), "9.3": runner.Result("9.3", "error",
                                                                                             "the kernel died")}
    assert culprit == "9.3" and "9.2" not in results, "9.2 is left for the next run, without 9.3"
    assert notes == ["a cell of the notebook that is not an exercise failed"]


def test_the_runner_decides_only_what_stopped_its_own_process():
    started = record.read(_lines({"kind": "cell", "exercise": "9.1"}, _verdict("9.1", "passed"),
                                 {"kind": "cell", "exercise": "9.2"}))
    results, _, culprit = runner.settle_run(runner.Run(started, exit_status=-9), ["9.1", "9.2", "9.3"])
    assert results["9.1"].status == "passed" and culprit == "9.2" and "9.3" not in results
    assert results["9.2"].status == "error" and "grader's process stopped while running your code" in \
        results["9.2"].message
    results, _, culprit = runner.settle_run(runner.Run(started, deadline_hit=True, exit_status=-9),
                                            ["9.1", "9.2", "9.3"])
    assert culprit is None and [results[e].status for e in ("9.1", "9.2", "9.3")] == ["passed", "timed out",
                                                                                      "timed out"]
    in_own_cell = record.read(_lines({"kind": "cell", "exercise": None}))
    results, notes, culprit = runner.settle_run(runner.Run(in_own_cell, exit_status=-9), ["9.1"])
    assert culprit is None and results["9.1"].status == "error" and "not an exercise" in notes[0]


def test_a_kernel_that_does_not_start_is_a_grading_problem_not_the_learners():
    found = record.read(_lines({"kind": "broken", "text": "RuntimeError: Kernel died before replying"}))
    with pytest.raises(RuntimeError, match="nbval could not run the notebook"):
        runner.settle_run(runner.Run(found), ["9.1"])


def test_after_the_kernel_dies_the_notebook_is_graded_again_without_that_exercise(tmp_path, monkeypatch):
    """An exercise that cannot be interrupted stops the kernel: it is 'timed out' and the others are still graded."""
    solution_dir = tmp_path / "solutions"
    solution_dir.mkdir()
    nbformat.write(_solution(), solution_dir / "09_tiny.ipynb")
    submission_path = tmp_path / "bob.ipynb"
    nbformat.write(learner_notebook(_solution(), "09_tiny"), submission_path)
    runs = []

    def fake_run_nbval(nb, timeout, **kwargs):
        nb = nb() if callable(nb) else nb  # the runner hands over a function that makes the notebook
        exercises = [c.metadata["attnlab"]["exercise"] for c in nb.cells if "attnlab" in c.metadata]
        runs.append(sorted(set(exercises)))
        if "9.1" in exercises:
            return runner.Run(record.read(_lines(
                {"kind": "cell", "exercise": None}, {"kind": "cell", "exercise": "9.1"},
                _verdict("9.1", "timed out", "your function did not return within 5 s and could not be interrupted"),
                {"kind": "stopped", "exercise": "9.1"})))
        return runner.Run(record.read(_lines({"kind": "cell", "exercise": "9.2"}, _verdict("9.2", "passed"))))

    monkeypatch.setattr(runner, "run_nbval", fake_run_nbval)
    report = runner.grade(submission_path, solution_dir)
    assert runs == [["9.1", "9.2"], ["9.2"]]
    assert [(r.exercise, r.status) for r in report.results] == [("9.1", "timed out"), ("9.2", "passed")]
    assert "could not be interrupted" in report.results[0].message


def test_single_notebook_exit_status_is_0_only_when_every_exercise_passed(tmp_path, monkeypatch, capsys):
    path = tmp_path / "alice.ipynb"
    path.write_text("{}")
    outcomes = {
        0: [runner.Result("9.1", "passed"), runner.Result("9.2", "passed")],
        1: [runner.Result("9.1", "passed"), runner.Result("9.2", "not attempted")],
    }
    for expected_status, results in outcomes.items():
        monkeypatch.setattr(runner, "grade", lambda *a, r=results, **k: runner.Report(path, "09_tiny", r))
        assert cli.main([str(path), "--solutions", str(tmp_path)]) == expected_status
    monkeypatch.setattr(runner, "grade", lambda *a, **k: runner.Report(path, problem="not a notebook (bad JSON)"))
    assert cli.main([str(path), "--solutions", str(tmp_path)]) == 2
    assert "cannot grade: not a notebook" in capsys.readouterr().out

