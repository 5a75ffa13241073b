"""The slides and the website as a reader meets them: opened from file:// in headless Chromium, with no network.

The decks and the site are built once per session (``attnlab_course.publish``) into a temporary folder (or taken from
``ATTNLAB_PUBLISHED``, a folder with ``slides/`` and ``site/`` built from this checkout, to check a build again). Every
request that is not a local file (``file:``, ``data:``, ``blob:``) or loopback is blocked and recorded; a test fails on
any such request, on any console error, page error or failed local request. Screenshots of a few slides and pages go to
``artifacts/publish/`` (git ignores it) and the build times and sizes to ``artifacts/publish/build.json``.

Accessibility: axe-core (``tests/browser/axe.py``, pinned and sha512-checked) audits every deck and every page of the site
against the WCAG 2.1 A and AA rules, in light and in dark mode (``prefers-color-scheme``; see ``axe.audit_schemes``), on
the pages the other checks load anyway; there must be no violation, and no rule is skipped (``axe.SKIPPED``). In the
decks, keyboard focus must stay on the slide on show, and the Colab set-up cell is no slide.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from attnlab_course import timing
from attnlab_course.publish import assets
from attnlab_course.publish.build import ROOT, build_site, build_slides, course_notebooks, docs_pages
from attnlab_course.publish.slideshow import SLIDE_HEIGHT, SLIDE_WIDTH

from . import axe
from .conftest import ARTIFACTS, CHROMIUM

if not CHROMIUM.exists():
    pytest.skip(f"browser tests skipped: no Chromium at {CHROMIUM} (install it: apt-get install chromium)",
                allow_module_level=True)

pytestmark = pytest.mark.browser
SHOTS = ARTIFACTS / "publish"
NOTEBOOKS = [item.stem for item in course_notebooks()]
DOCS = [stem for stem, _, _ in docs_pages()]  # docs/*.md, the instructor guide aside
SCREENSHOT_SLIDES = {"02_masks": 4, "03_why_sqrt_dk": 10, "06_online_softmax": 12}  # deck -> a subslide to show


def audit(page, what: str) -> list[str]:
    """axe's WCAG 2.1 A/AA violations on ``page`` in light and dark mode, as lines ``what (mode): rule ...``. The
    page is left changed (:func:`axe.audit_schemes`): audit it last."""
    return [f"{what} ({scheme}): {axe.summary(violations)}"
            for scheme, violations in axe.audit_schemes(page).items() if violations]


@pytest.fixture(scope="session")
def published(tmp_path_factory):
    if os.environ.get("ATTNLAB_PUBLISHED"):
        return Path(os.environ["ATTNLAB_PUBLISHED"])
    out = tmp_path_factory.mktemp("publish")
    cache = axe.CACHE
    if shutil.which("npm") is None and not all(any(cache.glob(f"*-{p.version}.tgz")) for p in assets.PACKAGES):
        pytest.skip("publishing tests skipped: npm is needed once to fetch the pinned reveal.js and MathJax packages")
    slides, site = build_slides(out / "slides", cache=cache), build_site(out / "site", cache=cache)
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "build.json").write_text(json.dumps({"slides": slides, "site": site}, indent=2) + "\n")
    return out


def _local(url: str) -> bool:
    scheme = urllib.parse.urlsplit(url).scheme
    host = urllib.parse.urlsplit(url).hostname or ""
    return scheme in ("file", "data", "blob", "about") or host in ("127.0.0.1", "localhost", "::1")


class Watch:
    """A page whose outside requests are blocked and recorded, with its console errors and failed requests."""

    def __init__(self, page):
        self.page, self.external, self.errors = page, [], []
        page.route("**/*", self._route)
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: _local(r.url) and self.errors.append(f"failed: {r.url[:200]}"))

    def _route(self, route):
        if _local(route.request.url):
            route.continue_()
        else:
            self.external.append(route.request.url)
            route.abort()

    def check(self, what: str) -> None:
        assert self.external == [], f"{what}: requests outside the local files: {self.external}"
        assert self.errors == [], f"{what}: {self.errors}"


@pytest.fixture
def watched(browser):
    context = browser.new_context(viewport={"width": SLIDE_WIDTH, "height": SLIDE_HEIGHT})
    page = context.new_page()
    yield Watch(page)
    context.close()


# Per slide: its section, the content's overflow past the slide's bottom edge, and code blocks wider than the slide
_MEASURE_JS = """() => {
  const out = [];
  const slides = document.querySelector('.reveal .slides');
  Reveal.getHorizontalSlides().forEach((h, i) => {
    const stack = h.querySelectorAll(':scope > section');
    const subs = stack.length ? Array.from(stack) : [h];
    subs.forEach((s, j) => {
      Reveal.slide(i, j);
      const box = s.getBoundingClientRect(), scale = Reveal.getScale();
      const wide = Array.from(s.querySelectorAll('pre')).filter(p => p.offsetParent !== null && (
          p.scrollWidth > p.clientWidth + 1 || p.getBoundingClientRect().right > box.left + box.width + 1))
        .map(p => p.textContent.split('\\n').reduce((a, b) => a.length > b.length ? a : b).slice(0, 80));
      let bottom = 0;
      s.querySelectorAll('.jp-Cell, h1, h2, h3, p, li, img').forEach(e => {
        const folded = e.closest('details:not([open])') && !e.closest('summary');  // a folded answer
        if (e.offsetParent !== null && !folded) bottom = Math.max(bottom, e.getBoundingClientRect().bottom);
      });
      out.push({h: i, v: j, section: h.dataset.section, overflow: Math.round((bottom - box.top) / scale - s.offsetHeight), wide: wide});
    });
  });
  Reveal.slide(0, 0);
  return out;
}"""


_TOKENS = """<!doctype html><html lang="en"><head><title>tokens</title><style>
  pre { color: #222; background: #fff; } .k { color: #075; } .n { color: #333; } .faint { color: #333; }
  @media (prefers-color-scheme: dark) { pre { color: #eee; background: #111; } .k { color: #6c6; } .n { color: #ddd; }
    .faint { color: #444; } }
</style></head><body><main><pre>{}</pre></main></body></html>"""


def test_the_audit_checks_every_kind_of_code_token_in_both_schemes(browser):
    """One token of each kind is audited for contrast (``axe.audit_schemes``): a kind that fails in one scheme only,
    hidden among hundreds of tokens that pass, is still found, and in that scheme."""
    page = browser.new_page()
    try:
        many = "".join(f'<span class="k">def</span> <span class="n">f{i}</span>\n' for i in range(300))
        page.set_content(_TOKENS.replace("{}", many))
        assert axe.audit_schemes(page) == {"light": [], "dark": []}
        page.set_content(_TOKENS.replace("{}", many + '<span class="faint">faint_name</span>\n' + many))
        found = axe.audit_schemes(page)
        assert found["light"] == [] and [v["id"] for v in found["dark"]] == ["color-contrast"], found
        assert len(found["dark"][0]["nodes"]) == 1 and ".faint" in found["dark"][0]["nodes"][0]
    finally:
        page.close()


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_deck_works_offline_and_fits_the_slides(stem, published, watched):
    page = watched.page
    page.goto((published / "slides" / f"{stem}.html").as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=30_000)
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
    page.evaluate("() => MathJax.startup.promise")
    nb = nbformat.read(next(i.source for i in course_notebooks() if i.stem == stem), as_version=4)
    has_math = any(c.cell_type == "markdown" and "$" in c.source for c in nb.cells)
    if has_math:
        assert page.locator("mjx-container svg").count() > 0, f"{stem}: no MathJax output in the deck"
    page.screenshot(path=str(SHOTS / f"slides__{stem}__title.png"))

    slides = page.evaluate(_MEASURE_JS)
    sections = {s["section"] for s in slides}
    missing = [s.title for s in timing.sections(nb) if s.title not in sections]
    assert not missing, f"{stem}: sections without a slide: {missing}"
    wide = [(s["h"], s["v"], s["wide"]) for s in slides if s["wide"]]
    assert not wide, f"{stem}: code wider than its slide (slide h, v, longest line): {wide}"
    tall = [(s["h"], s["v"], s["overflow"]) for s in slides if s["overflow"] > 8]
    assert not tall, f"{stem}: content below the slide's bottom edge (slide h, v, px): {tall}"

    # landmarks, language, title; the Colab set-up cell is no slide; Tab stays on the slide on show
    assert page.evaluate("() => document.documentElement.lang") == "en" and page.title().strip(), stem
    assert page.locator("main").count() == 1, f"{stem}: one <main> landmark"
    assert "Google Colab only" not in page.locator(".reveal .slides").inner_text(), f"{stem}: the Colab cell is a slide"
    page.evaluate("() => Reveal.slide(0, 0)")
    strays = [None] * 15
    for n in range(15):
        page.keyboard.press("Tab")
        strays[n] = page.evaluate("""() => { const s = document.activeElement.closest('.reveal .slides section');
            return s && !(s === Reveal.getCurrentSlide() || s.contains(Reveal.getCurrentSlide())) ?
                document.activeElement.outerHTML.slice(0, 80) : null; }""")
    assert not any(strays), f"{stem}: Tab stops on slides not on show: {[s for s in strays if s]}"

    if stem in SCREENSHOT_SLIDES:
        n = SCREENSHOT_SLIDES[stem]
        for k, s in enumerate(slides[n:n + 3]):
            page.evaluate(f"() => Reveal.slide({s['h']}, {s['v']})")
            page.wait_for_timeout(100)
            page.screenshot(path=str(SHOTS / f"slides__{stem}__{k}.png"))
        explorer = page.evaluate("""() => { for (const [i, h] of Reveal.getHorizontalSlides().entries())
            for (const [j, s] of Array.from(h.querySelectorAll(':scope > section')).entries())
              if (s.textContent.includes('explorer(')) return [i, j]; return null; }""")
        if explorer:  # the subslide after the explorer's code shows its stored picture
            page.evaluate(f"() => Reveal.slide({explorer[0]}, {explorer[1] + 1})")
            page.wait_for_timeout(100)
            page.screenshot(path=str(SHOTS / f"slides__{stem}__explorer.png"))
    violations = audit(page, f"slides/{stem}.html")  # last: it changes the page
    assert not violations, "\n".join(violations)
    watched.check(f"slides/{stem}.html")


def _links(page) -> list[str]:
    return page.evaluate("() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")


def test_site_works_offline_every_page_reachable_every_link_resolves(published, watched):
    site = published / "site"
    page = watched.page
    page.set_viewport_size({"width": 1280, "height": 900})
    seen, todo, broken, math, violations = set(), [(site / "index.html").as_uri()], [], {}, []
    while todo:
        url = todo.pop(0)
        if url in seen:
            continue
        seen.add(url)
        name = Path(urllib.parse.urlsplit(url).path).name
        page.goto(url)
        page.wait_for_load_state("load")
        if page.locator("script[src*='mathjax']").count():
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
            page.evaluate("() => MathJax.startup.promise")
            math[name] = page.locator("mjx-container svg").count()
        if page.locator("script[type='application/vnd.jupyter.widget-state+json']").count():
            page.wait_for_selector(".widget-output img", timeout=30_000)  # explorers show their stored state
            shown = page.locator(".widget-output").all_inner_texts()
            assert not any("JavaScript output" in text for text in shown), f"{name}: an explorer shows {shown}"
        if name in ("index.html", "02_masks.html", "instructor-guide.html"):
            page.screenshot(path=str(SHOTS / f"site__{name.removesuffix('.html')}.png"))
            page.emulate_media(color_scheme="dark")
            page.screenshot(path=str(SHOTS / f"site__{name.removesuffix('.html')}__dark.png"))
            page.emulate_media(color_scheme="light")
        if name == "02_masks.html":
            page.locator(".widget-output img").first.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "site__02_masks__explorer.png"))
        violations += audit(page, name)  # after the screenshots: it changes the page
        for link in _links(page):
            target, _, fragment = link.partition("#")
            if target.startswith("https://") and "/site/" in url and url.endswith(
                    tuple(f"{s}.html" for s in NOTEBOOKS + DOCS)):
                continue  # a cited source: the reader may follow it; loading the page requests nothing
            if not target.startswith("file://"):
                broken.append(f"{url} -> {link} (not a local file)")
                continue
            path = Path(urllib.parse.unquote(urllib.parse.urlsplit(target).path))
            if not path.exists():
                broken.append(f"{url} -> {link}")
            elif fragment and path.suffix == ".html" and not any(  # a browser tries the fragment as is, then decoded
                    f'id="{f}"' in path.read_text(encoding="utf-8") for f in (fragment, urllib.parse.unquote(fragment))):
                broken.append(f"{url} -> {link} (no such anchor)")
            elif path.suffix == ".html" and target not in seen:
                todo.append(target)
    assert not broken, f"links that do not resolve: {broken}"
    assert not violations, "WCAG 2.1 A/AA violations (axe-core):\n" + "\n".join(violations)
    pages = {Path(urllib.parse.urlsplit(u).path).name for u in seen}
    expected = {f"{s}.html" for s in NOTEBOOKS + DOCS} | {"index.html", "instructor-guide.html"}
    assert expected <= pages, f"pages not reachable from the landing page: {sorted(expected - pages)}"
    assert math.get("02_masks.html", 0) > 0 and math.get("instructor-guide.html", 0) > 0, f"MathJax output: {math}"
    watched.check("site")
