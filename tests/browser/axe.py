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


def audit(page, cache: Path = CACHE, within: str | None = None) -> list[dict]:
    """The WCAG 2.1 A/AA violations on ``page`` as it is now (only inside the elements that match the CSS selector
    ``within``, if given): ``{"id", "impact", "nodes": [target, ...], "help"}``."""
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(content=source(cache))
    result = page.evaluate(
        """([within, options]) => axe.run(within ? {include: [[within]]} : document, options)
            .then(r => r.violations.map(v => ({
              id: v.id, impact: v.impact, help: v.help,
              nodes: v.nodes.map(n => n.target.join(' ') + (n.failureSummary ? ' :: ' + n.failureSummary.split('\\n')
                  .slice(1, 2).join('').slice(0, 160) : ''))})))""",
        [within, {"runOnly": {"type": "tag", "values": TAGS},
         "rules": {rule: {"enabled": False} for rule in SKIPPED},
         "resultTypes": ["violations"],
         # no CSSOM preload: it fetches every stylesheet again by XMLHttpRequest, which file:// pages refuse (a console
         # error the suite counts); only css-orientation-lock needs it, and no page here locks its orientation
         "preload": False}])
    return result


def summary(violations: list[dict]) -> str:
    return "; ".join(f"{v['id']} ({v['impact']}, {len(v['nodes'])}): {v['nodes'][:3]}" for v in violations)
