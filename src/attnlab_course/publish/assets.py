"""The browser-side libraries of the slides and the site, from pinned npm packages, copied next to the pages.

Nothing is loaded from a CDN: each package is fetched once with the ordinary client (``npm pack NAME@VERSION``, which
uses npm's own cache), checked against the sha512 integrity pinned here, and only the files the pages load are copied
into ``<out>/_static/``. Change a version by changing its line here and its integrity (``npm view NAME@VERSION
dist.integrity``).

=====================================  ========  =============================================================
package                                version   what the pages load
=====================================  ========  =============================================================
``reveal.js``                          5.2.1     the slide engine, its ``white`` theme (minus its one web font),
                                                 the speaker-notes plugin
``mathjax``                            3.2.2     ``tex-svg-full.js``: TeX to SVG paths, so no font files at all
``requirejs``                          2.3.8     the AMD loader that nbconvert's reveal template and the widget
                                                 renderer expect
``@jupyter-widgets/html-manager``      1.0.15    ``embed-amd.js``: renders the explorers' stored widget state
``axe-core``                           4.11.0    ``axe.min.js``, for the browser tests only (WCAG 2.1 A/AA audit)
=====================================  ========  =============================================================
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # npm's dist.integrity: "sha512-" + base64 of the tarball's SHA-512
    files: tuple[str, ...]  # paths inside the package to copy (a trailing "/" copies a folder)
    into: str  # folder under _static/

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


PACKAGES = (
    Package("reveal.js", "5.2.1",
            "sha512-r7//6mIM5p34hFiDMvYfXgyjXqGRta+/psd9YtytsgRlrpRzFv4RbH76TXd2qD+7ZPZEbpBDhdRhJaFgfQ7zNQ==",
            ("dist/reveal.js", "dist/reveal.css", "dist/reset.css", "dist/theme/white.css", "plugin/notes/"),
            "reveal.js"),
    Package("mathjax", "3.2.2",
            "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
            ("es5/tex-svg-full.js",), "mathjax"),
    Package("requirejs", "2.3.8",
            "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
            ("require.js",), "requirejs"),
    Package("@jupyter-widgets/html-manager", "1.0.15",
            "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
            ("dist/embed-amd.js",), "html-manager"),
)

AXE = Package("axe-core", "4.11.0",
              "sha512-ilYanEU8vxxBexpJd8cWM4ElSQq4QctCLKih0TSfjIfCQTeyH/6zVrmIJfLPrKTKJRbiG+cfnZbQIjAlJmF1jQ==",
              ("axe.min.js",), "axe-core")
"""The accessibility engine of the browser tests (tests/browser/test_accessibility.py): fetched and checked like the
others, never copied into a page."""


def read(package: Package, path: str, cache: Path) -> str:
    """The text of one file of a package (fetched and checked as :func:`fetch` does)."""
    with tarfile.open(fetch(package, cache)) as tar:
        return tar.extractfile(f"package/{path}").read().decode("utf-8")


# URLs of the assets relative to a page in <out>/, as nbconvert's options want them
REVEAL = "_static/reveal.js"
MATHJAX = "_static/mathjax/es5/tex-svg-full.js"
REQUIRE = "_static/requirejs/require.js"
WIDGETS = "_static/html-manager/dist/embed-amd.js"

# the white theme's only import is its web font (Source Sans Pro); the pages use the system's sans-serif instead
_THEME_FONT_IMPORT = "@import url(./fonts/source-sans-pro/source-sans-pro.css);"


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode("ascii")


def fetch(package: Package, cache: Path) -> Path:
    """The package's tarball in ``cache``, fetched with ``npm pack`` if absent; raises if its integrity differs."""
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / (package.name.lstrip("@").replace("/", "-") + f"-{package.version}.tgz")
    if not tarball.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(f"npm is needed once to fetch {package.spec} (install Node.js), or put {tarball.name} "
                               f"in {cache}")
        out = subprocess.run([npm, "pack", package.spec, "--json", "--pack-destination", str(cache)],
                             check=True, capture_output=True, text=True, env={**os.environ, "NPM_CONFIG_FUND": "false"})
        packed = cache / json.loads(out.stdout)[0]["filename"]
        if packed != tarball:
            packed.replace(tarball)
    got = _integrity(tarball)
    if got != package.integrity:
        tarball.unlink()
        raise RuntimeError(f"{package.spec}: integrity {got} differs from the pinned {package.integrity}")
    return tarball


def install(static: Path, cache: Path, skip: tuple[str, ...] = ()) -> list[Path]:
    """Copy the files of every package (but those named in ``skip``) into ``static`` (``<out>/_static``); return the
    files there."""
    written = []
    for package in PACKAGES:
        if package.name in skip:
            shutil.rmtree(static / package.into, ignore_errors=True)
            continue
        target = static / package.into
        stamp = target / ".version"
        if stamp.exists() and stamp.read_text() == package.spec:
            written += [p for p in target.rglob("*") if p.is_file()]
            continue
        shutil.rmtree(target, ignore_errors=True)
        with tarfile.open(fetch(package, cache)) as tar:
            for member in tar.getmembers():
                rel = member.name.removeprefix("package/")
                if not member.isfile() or not any(rel == f or (f.endswith("/") and rel.startswith(f))
                                                  for f in package.files):
                    continue
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                data = tar.extractfile(member).read()
                if rel == "dist/theme/white.css":
                    data = data.replace(_THEME_FONT_IMPORT.encode(), b"")
                dest.write_bytes(data)
                written.append(dest)
        stamp.write_text(package.spec)
    return written
