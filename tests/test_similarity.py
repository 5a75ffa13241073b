"""The similarity report (copydetect over the learners' exercise code): planted near-copies are flagged, honest
independent solutions are not, the scaffold never counts, and the report says it is evidence, not a verdict.

Everything runs without a kernel: the reports are built here, with the learners' code as the grader keeps it."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import nbformat
import pytest

from attnlab_course.grading import similarity
from attnlab_course.grading.runner import Report, Result
from attnlab_course.paths import solutions_dir

NOTEBOOK = "02_masks"


def _cell(exercise: str, body: str) -> str:
    """The learner's exercise cell: the scaffold they received with ``body`` in place of the stub."""
    stub = similarity.scaffolds(solutions_dir(), NOTEBOOK)[exercise]
    lines = stub.split("\n")
    at = next(i for i, line in enumerate(lines) if line.strip() == "# your code here")
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    body = textwrap.indent(textwrap.dedent(body).strip("\n"), indent)
    return "\n".join(lines[:at] + [body] + lines[at + 2:])


# Independent honest solutions of 2.2 and 2.3, written in different styles (as different learners would).
HONEST = {
    "ana": {
        "2.2": """
            d = q.shape[-1]
            scores = q @ k.T / np.sqrt(d)
            scores = np.where(mask, scores, -np.inf)
            row_max = np.max(scores, axis=1, keepdims=True)
            row_max[~np.isfinite(row_max)] = 0.0
            e = np.exp(scores - row_max)
            z = e.sum(axis=1, keepdims=True)
            z[z == 0] = 1.0
            weights = e / z
            return weights @ v, weights
        """,
        "2.3": """
            n = len(x)
            reference = attend(x)
            result = np.zeros((n, n), dtype=bool)
            for col in range(n):
                y = np.array(x, copy=True)
                y[col] = y[col] + 1.0
                result[:, col] = (attend(y) != reference).any(axis=1)
            return result
        """,
    },
    "ben": {
        "2.2": """
            T, S = mask.shape
            out = np.zeros((T, v.shape[1]))
            weights = np.zeros((T, S))
            for t in range(T):
                allowed = np.flatnonzero(mask[t])
                if allowed.size == 0:
                    continue
                s = k[allowed] @ q[t] / np.sqrt(len(q[t]))
                p = np.exp(s - s.max())
                p /= p.sum()
                weights[t, allowed] = p
                out[t] = p @ v[allowed]
            return out, weights
        """,
        "2.3": """
            outputs = attend(x)
            size = x.shape[0]
            table = []
            for token in range(size):
                bumped = x.copy()
                bumped[token, :] += 1.0
                diff = attend(bumped) != outputs
                table.append([bool(row.any()) for row in diff])
            return np.array(table, dtype=bool).T
        """,
    },
    "chloe": {
        "2.2": """
            logits = np.einsum("td,sd->ts", q, k) * (1.0 / np.sqrt(k.shape[1]))
            logits = np.where(mask, logits, -np.inf)
            top = np.where(mask.any(axis=-1, keepdims=True), logits.max(axis=-1, keepdims=True), 0.0)
            unnormalised = np.where(mask, np.exp(logits - top), 0.0)
            norm = unnormalised.sum(-1, keepdims=True)
            probs = np.divide(unnormalised, norm, out=np.zeros_like(unnormalised), where=norm > 0)
            return np.einsum("ts,sv->tv", probs, v), probs
        """,
        "2.3": """
            T = x.shape[0]
            before = attend(x)
            changed = np.empty((T, T), dtype=bool)
            for p in range(T):
                x2 = x + np.eye(T)[p][:, None]
                changed[:, p] = np.logical_or.reduce(attend(x2) != before, axis=-1)
            return changed
        """,
    },
}

# Near-copies of ana's code: renamed variables, independent lines reordered, comments and blank lines added.
COPIES = {
    "dan": {
        "2.2": """
            width = q.shape[-1]
            sc = q @ k.T / np.sqrt(width)  # scaled scores
            sc = np.where(mask, sc, -np.inf)

            biggest = np.max(sc, axis=1, keepdims=True)
            biggest[~np.isfinite(biggest)] = 0.0
            ex = np.exp(sc - biggest)
            total = ex.sum(axis=1, keepdims=True)
            total[total == 0] = 1.0
            w = ex / total
            return w @ v, w
        """,
        "2.3": """
            reference_out = attend(x)  # computed once
            count = len(x)
            res = np.zeros((count, count), dtype=bool)
            for c in range(count):
                xx = np.array(x, copy=True)
                xx[c] = xx[c] + 1.0
                res[:, c] = (attend(xx) != reference_out).any(axis=1)
            return res
        """,
    },
}


def _report(name: str, code: dict[str, str]) -> Report:
    cells = {ex: _cell(ex, body) for ex, body in code.items()}
    stubs = similarity.scaffolds(solutions_dir(), NOTEBOOK)
    cells.setdefault("2.1", stubs["2.1"])  # left at its stub: never compared
    results = [Result(ex, "passed" if ex in code else "not attempted") for ex in ("2.1", "2.2", "2.3")]
    return Report(Path(f"{name}.ipynb"), NOTEBOOK, results, code=cells)


@pytest.fixture(scope="module")
def pairs():
    reports = [_report(name, code) for name, code in {**HONEST, **COPIES}.items()]
    return {(p.a, p.b): p for p in similarity.compare(reports, solutions_dir())}


def test_planted_near_copies_are_flagged_on_every_exercise(pairs):
    pair = pairs[("ana", "dan")]
    assert pair.score >= similarity.THRESHOLD
    assert {m.exercise: m.score >= similarity.THRESHOLD for m in pair.matches} == {"2.2": True, "2.3": True}


def test_independent_honest_solutions_are_not_flagged(pairs):
    for a, b in itertools.combinations(sorted(HONEST), 2):
        pair = pairs[(a, b)]
        assert pair.score < similarity.THRESHOLD, (a, b, [(m.exercise, m.share_a, m.share_b) for m in pair.matches])
        assert all(m.score < similarity.THRESHOLD for m in pair.matches)
    # and the copy is no closer to the honest learners than ana is
    for other in ("ben", "chloe"):
        assert pairs[tuple(sorted(("dan", other)))].score < similarity.THRESHOLD


def test_the_scaffold_and_untouched_exercises_never_count():
    stubs = similarity.scaffolds(solutions_dir(), NOTEBOOK)
    untouched = [Report(Path(f"{n}.ipynb"), NOTEBOOK, [], code=dict(stubs)) for n in ("eve", "fay")]
    assert similarity.compare(untouched, solutions_dir()) == []  # nothing written: nothing compared
    # two learners who each wrote one line of their own share only the scaffold: no overlap is found
    tiny = [_report("gus", {"2.2": "return None, None"}), _report("hal", {"2.2": "raise ValueError('no')"})]
    (pair,) = similarity.compare(tiny, solutions_dir())
    assert pair.score < similarity.THRESHOLD


def test_the_report_says_it_is_evidence_and_escapes_names(tmp_path, pairs):
    hostile = _report('<img src=x onerror="alert(1)">\u202e', HONEST["ana"])
    found = similarity.compare([hostile, _report("dan", COPIES["dan"])], solutions_dir())
    path = tmp_path / "similarity.html"
    similarity.write_report(found, path)
    html = path.read_text()
    assert "Evidence to look at, not a verdict" in html and "look at this" in html
    assert "<img" not in html and "&lt;img" in html and "\u202e" not in html and "\\u202e" in html
