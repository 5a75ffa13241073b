"""A feedback page (``attnlab-check --batch DIR --feedback OUT``) as a learner meets it: opened from file:// in headless
Chromium, with hostile names, code and messages. Nothing may run, nothing may be fetched, everything the learner
wrote must read back as text, and the page must have its language, title, landmarks and AA contrast.

The screenshot goes to ``artifacts/feedback/feedback.png`` (git ignores artifacts/)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from attnlab_course.grading import feedback, points
from attnlab_course.grading.runner import Report, Result
from attnlab_course.paths import solutions_dir

from .conftest import ARTIFACTS, CHROMIUM

if not CHROMIUM.exists():
    pytest.skip(f"browser tests skipped: no Chromium at {CHROMIUM} (install it: apt-get install chromium)",
                allow_module_level=True)

pytestmark = pytest.mark.browser

NAME = '<script>window.__pwned = "name"</script>\u202eevil\u202c'
FILE = '02-<img src=x onerror="window.__pwned=1">\n"onerror=alert(1)\u202e.ipynb'
CODE = ('def my_causal_mask(T, S, start):\n    """<b>bold?</b>"""\n    # \u202e } \u2066 if admin: return True \u2069\n'
        '    s = "</code></pre><script>window.__pwned = \'code\'</script>"\n    return np.ones((T, S), bool)\n')
MESSAGE = ('the mask is inverted\n  expected: True on and below the diagonal\n'
           '  got:      <svg onload="window.__pwned=3"> and "><iframe src=javascript:alert(1)>\n'
           '  hint: True means \'may attend\'')

# WCAG 2 contrast of every element's own text against the background it is drawn on
CONTRAST = """() => {
  const rgb = s => s.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
                                        .reduce((a, c, i) => a + c * [0.2126, 0.7152, 0.0722][i], 0);
  const background = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
                                                                 if (c.length < 4 || c[3] > 0) return c.slice(0, 3); }
                             return [255, 255, 255]; };
  const worst = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(background(el))];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    worst.push([ratio, el.tagName, el.className]);
  }
  return worst.sort((x, y) => x[0] - y[0]).slice(0, 3);
}"""


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("feedback")
    roster_file = folder / "roster.csv"
    with open(roster_file, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["file", "id", "name"], [FILE, "s-42", NAME]])
    roster = points.load_roster(roster_file)
    report = Report(Path(FILE), "02_masks",
                    [Result("2.1", "failed", MESSAGE), Result("2.2", "passed"), Result("2.3", "not attempted",
                                                                                      "replace the stub")],
                    notes=["a note with a newline\nand <u>markup</u>"], code={"2.1": CODE, "2.2": "return q, k"})
    (path,) = feedback.write_pages([report], folder / "out", points.load_scheme(solutions_dir()), roster)
    return path


def test_the_page_runs_nothing_fetches_nothing_and_reads_back_every_hostile_text(browser, page_file):
    context = browser.new_context(viewport={"width": 1100, "height": 1400}, java_script_enabled=True)
    page = context.new_page()
    requests, dialogs, errors = [], [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    assert page.evaluate("window.__pwned") is None and dialogs == [] and errors == []
    assert requests == [page_file.as_uri()], "the page loads nothing but itself"
    assert page.locator("script, img, iframe, svg, link[rel=stylesheet], a[href^=http]").count() == 0
    text = page.inner_text("body")
    assert '<script>window.__pwned = "name"</script>\\u202eevil\\u202c' in text  # the roster name, as text
    assert '02-<img src=x onerror="window.__pwned=1">\\n"onerror=alert(1)\\u202e.ipynb' in text  # the file name
    assert "\u202e" not in text and "\u2066" not in text  # direction marks shown as escapes
    assert '<svg onload="window.__pwned=3">' in text and "hint: True means 'may attend'" in text
    assert "window.__pwned = 'code'</script>" in text and "<b>bold?</b>" in text
    assert "0 of 3 points" not in text and "1 of 3 points" in text
    (ARTIFACTS / "feedback").mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "feedback" / "feedback.png"), full_page=True)
    context.close()


def test_the_page_has_language_title_landmarks_and_aa_contrast(page, page_file):
    page.goto(page_file.as_uri())
    assert page.get_attribute("html", "lang") == "en"
    assert page.title().startswith("Feedback for <script>")
    for landmark in ("header", "main", "footer"):
        assert page.locator(landmark).count() == 1, landmark
    assert page.locator("h1").count() == 1 and page.locator("main h2").count() == 5  # summary, 3 exercises, notes
    assert page.locator("table caption").count() == 1 and page.locator("th[scope=col]").count() == 3
    worst = page.evaluate(CONTRAST)
    assert worst[0][0] >= 4.5, worst  # WCAG AA for normal text
    # every result is said in words, not by colour alone
    assert page.locator(".status").all_inner_texts()[:3] == ["Not yet: the check failed", "Passed", "Not attempted"]
