"""Points per exercise, the roster, and the LMS exports, checked against each platform's published format.

tests/fixtures/lms/ holds real examples from each platform's documentation or its importer's own tests (README.md
there cites them). Each validator below states the platform's rules as its documentation and importer give them,
and is checked on the platform's own examples first: it accepts the good ones and rejects the bad, so that it can
fail on ours. No kernel runs here: the reports are built by hand."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import nbformat
import pytest

from attnlab_course.grading import exports, feedback, points
from attnlab_course.grading.report import write_csv
from attnlab_course.grading.runner import Report, Result
from attnlab_course.paths import solutions_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lms"


# --- the platforms' rules ------------------------------------------------------------------------------------------


def canvas_problems(text: str) -> list[str]:
    """What Canvas's Gradebook importer would refuse (app/models/gradebook_importer.rb): a header row whose first
    column is Student and second ID, optionally SIS User ID and SIS Login ID (or SIS Login ID alone), then Section as
    the last student column; an optional "Points Possible" row; then one row per student with an ID or a name, and
    numbers (or blanks, or "-") in the assignment columns."""
    rows = list(csv.reader(io.StringIO(text)))
    header, problems = rows[0], []
    if len(header) <= 3 or not re.search("Student", header[0]) or not re.search("ID", header[1]):
        return ["the header must start with Student, ID"]
    student_columns = 3
    if re.search(r"SIS\s+Login\s+ID", header[2]):
        student_columns = 4
    elif re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3]):
        student_columns = 5
    if not re.search("Section", header[student_columns - 1]):
        problems.append("the last student column must be Section")
    assignments = [h for h in header[student_columns:] if not re.search(
        "Current Score|Current Points|Final Score|Final Points|Final Grade|Comments", h)]
    if not assignments:
        problems.append("no assignment column")
    body = rows[1:]
    if body and body[0] and body[0][0] == "Points Possible":
        for value in body[0][student_columns:student_columns + len(assignments)]:
            if value and not re.fullmatch(r"\d+(\.\d+)?", value):
                problems.append(f"points possible {value!r} is not a number")
        body = body[1:]
    for row in body:
        if not (row[0] or row[1]):
            problems.append(f"a student row with neither name nor ID: {row}")
        for value in row[student_columns:student_columns + len(assignments)]:
            if value not in ("", "-") and not re.fullmatch(r"\d+(\.\d+)?", value):
                problems.append(f"a grade {value!r} is not a number")
    return problems


def moodle_problems(text: str, user_column: str) -> list[str]:
    """What Moodle's CSV grade import would refuse (grade/import/csv, docs.moodle.org "Grade import"): every row as
    long as the header ("csvweirdcolumns"), a column to map users from with a value in every row, and grades that are
    numbers or blank."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))  # Moodle trims the headers (trim_headers)
    header, problems = [h.strip() for h in rows[0]], []
    if any(len(row) != len(header) for row in rows[1:]):
        problems.append("csvweirdcolumns: a row is not as long as the header")
    if user_column not in header:
        return problems + [f"no {user_column!r} column to map users from"]
    at = header.index(user_column)
    problems += [f"row {i}: no {user_column}" for i, row in enumerate(rows[1:], 2) if at < len(row) and not row[at]]
    grade_columns = [i for i, h in enumerate(header) if h not in (
        "First name", "Surname", "Last name", "Full name", "ID number", "Institution", "Department", "Email address",
        "Last downloaded from this course") and not h.startswith("Feedback:")]
    for row in rows[1:]:
        for i in grade_columns:
            if i < len(row) and row[i] and not re.fullmatch(r"\d+(\.\d+)?", row[i]):
                problems.append(f"grade {row[i]!r} in {header[i]!r} is not a number")
    return problems


def _documented_gradescope_keys() -> tuple[set[str], set[str]]:
    """The keys the published results.json format names, top level and per test."""
    text = (FIXTURES / "gradescope_results_format.jsonc").read_text()
    top = set(re.findall(r'^  "(\w+)":', text, flags=re.M)) | set(re.findall(r'^\{ "(\w+)":', text, flags=re.M))
    test = set(re.findall(r'^            "(\w+)":', text, flags=re.M))
    return top, test


def gradescope_problems(data: dict) -> list[str]:
    top, test = _documented_gradescope_keys()
    visibility = {"hidden", "after_due_date", "after_published", "visible"}
    formats = {"text", "html", "simple_format", "md", "ansi"}
    problems = [f"undocumented key {k!r}" for k in set(data) - top]
    # a score at the top, or on every test; a test with a status and no score is an informational check
    if "score" not in data and not all("score" in t or "status" in t for t in data.get("tests", [])):
        problems.append("no score: neither at the top nor on every test")
    for t in data.get("tests", []):
        problems += [f"undocumented test key {k!r}" for k in set(t) - test]
        if "score" in t and not isinstance(t["score"], (int, float)):
            problems.append(f"test score {t['score']!r} is not a number")
        if t.get("status", "passed") not in ("passed", "failed"):
            problems.append(f"status {t['status']!r}")
        if t.get("visibility", "visible") not in visibility:
            problems.append(f"visibility {t['visibility']!r}")
        if t.get("output_format", "text") not in formats:
            problems.append(f"output_format {t['output_format']!r}")
    for key in ("output_format", "test_output_format"):
        if data.get(key, "text") not in formats:
            problems.append(f"{key} {data[key]!r}")
    return problems


def test_the_validators_accept_the_platforms_examples_and_reject_a_broken_one():
    canvas = (FIXTURES / "canvas_basic_course_with_sis_login_id.csv").read_text()
    assert canvas_problems(canvas) == []
    assert canvas_problems(canvas.replace("Section", "Group", 1)) != []
    assert canvas_problems(canvas.replace(",6,My Course,-,,", ",6,My Course,-,ten,", 1)) != []
    assert moodle_problems((FIXTURES / "moodle_grade_import_ok.csv").read_text(), "Email address") == []
    assert moodle_problems((FIXTURES / "moodle_grade_import_bad.csv").read_text(), "Email address") != []
    status_example = json.loads((FIXTURES / "gradescope_results_status.json").read_text())
    assert gradescope_problems(status_example) == []
    assert gradescope_problems({"tests": [{"name": "x", "max_score": 1}]}) == [
        "no score: neither at the top nor on every test"]
    top, test = _documented_gradescope_keys()
    assert {"score", "output", "tests", "visibility", "output_format"} <= top
    assert {"score", "max_score", "status", "name", "number", "output", "output_format"} <= test
    undocumented = {"score": 1, "tests": [{"score": 1, "verdict": "ok"}]}
    assert gradescope_problems(undocumented) == ["undocumented test key 'verdict'"]


# --- the exports -------------------------------------------------------------------------------------------------


def _reports() -> list[Report]:
    failed = ("the mask is inverted\n  expected: True on and below the diagonal\n  got:      True above it\n"
              "  hint: <look>")
    return [
        Report(Path("alice.ipynb"), "02_masks", [Result("2.1", "passed"), Result("2.2", "failed", failed),
                                                 Result("2.3", "passed")], code={"2.1": "def f(): pass"}),
        Report(Path("bob.ipynb"), "02_masks", [Result("2.1", "not attempted", "replace the stub"),
                                               Result("2.2", "timed out", "no return"), Result("2.3", "missing")]),
        Report(Path("=cmd.ipynb"), "04_heads_and_kv_cache", [Result("4.1", "passed"), Result("4.2", "passed"),
                                                            Result("4.3", "error", "ValueError: shapes")]),
        Report(Path("notes.txt"), problem="not a notebook (not JSON)"),
    ]


@pytest.fixture
def scheme(tmp_path):
    path = tmp_path / "points.toml"
    path.write_text('[points]\n"2.2" = 3\n"4.3" = 0\n\n[titles]\n"02_masks" = "Notebook 2, masks"\n')
    return points.load_scheme(solutions_dir(), path)


@pytest.fixture
def roster(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text("file,id,name,email,sis_user_id,sis_login_id,section\n"
                    "alice.ipynb,101,\"Liddell, Alice\",alice@example.org,A-1,alice,Section 1\n"
                    "bob,102,\"Builder, Bob\",bob@example.org,B-2,bob,Section 2\n")
    return points.load_roster(path)


def test_points_come_from_the_notebooks_metadata_with_the_instructors_overrides(scheme, tmp_path):
    defaults = points.load_scheme(solutions_dir())
    assert defaults.points("02_masks") == {"2.1": 1, "2.2": 1, "2.3": 1}  # no attnlab.points: 1 each
    assert scheme.points("02_masks") == {"2.1": 1, "2.2": 3, "2.3": 1}
    assert scheme.title("02_masks") == "Notebook 2, masks" and scheme.title("04_heads_and_kv_cache") == \
        "04_heads_and_kv_cache"
    # a notebook's own attnlab.points is the default an override replaces
    nb = nbformat.read(solutions_dir() / "02_masks.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("attnlab", {}).get("exercise") == "2.3"
                and c.metadata["attnlab"]["role"] == "solution")
    cell.metadata["attnlab"]["points"] = 4
    folder = tmp_path / "solutions"
    folder.mkdir()
    nbformat.write(nb, folder / "02_masks.ipynb")
    assert points.notebook_points(folder / "02_masks.ipynb") == {"2.1": 1, "2.2": 1, "2.3": 4}


@pytest.mark.parametrize("text, error", [
    ('[points]\n"2.1" = -1\n', "expected a number of points >= 0, got -1"),
    ('[points]\n"2.1" = "two"\n', "expected a number of points >= 0, got 'two'"),
    ('[grades]\n"2.1" = 1\n', "expected tables \\[points\\] and \\[titles\\]"),
    ('[points\n', "points.toml"),
])
def test_a_bad_points_file_is_refused_with_what_was_expected(tmp_path, text, error):
    path = tmp_path / "points.toml"
    path.write_text(text)
    with pytest.raises(points.ConfigError, match=error):
        points.load_scheme(solutions_dir(), path)


def test_a_roster_maps_files_to_ids_and_refuses_a_bad_one(roster, tmp_path):
    assert roster.learner("alice.ipynb").id == "101" and roster.learner("bob.ipynb").section == "Section 2"
    assert roster.learner("carol.ipynb").id == "carol"  # not listed: the file name
    for text, error in [("name,id\nx,1\n", "columns 'file' and 'id'"), ("file,id\na.ipynb,1\na.ipynb,2\n", "twice"),
                        ("file,id\na.ipynb,\n", "expected a file name and an id")]:
        (tmp_path / "r.csv").write_text(text)
        with pytest.raises(points.ConfigError, match=error):
            points.load_roster(tmp_path / "r.csv")


def test_canvas_export_follows_the_gradebook_import_format(tmp_path, scheme, roster):
    exports.write_canvas(_reports(), tmp_path / "canvas.csv", scheme, roster)
    text = (tmp_path / "canvas.csv").read_text(encoding="utf-8")
    assert canvas_problems(text) == []
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Notebook 2, masks",
                       "04_heads_and_kv_cache"]
    assert rows[1] == ["Points Possible", "", "", "", "", "5", "2"]
    assert rows[2] == ["Liddell, Alice", "101", "A-1", "alice", "Section 1", "2", ""]  # 2.1 + 2.3 passed
    assert rows[3] == ["Builder, Bob", "102", "B-2", "bob", "Section 2", "0", ""]
    assert rows[4] == ["'=cmd", "'=cmd", "", "", "", "", "2"]  # a formula-like name is shown as text
    assert rows[5] == ["notes", "notes", "", "", "", "", ""]  # not graded: blank, which Canvas leaves unchanged


def test_moodle_export_follows_the_grade_import_format(tmp_path, scheme, roster):
    exports.write_moodle(_reports(), tmp_path / "moodle.csv", scheme, roster)
    text = (tmp_path / "moodle.csv").read_text(encoding="utf-8")
    assert moodle_problems(text, "ID number") == []
    assert moodle_problems(text, "Email address") == ["row 4: no Email address", "row 5: no Email address"]  # no roster
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["ID number", "Email address", "Full name", "Notebook 2, masks", "04_heads_and_kv_cache"]
    assert rows[1] == ["101", "alice@example.org", "Liddell, Alice", "2", ""]


def test_gradescope_results_follow_the_autograder_specification(scheme):
    for report in _reports():
        data = exports.gradescope_results(report, scheme)
        assert gradescope_problems(json.loads(json.dumps(data))) == [], report.path
    alice = exports.gradescope_results(_reports()[0], scheme)
    assert alice["score"] == 2 and [t["max_score"] for t in alice["tests"]] == [1, 3, 1]
    assert [t["status"] for t in alice["tests"]] == ["passed", "failed", "passed"]
    assert "expected: True on and below the diagonal" in alice["tests"][1]["output"]  # the full message
    assert exports.gradescope_results(_reports()[3], scheme)["score"] == 0


def test_two_submissions_of_one_notebook_by_one_learner_are_refused(tmp_path, scheme, tmp_path_factory):
    (tmp_path / "r.csv").write_text("file,id\na.ipynb,7\nb.ipynb,7\n")
    roster = points.load_roster(tmp_path / "r.csv")
    twice = [Report(Path(n), "02_masks", [Result("2.1", "passed")]) for n in ("a.ipynb", "b.ipynb")]
    with pytest.raises(exports.ExportError, match="learner '7' has two submissions of 02_masks"):
        exports.write_canvas(twice, tmp_path / "c.csv", scheme, roster)


def test_the_csv_has_points_and_the_rosters_ids(tmp_path, scheme, roster):
    write_csv(_reports(), tmp_path / "r.csv", scheme, roster)
    with open(tmp_path / "r.csv", newline="", encoding="utf-8") as f:
        rows = {row["file"]: row for row in csv.DictReader(f)}
    assert (rows["alice.ipynb"]["learner"], rows["alice.ipynb"]["points"], rows["alice.ipynb"]["max points"]) == (
        "101", "2", "5")
    assert (rows["notes.txt"]["points"], rows["notes.txt"]["max points"]) == ("", "")


def test_feedback_pages_carry_every_message_code_and_points_escaped(tmp_path, scheme, roster):
    pages = feedback.write_pages(_reports(), tmp_path, scheme, roster)
    assert len({p.name for p in pages}) == 4
    html = pages[0].read_text(encoding="utf-8")
    assert "You earned <strong>2 of 5 points</strong>" in html
    assert "expected: True on and below the diagonal" in html and "hint: &lt;look&gt;" in html
    assert "def f(): pass" in html and "Liddell, Alice" in html
    assert "<script" not in html.lower() and "http" not in html.replace('http-equiv', '')
    assert "could not be graded" in pages[3].read_text(encoding="utf-8")


# --- the Gradescope autograder entry ------------------------------------------------------------------------------


def _autograder(tmp_path, files: dict[str, str | None]) -> Path:
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "source").mkdir()
    for name, text in files.items():
        path = root / "submission" / name
        if text is None:
            import make_submissions
            sub = next(s for s in make_submissions.load() if s.notebook == "02_masks" and s.name == "inverted_and_nan")
            nbformat.write(sub.build(), path)
        else:
            path.write_text(text)
    return root


def test_the_gradescope_entry_grades_the_upload_and_writes_results_json(tmp_path, monkeypatch):
    import grading_stub

    from attnlab_course.grading import gradescope, runner

    monkeypatch.setattr(runner, "run_nbval", grading_stub.fake_run_nbval)  # no kernel: the verdicts of the stub
    root = _autograder(tmp_path, {"my notebook.ipynb": None})
    (root / "source" / "points.toml").write_text('[points]\n"2.3" = 2\n')
    assert gradescope.main(["--root", str(root), "--no-sandbox"]) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert gradescope_problems(data) == []
    assert [(t["number"], t["status"], t["max_score"]) for t in data["tests"]] == [
        ("2.1", "failed", 1), ("2.2", "failed", 1), ("2.3", "passed", 2)]
    assert data["score"] == 2 and "got:" in data["tests"][0]["output"]


@pytest.mark.parametrize("files, said", [({}, "expected one notebook (.ipynb) in the upload, found 0"),
                                         ({"a.ipynb": "{}", "b.ipynb": "{}"}, "found 2")])
def test_the_gradescope_entry_gives_no_score_for_an_upload_it_cannot_grade(tmp_path, files, said):
    from attnlab_course.grading import gradescope

    root = _autograder(tmp_path, files)
    assert gradescope.main(["--root", str(root), "--no-sandbox"]) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert gradescope_problems(data) == [] and data["score"] == 0 and said in data["output"]


def test_the_gradescope_entry_refuses_to_grade_without_its_sandbox(tmp_path, monkeypatch):
    from attnlab_course.grading import gradescope, sandbox

    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: "bwrap cannot create a user namespace")
    root = _autograder(tmp_path, {"a.ipynb": "{}"})
    assert gradescope.main(["--root", str(root)]) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == 0 and "could not start its sandbox (bwrap cannot create a user namespace)" in data["output"]
