"""How long a notebook takes a careful reader, estimated from its content.

One estimate serves the notebook headers and the instructor guide, so the two never disagree:

    python -m attnlab_course.timing notebooks/solutions/*.ipynb           # print each notebook's breakdown
    python -m attnlab_course.timing --write notebooks/solutions/*.ipynb   # rewrite the time block of each header

A section is everything from one level-2 heading (``## ...``, at the start of a line anywhere in a markdown cell) to the
next; what precedes the first is "Introduction".
Its minutes are

* its prose, read at a rate that depends on how dense it is. Plain words are read at ``WORDS_PER_MINUTE``; a formula
  costs ``MATH_TOKEN_WORDS`` words' time for each of its symbols (a letter, digit run, operator or command between
  ``$...$`` or ``$$...$$``), and a number in the text ``NUMBER_WORDS`` words' time more than a plain word. So a
  section's rate in words a minute (:attr:`Section.words_per_minute`) falls as its formulas and figures get denser;
* plus ``CODE_CELL_SECONDS`` for each code cell and ``CODE_LINE_SECONDS`` for each non-blank line of code (running
  it, reading it and its output),
* plus ``EXPLORER_MINUTES`` for each explorer (predict, move the controls, discuss) and, for each "Try it" exercise
  (write, check, fix), the ``minutes`` its solution cell's metadata gives it (``{"attnlab": {"exercise": "N.k",
  "role": "solution", "minutes": 25}}``): 10 to 15 for one that applies an idea as the notebook showed it, 20 to 30
  for one that carries it somewhere new. An exercise without a size counts ``EXERCISE_MINUTES``.

Where the rates come from: adults read English non-fiction silently at 238 words a minute on average, most of them
between 175 and 300 (Brysbaert 2019, *How many words do we read per minute?*, J. Memory and Language 109, 104047, a
meta-analysis of 190 studies). A learner studying a course reads to learn, so the plain rate is taken near the low end
of that range. The cost of a formula's symbol and of a number is the course's own assumption (no study measured it for
text like this), set so that the densest notebooks come out near the times that careful readers reported for them
(03: 130 to 160 minutes, 06: about 130, in the course's reviews).

The header's time block starts at the line beginning ``**Time**`` in the notebook's first cell and runs to the end of
that cell; ``--write`` replaces it with the total (rounded to 5 minutes) and the per-section table.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

WORDS_PER_MINUTE = 200  # plain words of prose (Brysbaert 2019: 175-300 for non-fiction, 238 on average)
MATH_TOKEN_WORDS = 2  # a symbol of a formula takes as long as 2 plain words (the course's own assumption)
NUMBER_WORDS = 1.0  # a number in the text takes one plain word's time more than a word (the course's assumption)
CODE_CELL_SECONDS = 20
CODE_LINE_SECONDS = 3
EXPLORER_MINUTES = 4
EXERCISE_MINUTES = 15  # an exercise whose cell gives no ``minutes``
TIME_MARK = "**Time**"
_EXPLORER_CALL = re.compile(r"(^|[=\s(])explorer\(", re.MULTILINE)
_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.DOTALL)  # display math first, then inline math
_MATH_TEXT = re.compile(r"\\(?:text|mathrm|operatorname|mathbf|mathit|textbf)\s*\{[^{}]*\}")  # one symbol each
_MATH_TOKEN = re.compile(r"\\[A-Za-z]+|\d+(?:[.,]\d+)*|[A-Za-z]|[=+\-*/<>|!,()\[\]]|\\[{}|,;]")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def math_tokens(formula: str) -> int:
    """The symbols of one formula (LaTeX without its ``$``): commands, letters, digit runs and operators; a
    ``\\text{...}`` counts as one symbol, braces, ``^`` and ``_`` as none."""
    return len(_MATH_TOKEN.findall(_MATH_TEXT.sub(" x ", formula)))


@dataclass
class Prose:
    """What a stretch of markdown asks of a reader: its plain words, its formulas' symbols and its numbers."""

    words: int = 0
    math_tokens: int = 0
    numbers: int = 0

    def __iadd__(self, other: "Prose") -> "Prose":
        self.words += other.words
        self.math_tokens += other.math_tokens
        self.numbers += other.numbers
        return self

    @property
    def minutes(self) -> float:
        return (self.words + MATH_TOKEN_WORDS * self.math_tokens + NUMBER_WORDS * self.numbers) / WORDS_PER_MINUTE


def prose(text: str) -> Prose:
    """Count ``text`` (markdown): formulas are cut out and counted by their symbols, the rest in words and numbers."""
    formulas = [a or b for a, b in _MATH.findall(text)]
    plain = _MATH.sub(" ", text)
    return Prose(words=len(plain.split()), math_tokens=sum(math_tokens(f) for f in formulas),
                 numbers=len(_NUMBER.findall(plain)))


def exercise_minutes(cell) -> float:
    """The size of a "Try it" exercise: its solution cell's ``metadata.attnlab.minutes``, else ``EXERCISE_MINUTES``."""
    meta = cell.get("metadata", {}).get("attnlab", {})
    minutes = meta.get("minutes") if isinstance(meta, dict) else None
    if minutes is None:
        return float(EXERCISE_MINUTES)
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not 0 < minutes <= 120:
        raise ValueError(f"exercise {meta.get('exercise')}: metadata 'minutes' must be a number of minutes between 0 "
                         f"and 120, got {minutes!r}")
    return float(minutes)


@dataclass
class Section:
    """One level-2 section of a notebook and what it asks of a reader."""

    title: str
    text: Prose = field(default_factory=Prose)
    code_cells: int = 0
    code_lines: int = 0
    explorers: int = 0
    exercises: int = 0
    exercise_minutes: float = 0.0

    @property
    def words(self) -> int:
        """The words of its prose as a reader sees them: plain words, plus one per formula symbol and number."""
        return self.text.words + self.text.math_tokens

    @property
    def words_per_minute(self) -> float:
        """The rate at which its prose is read, in :attr:`words` a minute: lower where formulas and numbers are dense."""
        return self.words / self.text.minutes if self.text.minutes else float(WORDS_PER_MINUTE)

    @property
    def minutes(self) -> float:
        return (self.text.minutes + (self.code_cells * CODE_CELL_SECONDS + self.code_lines * CODE_LINE_SECONDS) / 60
                + self.explorers * EXPLORER_MINUTES + self.exercise_minutes)


def _prose(cell_index: int, source: str) -> str:
    """The text of a markdown cell that a reader reads (the header's own time block excluded)."""
    if cell_index == 0 and TIME_MARK in source:
        source = source[: source.index(TIME_MARK)]
    return source


_HEADING = re.compile(r"##\s+(.*)")  # '## ' but not '### ', at the start of a line
_FENCE = re.compile(r"\s*(```|~~~)")


def _split_at_headings(text: str) -> list[tuple[str | None, str]]:
    """A markdown cell cut at its level-2 headings: (None, text before the first), then (title, text) for each.

    A line inside a fenced code block is never a heading."""
    parts: list[tuple[str | None, list[str]]] = [(None, [])]
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            parts.append((heading.group(1).strip(), []))
        parts[-1][1].append(line)  # a heading's own words are read too
    return [(title, "\n".join(lines)) for title, lines in parts]


def sections(nb) -> list[Section]:
    """The notebook's sections, in order, with the words, code and activities of each."""
    found = [Section("Introduction")]
    for i, cell in enumerate(nb.cells):
        source = cell.get("source", "")
        if cell.cell_type == "markdown":
            # A heading may sit anywhere in a cell: the words before it belong to the section it ends.
            for title, text in _split_at_headings(_prose(i, source)):
                if title is not None:
                    found.append(Section(title))
                found[-1].text += prose(text)
        elif cell.cell_type == "code":
            role = cell.get("metadata", {}).get("attnlab", {}).get("role")
            if role == "colab":  # set-up that does nothing outside Colab: no time of the reader's
                continue
            found[-1].code_cells += 1
            found[-1].code_lines += sum(1 for line in source.splitlines() if line.strip())
            found[-1].explorers += bool(_EXPLORER_CALL.search(source))
            if role == "solution":
                found[-1].exercises += 1
                found[-1].exercise_minutes += exercise_minutes(cell)
    return [s for s in found if s.text.words or s.text.math_tokens or s.code_cells]


def total_minutes(nb) -> int:
    """The whole notebook, rounded to 5 minutes."""
    return int(5 * round(sum(s.minutes for s in sections(nb)) / 5)) or 5


def prose_rates(nb) -> tuple[int, int]:
    """The slowest and fastest prose rate of the notebook's sections of at least 100 words, in words a minute
    (rounded to 10)."""
    rates = [s.words_per_minute for s in sections(nb) if s.words >= 100] or [float(WORDS_PER_MINUTE)]
    return int(10 * round(min(rates) / 10)), int(10 * round(max(rates) / 10))


def _exercise_sizes(nb) -> str:
    sizes = [f"{exercise_minutes(c):g}" for c in nb.cells if c.cell_type == "code"
             and c.get("metadata", {}).get("attnlab", {}).get("role") == "solution"]
    if not sizes:
        return ""
    listed = sizes[0] if len(sizes) == 1 else ", ".join(sizes[:-1]) + " and " + sizes[-1]
    return f", the exercise{'s' * (len(sizes) > 1)} {listed} min"


def time_block(nb) -> str:
    """The header's time block: the total, how it is estimated, and the per-section table."""
    rows = [f"| {s.title} | {max(1, round(s.minutes))} |" for s in sections(nb)]
    slow, fast = prose_rates(nb)
    rate = f"{slow} words a minute" if slow == fast else f"{slow} to {fast} words a minute"
    return "\n".join([
        f"{TIME_MARK}: about {total_minutes(nb)} minutes for a careful reader, exercises included (estimated from the "
        f"content: prose at {rate}, slower where formulas and numbers are dense; {CODE_CELL_SECONDS} s a code cell "
        f"plus {CODE_LINE_SECONDS} s a line, {EXPLORER_MINUTES} min an explorer{_exercise_sizes(nb)}).",
        "",
        "<details><summary>Minutes per section, for planning a session</summary>",
        "",
        "| section | minutes |",
        "|---|---:|",
        *rows,
        "",
        "</details>",
    ])


def header_with_time(nb) -> str:
    """The first cell's source with its time block replaced by :func:`time_block` (appended when it has none)."""
    source = nb.cells[0].source
    before = source[: source.index(TIME_MARK)].rstrip() if TIME_MARK in source else source.rstrip()
    return before + "\n\n" + time_block(nb)


def stale(paths) -> list[str]:
    """Notebooks whose header does not carry the current estimate."""
    out = []
    for path in map(Path, paths):
        nb = nbformat.read(path, as_version=4)
        if nb.cells[0].source != header_with_time(nb):
            out.append(f"{path}: the time block is out of date (python -m attnlab_course.timing --write {path})")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab_course.timing", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true", help="rewrite the time block of each notebook's header")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if args.write:
            nb.cells[0].source = header_with_time(nb)
            path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
        print(f"{path}: about {total_minutes(nb)} minutes")
        for s in sections(nb):
            print(f"  {s.minutes:5.1f}  {s.title}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
