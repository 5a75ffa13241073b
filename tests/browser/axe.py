"""axe-core (pinned and sha512-checked like the pages' own npm assets, ``attnlab_course.publish.assets.AXE``) run on
an open page, limited to the WCAG 2.1 A and AA rules.

``SKIPPED`` lists every rule the audit leaves out, with the reason; it is empty and should stay so.
"""

from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path

from attnlab_course.publish import assets
from attnlab_course.publish.build import ROOT

CACHE = ROOT / "build" / ".cache" / "npm"  # the npm tarballs, kept between runs (checked against their pins)
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
SKIPPED: dict[str, str] = {}  # rule id -> why it cannot apply here


@lru_cache(maxsize=1)
def source(cache: Path) -> str:
    return assets.read(assets.AXE, "axe.min.js", cache)


def available(cache: Path = CACHE) -> bool:
    """Whether axe-core can be had: npm fetches it once, then the checked tarball is kept in ``cache``."""
    return shutil.which("npm") is not None or any(cache.glob(f"*-{assets.AXE.version}.tgz"))


def audit(page, cache: Path = CACHE, within: str | None = None, *, only: str | None = None) -> list[dict]:
    """The WCAG 2.1 A/AA violations on ``page`` as it is now (only inside the elements that match the CSS selector
    ``within``, if given): ``{"id", "impact", "nodes": [target, ...], "help"}``. ``only`` runs that one rule."""
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(content=source(cache))
    run = {"type": "rule", "values": [only]} if only else {"type": "tag", "values": TAGS}
    result = page.evaluate(
        """([within, options]) => axe.run(within ? {include: [[within]]} : document, options)
            .then(r => r.violations.map(v => ({
              id: v.id, impact: v.impact, help: v.help,
              nodes: v.nodes.map(n => n.target.join(' ') + (n.failureSummary ? ' :: ' + n.failureSummary.split('\\n')
                  .slice(1, 2).join('').slice(0, 160) : ''))})))""",
        [within, {"runOnly": run,
         "rules": {rule: {"enabled": False} for rule in SKIPPED},
         "resultTypes": ["violations"],
         # no CSSOM preload: it fetches every stylesheet again by XMLHttpRequest, which file:// pages refuse (a console
         # error the suite counts); only css-orientation-lock needs it, and no page here locks its orientation
         "preload": False}])
    return result


# Code cells are thousands of highlighted tokens (5,700 on notebook 02's page) in about seven colours, and axe's
# colour-contrast rule measures each one: 80% of a page's audit. Tokens alike in everything that rule reads (their
# class, colour, font size and weight, opacity, text shadow, and the element and colour behind them) pass or fail
# alike, so one of each is kept as a token and the others become plain text of their block, whose own colour is
# then checked too. Only tokens with no attribute but their class are merged (Pygments writes nothing else), so no
# other rule can tell the difference, and they all run on the smaller page. The page is changed by this: the caller
# reloads it, or audits it last.
_ONE_TOKEN_EACH = """() => {
  const seen = new Set(); let merged = 0;
  for (const el of Array.from(document.querySelectorAll('pre span, code span'))) {
    if (el.children.length || el.attributes.length > 1 || (el.attributes.length && !el.hasAttribute('class'))) continue;
    const s = getComputedStyle(el);
    let back = el.parentElement, color = 'rgba(0, 0, 0, 0)';
    while (back && (color = getComputedStyle(back).backgroundColor) === 'rgba(0, 0, 0, 0)') back = back.parentElement;
    const key = [el.className, s.color, s.fontSize, s.fontWeight, s.opacity, s.textShadow, color,
                 back ? back.tagName + '.' + back.className : ''].join('|');
    if (seen.has(key)) { el.replaceWith(document.createTextNode(el.textContent)); merged++; } else seen.add(key);
  }
  return [seen.size, merged];
}"""


def audit_schemes(page, cache: Path = CACHE) -> dict[str, list[dict]]:
    """The WCAG 2.1 A/AA violations of ``page`` in light and in dark mode (``prefers-color-scheme``), by scheme.

    Every rule runs in light mode; in dark mode, colour contrast, the one rule that a colour scheme can change
    here (the pages change colours only, never content or structure, by scheme). Both run on the page with one code
    token of each kind (see ``_ONE_TOKEN_EACH``), so the page is left changed: reload it before looking at it again.
    """
    page.emulate_media(color_scheme="light")
    page.evaluate(_ONE_TOKEN_EACH)
    found = {"light": audit(page, cache)}
    page.emulate_media(color_scheme="dark")
    found["dark"] = audit(page, cache, only="color-contrast")
    page.emulate_media(color_scheme="light")
    return found


def summary(violations: list[dict]) -> str:
    return "; ".join(f"{v['id']} ({v['impact']}, {len(v['nodes'])}): {v['nodes'][:3]}" for v in violations)
