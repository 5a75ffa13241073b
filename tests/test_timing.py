"""Session times: estimated from each notebook's content, and every header states the current estimate."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from attnlab_course import timing

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb")) + [
    ROOT / "notebooks" / "00_start_here.ipynb"]


def test_minutes_come_from_prose_code_explorers_and_exercises():
    words = " ".join(["word"] * 300)  # plain prose: no formula, no number
    nb = new_notebook(cells=[
        new_markdown_cell(f"# Title\n\n{words}\n\n**Time**: about 1 minute."),
        new_markdown_cell("## 1. First\n\n" + words),
        new_code_cell("x = 1\ny = 2"),
        new_markdown_cell("## 2. Explore"),
        new_code_cell("explorer(draw, a=1)"),
        new_code_cell("def f():\n    pass", metadata={"attnlab": {"exercise": "9.1", "role": "solution", "minutes": 25}}),
        new_code_cell("def g():\n    pass", metadata={"attnlab": {"exercise": "9.2", "role": "solution"}}),
        new_code_cell("import sys", metadata={"attnlab": {"role": "colab"}}),
    ])
    intro, first, explore = timing.sections(nb)
    assert intro.title == "Introduction" and intro.words == 302 and intro.code_cells == 0, "the time block is not read"
    assert first.words == 303 and first.code_cells == 1 and first.code_lines == 2
    assert (explore.explorers, explore.exercises, explore.code_cells) == (1, 2, 3), "the Colab cell takes no time"
    assert explore.exercise_minutes == 25 + timing.EXERCISE_MINUTES, "an exercise's own size, else the default"
    numbers = 2 * timing.NUMBER_WORDS  # the "1." and "2." of the headings
    expected = (302 + 303 + 3 + numbers) / timing.WORDS_PER_MINUTE + (timing.CODE_CELL_SECONDS * 4 + timing.CODE_LINE_SECONDS
                                                              * 7) / 60 + timing.EXPLORER_MINUTES + 25 + \
        timing.EXERCISE_MINUTES
    assert abs(sum(s.minutes for s in timing.sections(nb)) - expected) < 1e-9
    assert timing.total_minutes(nb) == 5 * round(expected / 5)
    block = timing.header_with_time(nb)
    assert block.startswith("# Title") and block.count(timing.TIME_MARK) == 1 and "| 2. Explore |" in block
    assert "the exercises 25 and 15 min" in block


def test_formulas_and_numbers_are_read_slower_than_words():
    """Two sections of the same length in words: the one made of formulas and numbers takes longer, and its rate in
    words a minute is lower. An estimate that ignored density would give them the same minutes."""
    plain = " ".join(["the weights of a row add up to one"] * 20)  # 180 words, no math, no numbers
    dense = " ".join(["the weights $p_i = e^{s_i - m} / \\ell$ add up to 1.0 over 4,096 keys"] * 10)
    nb = new_notebook(cells=[new_markdown_cell("## Plain\n\n" + plain), new_markdown_cell("## Dense\n\n" + dense)])
    plain_s, dense_s = timing.sections(nb)
    assert dense_s.text.math_tokens == 10 * timing.math_tokens("p_i = e^{s_i - m} / \\ell") == 10 * 10
    assert dense_s.text.numbers == 20 and plain_s.text.numbers == 0 and plain_s.text.math_tokens == 0
    assert abs(plain_s.words - dense_s.words) <= 40, "the two sections have about the same length in words"
    assert dense_s.minutes > 1.5 * plain_s.minutes
    assert dense_s.words_per_minute < 0.75 * plain_s.words_per_minute
    assert plain_s.words_per_minute == timing.WORDS_PER_MINUTE


def test_math_tokens_count_symbols_not_characters():
    assert timing.math_tokens(r"m_\text{new} = \max(m, b)") == 9  # m, new, =, max, (, m, ",", b, )
    assert timing.math_tokens(r"\frac{QK^\top}{\sqrt{d_k}}") == 7  # frac, Q, K, top, sqrt, d, k
    assert timing.math_tokens("4096") == 1
    found = timing.prose("a $x$ and $$y + z$$ and 3.5 and 1e-3 but not x2 or v1.2")
    assert (found.math_tokens, found.numbers) == (4, 2)


def test_every_exercise_has_a_size_and_transfer_exercises_are_the_long_ones():
    sizes = {}
    for path in NOTEBOOKS[:-1]:
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.get("metadata", {}).get("attnlab", {})
            if meta.get("role") == "solution":
                assert "minutes" in meta, f"{path.name}: exercise {meta['exercise']} has no 'minutes' in its metadata"
                sizes[meta["exercise"]] = timing.exercise_minutes(cell)
    for transfer in ("1.3", "2.3", "3.1", "4.3", "6.1", "6.2", "6.3"):
        assert 20 <= sizes[transfer] <= 30, (transfer, sizes[transfer])
    assert min(sizes.values()) >= 10


def test_a_size_must_be_a_number_of_minutes():
    cell = new_code_cell("def f(): pass", metadata={"attnlab": {"exercise": "9.1", "role": "solution", "minutes": "25"}})
    with pytest.raises(ValueError, match="must be a number of minutes"):
        timing.exercise_minutes(cell)


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
