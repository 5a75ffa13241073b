"""How long a notebook takes a careful reader, estimated from its content.

One estimate serves the notebook headers and the instructor guide, so the two never disagree:

    python -m attnlab_course.timing notebooks/solutions/*.ipynb           # print each notebook's breakdown
    python -m attnlab_course.timing --write notebooks/solutions/*.ipynb   # rewrite the time block of each header

A section is everything from one level-2 heading (``## ...``, at the start of a line anywhere in a markdown cell) to the
next; what precedes the first is "Introduction".
Its minutes are

* its prose, at ``WORDS_PER_MINUTE`` (technical text with formulas; counted in markdown words, math included),
* plus ``CODE_CELL_SECONDS`` for each code cell and ``CODE_LINE_SECONDS`` for each non-blank line of code (running
  it, reading it and its output),
* plus ``EXPLORER_MINUTES`` for each explorer (predict, move the controls, discuss) and ``EXERCISE_MINUTES`` for
  each "Try it" exercise (write, check, fix).

The header's time block starts at the line beginning ``**Time**`` in the notebook's first cell and runs to the end of
that cell; ``--write`` replaces it with the total (rounded to 5 minutes) and the per-section table.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

WORDS_PER_MINUTE = 150
CODE_CELL_SECONDS = 20
CODE_LINE_SECONDS = 3
EXPLORER_MINUTES = 4
EXERCISE_MINUTES = 10
TIME_MARK = "**Time**"
_EXPLORER_CALL = re.compile(r"(^|[=\s(])explorer\(", re.MULTILINE)


@dataclass
class Section:
    """One level-2 section of a notebook and what it asks of a reader."""

    title: str
    words: int = 0
    code_cells: int = 0
    code_lines: int = 0
    explorers: int = 0
    exercises: int = 0

    @property
    def minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + (self.code_cells * CODE_CELL_SECONDS
                + self.code_lines * CODE_LINE_SECONDS) / 60 + self.explorers * EXPLORER_MINUTES
                + self.exercises * EXERCISE_MINUTES)


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
                found[-1].words += len(text.split())
        elif cell.cell_type == "code":
            role = cell.get("metadata", {}).get("attnlab", {}).get("role")
            if role == "colab":  # set-up that does nothing outside Colab: no time of the reader's
                continue
            found[-1].code_cells += 1
            found[-1].code_lines += sum(1 for line in source.splitlines() if line.strip())
            found[-1].explorers += bool(_EXPLORER_CALL.search(source))
            found[-1].exercises += role == "solution"
    return [s for s in found if s.words or s.code_cells]


def total_minutes(nb) -> int:
    """The whole notebook, rounded to 5 minutes."""
    return int(5 * round(sum(s.minutes for s in sections(nb)) / 5)) or 5


def time_block(nb) -> str:
    """The header's time block: the total, how it is estimated, and the per-section table."""
    rows = [f"| {s.title} | {max(1, round(s.minutes))} |" for s in sections(nb)]
    return "\n".join([
        f"{TIME_MARK}: about {total_minutes(nb)} minutes for a careful reader, exercises included (estimated from the "
        f"content: prose at {WORDS_PER_MINUTE} words a minute, {CODE_CELL_SECONDS} s a code cell plus "
        f"{CODE_LINE_SECONDS} s a line, {EXPLORER_MINUTES} min an explorer, {EXERCISE_MINUTES} min an exercise).",
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
