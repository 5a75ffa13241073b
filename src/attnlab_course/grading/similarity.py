"""``--similarity FILE``: which learners' exercise code is suspiciously alike: evidence to look at, never a verdict.

The comparison is copydetect's (the copydetect package on PyPI): each exercise's code is tokenised with
Pygments, names become placeholders (so renaming variables changes nothing), and winnowed k-gram fingerprints are
compared. Only what the learner wrote counts: the exercise's scaffold (the learner notebook's stub: the signature,
the docstring, ``raise NotImplementedError``) is given to copydetect as boilerplate and its fingerprints are
discarded, and an exercise still at its stub is left out. For each pair of learners and each exercise both wrote,
the score is the larger of the two shares of code found in the other (copydetect's similarity, 0 to 1); a pair's
score is the mean over the exercises both wrote. Pairs at or above the threshold are flagged for a person to read:
short exercises have few ways to be written, and two honest learners can write the same line.
"""

from __future__ import annotations

import io
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..authoring import find_exercises, stub_solution
from . import pages
from .points import Roster
from .report import open_output
from .runner import Report

NOISE = 20  # characters of tokenised code in a fingerprint (copydetect's k): shorter matches are noise
THRESHOLD = 0.6  # a share of code at or above this is flagged


@dataclass(frozen=True)
class Match:
    """Two learners' code for one exercise, as copydetect compares it."""

    notebook: str
    exercise: str
    a: str  # learner ids
    b: str
    share_a: float  # the share of a's code found in b's
    share_b: float

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)


@dataclass(frozen=True)
class Pair:
    """Two learners over every exercise both wrote."""

    notebook: str
    a: str
    b: str
    matches: tuple[Match, ...]

    @property
    def score(self) -> float:
        return sum(m.score for m in self.matches) / len(self.matches)


def _fingerprint(code: str, boilerplate=()):
    from copydetect import CodeFingerprint

    return CodeFingerprint("exercise.py", NOISE, 1, boilerplate=list(boilerplate), fp=io.StringIO(code),
                           language="python")


def scaffolds(solutions_dir, notebook: str) -> dict[str, str]:
    """Each exercise's scaffold as the learner received it (the stub of the solution cell)."""
    path = Path(solutions_dir) / f"{notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    return {ex.id: stub_solution(nb.cells[ex.exercise_cell].source, str(path)) for ex in find_exercises(nb, str(path))}


def compare(reports: list[Report], solutions_dir, roster: Roster | None = None) -> list[Pair]:
    """Every pair of learners who wrote code for a common exercise of one notebook, most alike first."""
    from copydetect import compare_files

    roster = roster or Roster()
    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # copydetect warns on short code
    by_notebook: dict[str, list[Report]] = {}
    for rep in reports:
        if rep.notebook and not rep.problem:
            by_notebook.setdefault(rep.notebook, []).append(rep)
    pairs = []
    for notebook, reps in sorted(by_notebook.items()):
        stubs = scaffolds(solutions_dir, notebook)
        prints = {}  # (learner, exercise) -> fingerprint
        for rep in reps:
            learner = roster.learner(rep.path.name).id
            for ex, code in rep.code.items():
                stub = stubs.get(ex)
                if stub is None or code.strip() == stub.strip():
                    continue  # not an exercise of this notebook, or not attempted
                boilerplate = _fingerprint(stub).hashes
                prints[(learner, ex)] = _fingerprint(code, boilerplate)
        learners = sorted({learner for learner, _ in prints})
        for a, b in itertools.combinations(learners, 2):
            matches = []
            for ex in stubs:
                if (a, ex) in prints and (b, ex) in prints:
                    _, (share_a, share_b), _ = compare_files(prints[(a, ex)], prints[(b, ex)])
                    matches.append(Match(notebook, ex, a, b, float(share_a), float(share_b)))
            if matches:
                pairs.append(Pair(notebook, a, b, tuple(matches)))
    return sorted(pairs, key=lambda p: (-round(p.score, 6), p.notebook, p.a, p.b))


TEMPLATE = """{% extends "page" %}
{% block title %}Similarity report: evidence to look at, not a verdict{% endblock %}
{% block style %}
.flag { font-weight: bold; color: #8a1c1c; }
.note { background: #fff4d6; color: #1a1a1a; padding: 0.75rem; border: 1px solid #767676; }
{% endblock %}
{% block body %}
<header><h1>Similarity report</h1></header>
<main>
<p class="note"><strong>Evidence to look at, not a verdict.</strong> A high score says two learners' code for an
exercise shares long token sequences once names are ignored (copydetect, {{ noise }}-character fingerprints; the
scaffold each learner received is left out). Short exercises have few ways to be written and honest learners can
write alike: read the code, and talk to the learners, before concluding anything. Pairs at or above
{{ threshold }} are marked "look at this".</p>
<h2>Pairs of learners</h2>
<table>
<caption>Each pair's mean score over the exercises both wrote, most alike first</caption>
<thead><tr><th scope="col">Notebook</th><th scope="col">Learner</th><th scope="col">Learner</th>
<th scope="col">Score</th><th scope="col">Exercises compared</th><th scope="col">Look at this?</th></tr></thead>
<tbody>
{% for p in pairs %}<tr><td>{{ p.notebook | shown }}</td><td><bdi>{{ p.a | shown }}</bdi></td><td><bdi>{{ p.b | shown }}</bdi></td>
<td>{{ "%.2f" | format(p.score) }}</td><td>{{ p.matches | length }}</td>
<td>{% if p.score >= threshold %}<span class="flag">look at this</span>{% else %}no{% endif %}</td></tr>
{% endfor %}</tbody>
</table>
<h2>Per exercise</h2>
<table>
<caption>Share of each learner's code found in the other's, per exercise</caption>
<thead><tr><th scope="col">Exercise</th><th scope="col">Learner A</th><th scope="col">Learner B</th>
<th scope="col">Share of A in B</th><th scope="col">Share of B in A</th><th scope="col">Look at this?</th></tr></thead>
<tbody>
{% for p in pairs %}{% for m in p.matches %}<tr><td>{{ m.exercise }}</td><td><bdi>{{ m.a | shown }}</bdi></td>
<td><bdi>{{ m.b | shown }}</bdi></td><td>{{ "%.2f" | format(m.share_a) }}</td><td>{{ "%.2f" | format(m.share_b) }}</td>
<td>{% if m.score >= threshold %}<span class="flag">look at this</span>{% else %}no{% endif %}</td></tr>
{% endfor %}{% endfor %}</tbody>
</table>
</main>
{% endblock %}
"""

_PAGE = pages.environment(similarity=TEMPLATE).get_template("similarity")


def write_report(pairs: list[Pair], path) -> None:
    """The similarity report of ``pairs`` as one self-contained HTML page."""
    with open_output(path) as f:
        f.write(_PAGE.render(pairs=pairs, threshold=THRESHOLD, noise=NOISE))
