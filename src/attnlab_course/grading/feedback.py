"""``--feedback DIR``: one self-contained, accessible HTML page per submission, ready to hand back to the learner.

Each page shows every exercise's verdict (in words, not colour alone), the grader's full message (what was expected,
what was got, the hint), the learner's own code for that exercise and its points. Everything a learner wrote or named
(file names, roster names, code, the messages that quote it) goes through Jinja2's autoescaping; bidirectional and
other invisible control characters are shown as ``\\u202e``-style text, so that code reads as it runs, and names are
shown on one line (a newline as ``\\n``) and isolated in ``<bdi>``. The page loads nothing (:mod:`.pages`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from . import pages
from .points import Roster, Scheme
from .report import open_output
from .runner import Report

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")

STATUS_TEXT = {"passed": "Passed", "failed": "Not yet: the check failed", "not attempted": "Not attempted",
               "error": "Error: your code raised an exception", "timed out": "Timed out", "missing": "Missing"}

TEMPLATE = """{% extends "page" %}
{% block title %}Feedback for {{ learner | one_line }}: {{ title | one_line }}{% endblock %}
{% block style %}
body { max-width: 60rem; }
h1 { font-size: 1.6rem; margin-bottom: 0.25rem; }
h2 { font-size: 1.25rem; margin-top: 2rem; border-top: 1px solid #767676; padding-top: 1rem; }
h3 { font-size: 1rem; margin-bottom: 0.25rem; }
pre { background: #f5f5f5; color: #1a1a1a; border: 1px solid #767676; padding: 0.75rem; overflow-x: auto;
      white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.95rem; }
.status { font-weight: bold; padding: 0.1rem 0.4rem; border-radius: 0.2rem; }
.passed { color: #0b5d1e; background: #e6f4ea; }
.failed, .error, .missing { color: #8a1c1c; background: #fdecea; }
.not-attempted, .timed-out { color: #5c4000; background: #fff4d6; }
.problem { color: #8a1c1c; background: #fdecea; padding: 0.75rem; }
footer { margin-top: 2rem; font-size: 0.9rem; color: #4a4a4a; }
{% endblock %}
{% block body %}
<header>
<h1>Feedback: {{ title | one_line }}</h1>
<p>For <bdi>{{ learner | one_line }}</bdi>{% if learner_id != learner %} (id <bdi>{{ learner_id | one_line }}</bdi>){% endif %},
from the file <bdi>{{ file | one_line }}</bdi>.</p>
</header>
<main>
{% if problem %}
<section aria-labelledby="problem">
<h2 id="problem">This file could not be graded</h2>
<p class="problem">{{ problem | shown }}</p>
</section>
{% else %}
<section aria-labelledby="summary">
<h2 id="summary">Summary</h2>
<p>You earned <strong>{{ earned | points }} of {{ possible | points }} points</strong>: {{ n_passed }} of
{{ exercises | length }} exercises passed.</p>
<table>
<caption>Result and points of each exercise</caption>
<thead><tr><th scope="col">Exercise</th><th scope="col">Result</th><th scope="col">Points</th></tr></thead>
<tbody>
{% for ex in exercises %}
<tr><th scope="row"><a href="#exercise-{{ ex.anchor }}">{{ ex.id }}</a></th>
<td><span class="status {{ ex.css }}">{{ ex.status_text }}</span></td>
<td>{{ ex.earned | points }} of {{ ex.possible | points }}</td></tr>
{% endfor %}
</tbody>
</table>
</section>
{% for ex in exercises %}
<section aria-labelledby="exercise-{{ ex.anchor }}">
<h2 id="exercise-{{ ex.anchor }}">Exercise {{ ex.id }}</h2>
<p>Result: <span class="status {{ ex.css }}">{{ ex.status_text }}</span>.
Points: {{ ex.earned | points }} of {{ ex.possible | points }}.</p>
{% if ex.message %}
<h3>What the grader said</h3>
<pre>{{ ex.message | shown }}</pre>
{% endif %}
<h3>Your code</h3>
{% if ex.code is none %}
<p>Your notebook does not have this exercise's cell.</p>
{% else %}
<pre><code dir="ltr">{{ ex.code | shown }}</code></pre>
{% endif %}
</section>
{% endfor %}
{% if notes %}
<section aria-labelledby="notes">
<h2 id="notes">Notes</h2>
<ul>{% for note in notes %}<li>{{ note | shown }}</li>{% endfor %}</ul>
</section>
{% endif %}
{% endif %}
</main>
<footer>
<p>Graded by attnlab-check. Characters that would be invisible in code (such as direction marks) are shown as
escapes like <code>\\u202e</code>.</p>
</footer>
{% endblock %}
"""


def format_points(value: float) -> str:
    return f"{value:g}"


_ENV = pages.environment(feedback=TEMPLATE)
_ENV.filters["points"] = format_points
_PAGE = _ENV.get_template("feedback")


def page_name(file_name: str) -> str:
    """The feedback page's file name for a submission: its name made safe, and a hash that keeps names apart."""
    stem = file_name[:-len(".ipynb")] if file_name.endswith(".ipynb") else file_name
    safe = _SAFE_NAME.sub("_", stem).strip("._")[:80] or "submission"
    digest = hashlib.sha256(file_name.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"{safe}-{digest}.html"


def render(report: Report, scheme: Scheme, roster: Roster) -> str:
    """The feedback page of one submission."""
    learner = roster.learner(report.path.name)
    points = scheme.points(report.notebook) if report.notebook and not report.problem else {}
    exercises = []
    for r in report.results:
        possible = points.get(r.exercise, 0)
        exercises.append({
            "id": r.exercise, "anchor": r.exercise.replace(".", "-"), "status_text": STATUS_TEXT[r.status],
            "css": r.status.replace(" ", "-"), "message": r.message, "code": report.code.get(r.exercise),
            "possible": possible, "earned": possible if r.status == "passed" else 0})
    return _PAGE.render(
        learner=learner.name or learner.id, learner_id=learner.id, file=report.path.name,
        title=scheme.title(report.notebook) if report.notebook else "a notebook", problem=report.problem,
        notes=report.notes, exercises=exercises, n_passed=sum(r.status == "passed" for r in report.results),
        earned=sum(ex["earned"] for ex in exercises), possible=sum(ex["possible"] for ex in exercises))


def write_pages(reports: list[Report], folder, scheme: Scheme, roster: Roster) -> list[Path]:
    """One page per report in ``folder`` (created if needed); the pages' paths, in the reports' order."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for report in reports:
        path = folder / page_name(report.path.name)
        with open_output(path) as f:
            f.write(render(report, scheme, roster))
        written.append(path)
    return written
