"""The instructor guide, generated from the notebooks, :mod:`attnlab_course.timing` and the exercise checkers.

For each notebook: its learning goals (the header's "What you will learn"), a session plan with the minutes of each
section (the same estimate as the notebook headers), where to stop and let the room predict an explorer, the "Check
yourself" questions as discussion prompts, and the mistakes each exercise's checker diagnoses (:mod:`.hints`). It is
written to ``docs/instructor-guide.md``; a test fails when that file is not what this module would write now.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from .. import paths, timing
from ..authoring import cell_role
from .build import ROOT, CourseNotebook, course_notebooks
from .hints import all_hints
from .slideshow import explorer_controls

GUIDE = paths.DOCS / "instructor-guide.md"
SETUP_CHARS = 400

INTRO = """\
# Instructor guide

*Generated from the notebooks, `attnlab_course.timing` and the exercise checkers by
`python -m attnlab_course.publish guide`: edit those, not this file (a test fails when it is out of date).*

Each notebook is one session. Project the slides (`make slides`, then open `build/slides/index.html`; press `s`
for the speaker notes, which hold the exercise solutions and the explorer prompts) or run the solution notebook
(`notebooks/solutions/`) cell by cell in JupyterLab. Learners work in their own `notebooks/NN_topic.ipynb`.

A rhythm that works: derive each idea with the room, look at the picture, then **stop at every explorer** and ask for
a prediction before anyone moves a control; an explorer is live only in JupyterLab (slides and the website show its
default state). Leave the "Try it" exercises for the end or for homework. The "Check yourself" questions make a
ready-made discussion; their answers are folded under each question in the notebook.

The minutes come from `attnlab_course.timing`, one estimate of each notebook's content, the estimate that
`python -m attnlab_course.timing --write` puts in the notebook headers:

- prose: plain words at {wpm} a minute, near the low end of the 175 to 300 words a minute at which most adults read
  non-fiction silently (238 on average: Brysbaert 2019, *How many words do we read per minute?*, a meta-analysis of
  190 studies), because a learner reads to learn. Each symbol of a formula costs {math} words' time and each number
  {number} word more (the course's own assumption, set so that the densest notebooks come near the times careful
  readers reported: 03 130 to 160 minutes, 06 about 130). So prose reads at {slow} to {fast} words a minute across the
  course, slowest where formulas are dense;
- code: {cell} s a code cell plus {line} s a line; {explorer} min an explorer;
- each exercise its own size, in its cell's metadata (listed below with each exercise): 10 to 15 minutes to apply an
  idea as the notebook showed it, 20 to 30 to carry it somewhere new.

They are a reader's pace: a room with questions takes longer.

## Collecting and grading submissions

1. After the session, collect each learner's `notebooks/NN_topic.ipynb` into one folder, one file per learner (the
   file name without `.ipynb` becomes the learner's name; renamed files and several notebooks in one folder are fine).
2. Grade them in one go: `.venv/bin/attnlab-check --batch submissions/ --csv results.csv` (one submission per core;
   `--jobs N`, `--timeout S`). Each exercise is `passed`, `failed`, `not attempted`, `error`, `timed out` or `missing`;
   `results.csv` has one row per learner with the first line of each message. `attnlab-check` is part of the course
   tooling, the `attnlab-course` distribution, which `make install` installs beside `attnlab`; the learners'
   `attnlab` has neither the grader nor the solution notebooks.
3. A learner checks one notebook alone with `make check NB=notebooks/NN_topic.ipynb`.
4. Every submission is treated as hostile code: `--batch` runs each one in a sandbox (bubblewrap, on Linux) and
   refuses to run without one unless told `--no-sandbox`. [Grading a class](grading.md) has the options and the
   grading times, [the grader's guarantees](grader-security.md) its threat model.

The messages a failed exercise prints are the hints listed under each notebook below, so you can read them before
the room does.
"""


def _goals(nb) -> list[str]:
    """The header's "What you will learn" list (or its "In this notebook" paragraph)."""
    header = nb.cells[0].source
    match = re.search(r"\*\*What you will learn\*\*:?\s*\n(.*?)(?:\n\s*\n(?![ \t]*[-*] |\s{2,})|\Z)", header, re.S)
    if match:
        items = re.split(r"\n(?=[-*] )", match.group(1).strip())
        return [" ".join(re.sub(r"^[-*]\s+", "", item).split()) for item in items]
    match = re.search(r"\*\*In this notebook\*\*:?\s*(.*?)(?:\n\s*\n|\Z)", header, re.S)
    return [" ".join(match.group(1).split())] if match else []


def _check_yourself(nb) -> list[tuple[str, str]]:
    """``(question, answer)`` pairs of the "Check yourself" section (answers from their ``<details>``)."""
    text = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    match = re.search(r"^## Check yourself\s*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not match:
        return []
    pairs, rest = [], match.group(1)
    for m in re.finditer(r"(.*?)<details>\s*(?:<summary>.*?</summary>)?(.*?)</details>", rest, re.S):
        question = " ".join(m.group(1).split())
        question = re.sub(r"^\d+\.\s*", "", question.strip("* ")).strip("* ")
        question = re.sub(r"^\*\*(\d+\.\s*)?", "", question).replace("**", "").strip()
        pairs.append((question, " ".join(m.group(2).split())))
    return pairs


def _explorers(nb) -> list[tuple[str, list[str], str]]:
    """``(section title, control names, the prose that sets it up)`` for each explorer of the notebook: the last
    markdown cell of its section before it (cut to ``SETUP_CHARS``)."""
    found, section, prose = [], "Introduction", ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heading = re.match(r"##\s+(.*)", cell.source)
            if heading and not cell.source.startswith("###"):
                section, prose = heading.group(1).strip(), ""
            body = " ".join(p for p in re.split(r"\n\s*\n", cell.source) if p.strip() and not p.lstrip().startswith("#"))
            if body.strip():
                prose = " ".join(body.split())
        elif cell.cell_type == "code":
            controls = explorer_controls(cell.source)
            if controls:
                setup = prose if len(prose) <= SETUP_CHARS else prose[:SETUP_CHARS].rsplit(" ", 1)[0] + " …"
                found.append((section, controls, setup))
    return found


def _exercises(nb) -> list[tuple[str, str, float]]:
    """``(exercise id, what it asks, minutes)`` for each exercise, from the markdown before it, its function's name and
    its size (:func:`attnlab_course.timing.exercise_minutes`)."""
    found, last_md = [], ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            last_md = cell.source
            continue
        role = cell_role(cell)
        if not role or role[1] != "solution":
            continue
        ex = role[0]
        fn = re.search(r"^def\s+(\w+)\s*\(", cell.source, re.M)
        title = re.search(rf"(?:Exercise\s+)?{re.escape(ex)}\s*[:—–.-]?\s*\**\s*([^\n*]+)", last_md)
        label = title.group(1).strip().rstrip(".") if title else ""
        name = f"`{fn.group(1)}`" if fn else ""
        found.append((ex, f"{label} ({name})" if label and name else label or name, timing.exercise_minutes(cell)))
    return found


def _plan(nb) -> list[str]:
    rows = ["| starts at | section | minutes | activity |", "|---:|---|---:|---|"]
    clock = 0.0
    for s in timing.sections(nb):
        activity = ", ".join(filter(None, [f"{s.explorers} explorer{'s' * (s.explorers > 1)}: stop and predict"
                                           if s.explorers else "",
                                           f"{s.exercises} exercise{'s' * (s.exercises > 1)}" if s.exercises else ""]))
        rows.append(f"| {int(round(clock))} min | {s.title} | {max(1, round(s.minutes))} | {activity} |")
        clock += s.minutes
    return rows


def notebook_section(item: CourseNotebook, hints: dict[str, list[str]]) -> str:
    nb = nbformat.read(item.source, as_version=4)
    lines = [f"## {item.title}", "", f"Notebook `{item.stem}`: about {timing.total_minutes(nb)} minutes."]
    goals = _goals(nb)
    if goals:
        lines += ["", "**Learning goals**", ""] + [f"- {g}" for g in goals]
    lines += ["", "**Session plan**", ""] + _plan(nb)
    explorers = _explorers(nb)
    if explorers:
        lines += ["", "**Stop and let the room predict**", ""]
        for section, controls, prose in explorers:
            names = ", ".join(f"`{c}`" for c in controls)
            lines.append(f"- In *{section}*: before moving {names}, ask what will change and why."
                         + (f" The notebook sets it up: \"{prose}\"" if prose else ""))
    questions = _check_yourself(nb)
    if questions:
        lines += ["", "**Discussion prompts** (the notebook's \"Check yourself\")", ""]
        for n, (question, answer) in enumerate(questions, 1):
            lines.append(f"{n}. {question}")
            lines.append(f"   <details><summary>Answer</summary>{answer}</details>")
    exercises = _exercises(nb)
    if exercises:
        lines += ["", "**Exercises, and the mistakes their checks diagnose**"]
        for ex, what, minutes in exercises:
            size = f" (about {minutes:g} minutes)"
            lines += ["", f"*Exercise {ex}*{size}: {what}." if what else f"*Exercise {ex}*{size}.", ""]
            lines += [f"- {h}" for h in hints.get(ex, [])] or ["- (no hints: the check only says passed or failed)"]
        lines += ["", f"Grade this notebook: `.venv/bin/attnlab-check --batch submissions/` with the learners' "
                      f"`{item.stem}.ipynb` files in `submissions/`."]
    return "\n".join(lines)


def render(root: Path = ROOT) -> str:
    """The whole guide, as markdown."""
    notebooks = course_notebooks(root)
    rates = [timing.prose_rates(nbformat.read(item.source, as_version=4)) for item in notebooks]
    intro = INTRO.format(wpm=timing.WORDS_PER_MINUTE, math=f"{timing.MATH_TOKEN_WORDS:g}",
                         number=f"{timing.NUMBER_WORDS:g}", slow=min(r[0] for r in rates),
                         fast=max(r[1] for r in rates), cell=timing.CODE_CELL_SECONDS, line=timing.CODE_LINE_SECONDS,
                         explorer=timing.EXPLORER_MINUTES)
    hints = all_hints()
    overview = ["## The sessions", "", "| notebook | minutes | exercises |", "|---|---:|---:|"]
    for item in notebooks:
        nb = nbformat.read(item.source, as_version=4)
        overview.append(f"| {item.title} | {timing.total_minutes(nb)} | {len(_exercises(nb))} |")
    parts = [intro.rstrip(), "\n".join(overview)] + [notebook_section(item, hints) for item in notebooks]
    return "\n\n".join(parts) + "\n"


def stale(path: Path = GUIDE) -> bool:
    """True when ``path`` is missing or differs from :func:`render`."""
    return not Path(path).exists() or Path(path).read_text(encoding="utf-8") != render()


def write(path: Path = GUIDE) -> Path:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(render(), encoding="utf-8")
    return Path(path)
