"""Session times: estimated from each notebook's content, and every header states the current estimate."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from attnlab_course import timing

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb")) + [
    ROOT / "notebooks" / "00_start_here.ipynb"]


def test_minutes_come_from_prose_code_explorers_and_exercises():
    words = " ".join(["word"] * 300)  # two minutes of prose
    nb = new_notebook(cells=[
        new_markdown_cell(f"# Title\n\n{words}\n\n**Time**: about 1 minute."),
        new_markdown_cell("## 1. First\n\n" + words),
        new_code_cell("x = 1\ny = 2"),
        new_markdown_cell("## 2. Explore"),
        new_code_cell("explorer(draw, a=1)"),
        new_code_cell("def f():\n    pass", metadata={"attnlab": {"exercise": "9.1", "role": "solution"}}),
        new_code_cell("import sys", metadata={"attnlab": {"role": "colab"}}),
    ])
    intro, first, explore = timing.sections(nb)
    assert intro.title == "Introduction" and intro.words == 302 and intro.code_cells == 0, "the time block is not read"
    assert first.words == 303 and first.code_cells == 1 and first.code_lines == 2
    assert (explore.explorers, explore.exercises, explore.code_cells) == (1, 1, 2), "the Colab cell takes no time"
    expected = (302 + 303 + 3) / timing.WORDS_PER_MINUTE + (timing.CODE_CELL_SECONDS * 3 + timing.CODE_LINE_SECONDS
                                                              * 5) / 60 + timing.EXPLORER_MINUTES + timing.EXERCISE_MINUTES
    assert abs(sum(s.minutes for s in timing.sections(nb)) - expected) < 1e-9
    assert timing.total_minutes(nb) == 5 * round(expected / 5)
    block = timing.header_with_time(nb)
    assert block.startswith("# Title") and block.count(timing.TIME_MARK) == 1 and "| 2. Explore |" in block


def test_a_heading_in_the_middle_of_a_cell_starts_its_section_there():
    words = " ".join(["word"] * 150)
    nb = new_notebook(cells=[
        new_markdown_cell("# Title\n\nIntro."),
        new_markdown_cell(f"## 1. First\n\n{words}\n\n## 2. Second\n\n{words} {words}\n\n```\n## not a heading\n```"),
        new_code_cell("x = 1"),
        new_markdown_cell(f"{words}\n\n## 3. Third"),
    ])
    titles = [s.title for s in timing.sections(nb)]
    assert titles == ["Introduction", "1. First", "2. Second", "3. Third"]
    intro, first, second, third = timing.sections(nb)
    assert first.words == 3 + 150 and first.code_cells == 0
    assert second.words == 3 + 300 + 150 + 6 and second.code_cells == 1, "a fenced '## ' line is no heading"
    assert third.words == 3
    assert "| 3. Third |" in timing.time_block(nb)


def test_every_header_states_the_current_estimate():
    assert timing.stale(NOTEBOOKS) == [], "run `make notebooks` (or python -m attnlab_course.timing --write ...)"


def test_learner_notebooks_carry_the_same_time_as_their_solutions():
    for path in NOTEBOOKS[:-1]:
        learner = nbformat.read(path.parent.parent / path.name, as_version=4)
        assert learner.cells[0].source == nbformat.read(path, as_version=4).cells[0].source
