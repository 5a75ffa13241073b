"""The README a newcomer reads in two minutes, and the docs/ pages it sends them to: every link between them resolves,
the site includes every page, and the README keeps the two commands CI runs. The site itself is opened in a browser
in tests/browser/test_publish.py."""

from __future__ import annotations

import re
import urllib.parse

import pytest

from attnlab_course import release
from attnlab_course.publish import build
from test_environment import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
READING_RATE = 238  # words a minute: adults reading non-fiction silently, on average (Brysbaert 2019; see timing.py)


def _prose(markdown: str) -> str:
    """What a reader reads: no generated links, code, table rows or link targets."""
    text = release.BLOCK.sub("", markdown)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    return re.sub(r"\]\([^)]*\)", "]", text)


def test_the_readme_reads_in_two_minutes():
    words = len(_prose((ROOT / "README.md").read_text(encoding="utf-8")).split())
    assert words <= 2 * READING_RATE, f"README.md has {words} words of prose: move details to docs/"


def test_the_readme_starts_with_the_two_commands_and_lists_every_notebook():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings[0] == "Quick start", headings
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^make lab\b", quick, re.M) and re.search(r"^make test\b", quick, re.M)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1].strip() == "make test", "the README's test command is the one CI runs"
    stems = re.findall(r"^\| `(\d\d_\w+)` \|", readme, re.M)
    assert stems == [item.stem for item in build.course_notebooks()]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    text = page.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    broken = []
    for target in targets:
        if urllib.parse.urlsplit(target).scheme or target.startswith("#"):
            continue
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert broken == [], f"{page.name}: links to nothing: {broken}"


def test_the_readme_links_every_docs_page_and_the_site_includes_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    on_site = {stem for stem, _, _ in build.docs_pages()}
    docs = {p.stem for p in (ROOT / "docs").glob("*.md")}
    assert on_site == docs - {"instructor-guide"} and len(on_site) >= 5
    linked = set(re.findall(r"\]\(docs/([\w-]+)\.md\)", readme))
    # a page the README does not link is reachable from one it links
    reachable = set(linked)
    for stem in linked:
        reachable |= set(re.findall(r"\]\(([\w-]+)\.md\)", (ROOT / "docs" / f"{stem}.md").read_text(encoding="utf-8")))
    assert docs <= reachable, f"docs pages no reader can reach from the README: {sorted(docs - reachable)}"


def test_site_links_go_to_the_sites_pages():
    text = ("[a](grading.md) [b](docs/setup.md) [c](../README.md) [d](publishing.md#where) [e](https://x.org/y.md) "
            "[f](nothing-here.md)")
    assert build._site_links(text) == ("[a](grading.html) [b](setup.html) [c](index.html) [d](publishing.html#where) "
                                       "[e](https://x.org/y.md) [f](nothing-here.md)")
