"""Publishing without a browser: slide structure, the checkers' hints, the instructor guide (in the repository and
up to date), the pinned assets. The browser tests of the decks and the site are in tests/browser/test_publish.py."""

from __future__ import annotations

import re

import nbformat
import pytest

from attnlab_course import timing
from attnlab_course.authoring import cell_role
from attnlab_course.publish import assets, guide, hints, slideshow
from attnlab_course.publish.build import course_notebooks

NOTEBOOKS = course_notebooks()


def test_every_notebook_of_the_course_is_published():
    stems = [item.stem for item in NOTEBOOKS]
    assert stems[0] == "00_start_here" and stems == sorted(stems)
    assert all(item.source.exists() for item in NOTEBOOKS)
    assert all(item.solution for item in NOTEBOOKS if item.stem != "00_start_here")


@pytest.mark.parametrize("item", NOTEBOOKS, ids=lambda i: i.stem)
def test_slide_structure(item):
    nb = nbformat.read(item.source, as_version=4)
    before = nbformat.writes(nb)
    deck = slideshow.slides_notebook(nb)
    assert nbformat.writes(nb) == before, "the notebook itself must not change"
    kinds = [c.metadata.slideshow["slide_type"] for c in deck.cells]
    assert kinds[0] == "slide"
    # every section of the timing estimate opens a slide that carries its title
    opened = [c.metadata.slideshow["data"]["section"] for c in deck.cells if c.metadata.slideshow["slide_type"] == "slide"]
    assert [s.title for s in timing.sections(nb)] == [t for t in opened if t in {s.title for s in timing.sections(nb)}]
    assert set(s.title for s in timing.sections(nb)) <= set(opened)
    shown = [c for c in deck.cells if c.metadata.slideshow["slide_type"] not in ("skip", "notes")]
    for cell in shown:
        assert "### BEGIN SOLUTION" not in cell.source, "a solution is on a slide"
        assert not re.search(r"^\s*#\s*NBVAL_", cell.source, re.M)
        for out in cell.get("outputs", []):
            assert "application/vnd.jupyter.widget-view+json" not in out.get("data", {})
    for cell in deck.cells:
        role = cell_role(cell)
        if role and role[1] == "check":
            assert cell.metadata.slideshow["slide_type"] == "skip"
        if role and role[1] == "solution":
            assert "# your code here" in cell.source
    code = [c for c in shown if c.cell_type == "code"]
    assert all(any(t.startswith("attnlab-code-") for t in c.metadata["tags"]) for c in code)


def test_code_size_fits_the_longest_line_and_the_height():
    assert slideshow.code_size(["x = 1"]) == 20
    size = slideshow.code_size(["x" * 120])
    assert 121 * size * slideshow.MONO_EM <= slideshow.CODE_WIDTH < 121 * (size + 1) * slideshow.MONO_EM
    assert slideshow.code_size(["x"], height_lines=30) < 20


def test_markdown_blocks_keep_lists_details_and_math_together():
    source = ("# Title\n\nOne paragraph\nstill the same.\n\n- item one\n\n- item two\n\n$$\na\n\nb\n$$\n\n"
              "<details><summary>Show answer</summary>\n\nThe answer.\n\n</details>\n\n**Label**\n\nAfter.")
    blocks = slideshow.markdown_blocks(source)
    assert blocks == ["# Title", "One paragraph\nstill the same.", "- item one\n\n- item two", "$$\na\n\nb\n$$",
                      "<details><summary>Show answer</summary>\n\nThe answer.\n\n</details>", "**Label**\n\nAfter."]


def test_folded_answers_stay_folded():
    html = slideshow.fold_details("<details><summary>Show answer</summary>\n\nIt is *exact*.\n\nTwo.\n</details>")
    assert html.startswith("<details><summary>Show answer</summary>\n") and html.endswith("</details>")
    assert "\n\n" not in html and "<em>exact</em>" in html


def test_every_exercise_has_hints_from_its_checker():
    from attnlab.exercises import exercise_ids

    found = hints.all_hints()
    assert set(found) == set(exercise_ids())
    for exercise_id, listed in found.items():
        assert listed, f"exercise {exercise_id}: no hint found in its checker"
    assert any("inverted" in h for h in found["2.1"])  # a literal hint
    assert any(h.startswith("you forgot the factor 2") for h in found["4.2"])  # a mistake table's key


def test_hints_follow_variables_helpers_and_fstrings(tmp_path):
    (tmp_path / "nb99.py").write_text(
        "from . import exercise, fail\n"
        "TABLE = {'swapped the axes': 1}\n"
        "HINT = 'a module constant'\n"
        "def _helper(x):\n"
        "    fail('w', 1, 2, hint=f'from a helper, x={x}')\n"
        "@exercise('99.1')\n"
        "def check(fn):\n"
        "    hint = 'one branch'\n"
        "    if fn:\n"
        "        hint = 'other branch'\n"
        "    fail('w', 1, 2, hint)\n"
        "    fail('w', 1, 2, HINT)\n"
        "    _helper(fn)\n"
        "    TABLE\n")
    assert hints.all_hints(tmp_path) == {"99.1": ["one branch", "other branch", "a module constant",
                                                  "you swapped the axes", "from a helper, x={x}"]}


@pytest.fixture(scope="module")
def rendered_guide():
    return guide.render()


def test_instructor_guide_is_up_to_date(rendered_guide):
    assert guide.GUIDE.exists(), "docs/instructor-guide.md is missing: make guide"
    assert guide.GUIDE.read_text(encoding="utf-8") == rendered_guide, "docs/instructor-guide.md is out of date: make guide"


def test_guide_covers_each_notebook(rendered_guide):
    text = rendered_guide
    for item in NOTEBOOKS:
        nb = nbformat.read(item.source, as_version=4)
        section = text.split(f"## {item.title}\n", 1)[1].split("\n## ", 1)[0]
        for s in timing.sections(nb):
            assert f"| {s.title} | {max(1, round(s.minutes))} |" in section
        assert f"about {timing.total_minutes(nb)} minutes" in section
        for exercise in re.findall(r'"exercise": "(\d+\.\d+)"', nbformat.writes(nb)):
            assert f"*Exercise {exercise}*" in section


def test_assets_are_pinned_exactly():
    for package in assets.PACKAGES:
        assert re.fullmatch(r"\d+\.\d+\.\d+", package.version), package
        assert package.integrity.startswith("sha512-") and len(package.integrity) == 95, package


def test_the_colab_cell_is_no_slide():
    from attnlab_course.colab import is_colab_cell

    item = next(i for i in course_notebooks() if i.stem == "02_masks")
    nb = slideshow.slides_notebook(nbformat.read(item.source, as_version=4))
    colab = [c for c in nb.cells if is_colab_cell(c)]
    assert colab and all(c.metadata.slideshow["slide_type"] == "skip" for c in colab)


@pytest.mark.parametrize("template", ["attnlab-page", "attnlab-slides"])
def test_templates_write_the_text_alternative_into_img_alt(template):
    """A PNG output with its alt metadata (and no HTML form) gets ``<img alt>`` on the site and in the slides."""
    from nbconvert import HTMLExporter, SlidesExporter

    from attnlab_course.publish.build import _config

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABpfZFQAAAAABJRU5ErkJggg=="
    alt = 'Two bars: "cat" gets 0.66 & "the" 0.34 of the weight.'
    cell = nbformat.v4.new_code_cell("plot.show(alt=...)", outputs=[nbformat.v4.new_output(
        "display_data", data={"image/png": png, "text/plain": alt}, metadata={"image/png": {"alt": alt}})])
    cell.metadata["slideshow"] = {"slide_type": "slide"}
    nb = nbformat.v4.new_notebook(cells=[cell])
    exporter = (HTMLExporter if template == "attnlab-page" else SlidesExporter)(config=_config(template))
    html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": "t"}, "attnlab": {"nav_top": "",
                                                                                                "nav_bottom": ""}})
    from html import unescape

    img = re.search(r"<img [^>]*\balt=([\"'])(.*?)\1[^>]*>", html)
    assert img and unescape(img.group(2)) == alt and png in img.group(0), html[html.find("<img"):][:300]


def test_a_list_taller_than_a_slide_is_split_between_items():
    items = [f"{n}. " + "word " * 60 + f"end{n}\n   still item {n}" for n in range(1, 13)]
    block = "\n".join(items)
    runs = slideshow.split_list(block)
    assert len(runs) > 1 and "\n".join(runs) == block, "whole items, in order, nothing lost"
    assert all(slideshow.markdown_height(run) <= slideshow.CONTENT_HEIGHT - 70 for run in runs)
    assert all(re.match(r"\d+\. ", run) for run in runs), "every run starts at an item, keeping its number"
    assert slideshow.split_list("- short\n- list") == ["- short\n- list"]
    assert slideshow.split_list("A paragraph. " * 200) == ["A paragraph. " * 200]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T\n\n## Remember this\n\n" + block)])
    deck = slideshow.slides_notebook(nb)
    assert [c.metadata.slideshow["slide_type"] for c in deck.cells].count("subslide") == len(runs) - 1
    assert not any("attnlab-text-small" in c.metadata.get("tags", []) for c in deck.cells)
