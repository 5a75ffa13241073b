"""Where the course lives, said once: every badge, Colab cell, nbgitpuller link and install line is generated from it.

    python -m attnlab_course.release                      # regenerate everything from pyproject.toml (make learner)
    python -m attnlab_course.release --check              # exit 1 if something is out of date
    python -m attnlab_course.release --repository https://github.com/OWNER/NAME --tag v0.2.0 [--branch main]
    make release REPO=https://github.com/OWNER/NAME TAG=v0.2.0 [BRANCH=main]       # the same

The one place is ``pyproject.toml``: ``[project.urls] Repository`` (the repository, on GitHub), ``[project] version``
(the release tag is ``v<version>``) and ``[tool.attnlab.release] branch`` (the branch Binder and nbgitpuller
serve). With ``--repository``, ``--tag`` or ``--branch`` they are changed there first, and the version follows the
tag into ``course/pyproject.toml`` (its version, its ``attnlab==`` requirement and its Repository) and
``attnlab.__version__``. Then everything derived from them is rewritten:

* the Colab set-up cell of every notebook (:mod:`attnlab_course.colab`), learner and solution notebooks alike;
* every generated block of ``README.md`` and ``docs/*.md``: the lines between ``<!-- generated: NAME -->`` and
  ``<!-- end generated -->`` are the output of ``BLOCKS[NAME]`` (badges, Colab links, the nbgitpuller link, install
  lines), and are never edited by hand;
* the "time" column of the README's table of notebooks, from each notebook's estimated time
  (:func:`attnlab_course.timing.total_minutes`, the same figure as the notebook's header).

No other file may name the repository: ``tests/test_release.py`` fails when one does, and performs a release to a
fake fork in a copy of the repository to check that every link moves with it.
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

from . import paths

BEGIN, END = "<!-- generated: {name} -->", "<!-- end generated -->"
BLOCK = re.compile(r"^<!-- generated: (?P<name>[\w-]+) -->\n(?P<body>.*?)^<!-- end generated -->$", re.M | re.S)
GITHUB = re.compile(r"^https://github\.com/(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)/(?P<name>[A-Za-z0-9._-]+?)(?:\.git)?/?$")
TAG = re.compile(r"^v(?P<version>\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?)$")
BRANCH = re.compile(r"^[A-Za-z0-9._/-]+$")
FIRST_NOTEBOOK = "notebooks/00_start_here.ipynb"


@dataclass(frozen=True)
class Release:
    """Where the course lives: its GitHub repository, the branch it serves and the release (tag ``v<version>``)."""

    repository: str  # https://github.com/OWNER/NAME
    branch: str
    version: str

    def __post_init__(self):
        if not GITHUB.match(self.repository):
            raise ValueError(f"the repository must be https://github.com/OWNER/NAME (Binder and Colab open GitHub "
                             f"repositories), got {self.repository!r}")
        if not BRANCH.match(self.branch):
            raise ValueError(f"expected a git branch name, got {self.branch!r}")
        if not TAG.match(f"v{self.version}"):
            raise ValueError(f"expected a version such as 0.2.0, got {self.version!r}")

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @property
    def slug(self) -> str:
        """``OWNER/NAME``."""
        match = GITHUB.match(self.repository)
        return f"{match['owner']}/{match['name']}"

    @property
    def name(self) -> str:
        """The repository's name, which is also the folder a clone (and nbgitpuller) makes."""
        return self.slug.split("/")[1]

    def requirement(self, extra: str = "", subdirectory: str = "", distribution: str = "attnlab") -> str:
        """A pip requirement for this release, e.g. ``attnlab @ git+https://github.com/o/r@v0.1.0``."""
        url = f"git+{self.repository}@{self.tag}" + (f"#subdirectory={subdirectory}" if subdirectory else "")
        return f"{distribution}{f'[{extra}]' if extra else ''} @ {url}"

    def binder(self, notebook: str = FIRST_NOTEBOOK) -> str:
        return f"https://mybinder.org/v2/gh/{self.slug}/{self.branch}?urlpath=lab/tree/{notebook}"

    def colab(self, notebook: str = FIRST_NOTEBOOK) -> str:
        return f"https://colab.research.google.com/github/{self.slug}/blob/{self.tag}/{notebook}"

    def nbgitpuller(self, hub: str = "https://HUB.EXAMPLE.EDU", notebook: str = FIRST_NOTEBOOK) -> str:
        query = urllib.parse.urlencode({"repo": self.repository, "branch": self.branch,
                                        "urlpath": f"lab/tree/{self.name}/{notebook}"},
                                       quote_via=urllib.parse.quote, safe="")
        return f"{hub}/hub/user-redirect/git-pull?{query}"


# ------------------------------------------------------------------------------------------------ reading and writing


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        from pip._vendor import tomli as tomllib
    return tomllib.loads(Path(path).read_text(encoding="utf-8"))


def current(root: Path = paths.ROOT) -> Release:
    """The release that ``root/pyproject.toml`` describes."""
    data = _toml(Path(root) / "pyproject.toml")
    branch = data.get("tool", {}).get("attnlab", {}).get("release", {}).get("branch", "main")
    return Release(data["project"]["urls"]["Repository"], branch, data["project"]["version"])


def _sub_once(pattern: str, new: str, text: str, where: str) -> str:
    """``text`` with the one match of ``pattern`` (group ``value``) replaced by ``new``; an error if not exactly one."""
    matches = list(re.finditer(pattern, text, re.M))
    if len(matches) != 1:
        raise ValueError(f"{where}: expected one match of {pattern!r}, found {len(matches)}")
    m = matches[0]
    return text[:m.start("value")] + new + text[m.end("value"):]


def _set_project(root: Path, release: Release, check: bool = False) -> list[Path]:
    """Write ``release`` into the one place (pyproject.toml) and the version and repository into the files that
    repeat them (with ``check``, only list the files that differ)."""
    root = Path(root)
    edits = {
        root / "pyproject.toml": [
            (r'^version = "(?P<value>[^"]*)"', release.version),
            (r'^Repository = "(?P<value>[^"]*)"', release.repository),
            (r'^\[tool\.attnlab\.release\]\nbranch = "(?P<value>[^"]*)"', release.branch),
        ],
        root / "course" / "pyproject.toml": [
            (r'^version = "(?P<value>[^"]*)"', release.version),
            (r'"attnlab==(?P<value>[^"]*)"', release.version),
            (r'^Repository = "(?P<value>[^"]*)"', release.repository),
        ],
        root / "src" / "attnlab" / "__init__.py": [(r'^__version__ = "(?P<value>[^"]*)"', release.version)],
    }
    changed = []
    for path, subs in edits.items():
        text = old = path.read_text(encoding="utf-8")
        for pattern, value in subs:
            text = _sub_once(pattern, value, text, str(path))
        if text != old:
            changed.append(path)
            if not check:
                path.write_text(text, encoding="utf-8")
    return changed


# ------------------------------------------------------------------------------------------------ the generated text


def _code(*lines: str, lang: str = "") -> str:
    return f"```{lang}\n" + "\n".join(lines) + "\n```\n"


def _notebooks(root: Path) -> list[str]:
    return [f"notebooks/{p.name}" for p in sorted((Path(root) / "notebooks").glob("[0-9][0-9]_*.ipynb"))]


BLOCKS = {
    # the README's two badges: Binder opens the branch, Colab the release
    "badges": lambda r, root: (
        f"[![Binder](https://mybinder.org/badge_logo.svg)]({r.binder()})\n"
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({r.colab()})\n"),
    # each learner notebook at the release, on Colab
    "colab-links": lambda r, root: "".join(
        f"- [{Path(nb).stem}]({r.colab(nb)})\n" for nb in _notebooks(root)),
    "binder-link": lambda r, root: f"[The course on Binder]({r.binder()})\n",
    "hub-link": lambda r, root: _code(r.nbgitpuller()),
    "hub-install": lambda r, root: _code(f'pip install nbgitpuller "{r.requirement("course")}" -c requirements.lock',
                                         lang="bash"),
    "pip-install": lambda r, root: _code(f'pip install "{r.requirement()}"', lang="bash"),
    "course-install": lambda r, root: _code(
        f'pip install "{r.requirement(subdirectory="course", distribution="attnlab-course")}"', lang="bash"),
    "where": lambda r, root: (
        "| | this checkout |\n|---|---|\n"
        f"| repository | {r.repository} |\n| branch (Binder, nbgitpuller) | `{r.branch}` |\n"
        f"| release tag (Colab, pip) | `{r.tag}` |\n"),
}


def render_blocks(text: str, release: Release, root: Path = paths.ROOT, where: str = "") -> str:
    """``text`` with every generated block's body replaced by what ``BLOCKS`` makes of ``release``."""
    def body(match):
        name = match["name"]
        if name not in BLOCKS:
            raise ValueError(f"{where}: unknown generated block {name!r}; known: {', '.join(BLOCKS)}")
        return f"{BEGIN.format(name=name)}\n{BLOCKS[name](release, root)}{END}"

    return BLOCK.sub(body, text)


TIME_ROW = re.compile(r"^(\|[ \t]*`(?P<stem>\d\d_\w+)`[ \t]*\|.*\|[ \t]*)(?P<minutes>\d+ min)([ \t]*\|)[ \t]*$", re.M)


def readme_times(text: str, root: Path = paths.ROOT) -> str:
    """The README's notebook table with each notebook's estimated minutes (the notebook header's total)."""
    import nbformat

    from . import timing

    def row(match):
        stem = match["stem"]
        source = next((p for p in (Path(root) / "notebooks" / "solutions" / f"{stem}.ipynb",
                                   Path(root) / "notebooks" / f"{stem}.ipynb") if p.exists()), None)
        if source is None:
            return match[0]
        minutes = timing.total_minutes(nbformat.read(source, as_version=4))
        return f"{match[1]}{minutes} min{match[4]}"

    return TIME_ROW.sub(row, text)


def documents(root: Path = paths.ROOT) -> list[Path]:
    """The Markdown files that may hold generated blocks: README.md and docs/*.md."""
    root = Path(root)
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def notebooks(root: Path = paths.ROOT) -> list[Path]:
    """Every notebook that carries the Colab cell: the solution notebooks and all learner notebooks."""
    root = Path(root)
    return [*paths.solution_notebooks(root / "notebooks" / "solutions"),
            *paths.solution_notebooks(root / "notebooks")]


def generate(root: Path = paths.ROOT, check: bool = False) -> list[Path]:
    """Rewrite (or, with ``check``, only list) every file whose generated part is out of date."""
    from . import colab

    root = Path(root)
    release = current(root)
    stale = _set_project(root, release, check)  # course/pyproject.toml and attnlab.__version__ follow pyproject.toml
    for path in documents(root):
        old = path.read_text(encoding="utf-8")
        new = render_blocks(old, release, root, str(path))
        if path.name == "README.md":
            new = readme_times(new, root)
        if new != old:
            stale.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    source = colab.cell_source(release.requirement())
    if check:
        import nbformat

        stale += [p for p in notebooks(root) if not colab.is_up_to_date(nbformat.read(p, as_version=4), source)]
    else:
        stale += colab.write(notebooks(root), source)
    return stale


def release(root: Path = paths.ROOT, repository: str | None = None, tag: str | None = None,
            branch: str | None = None) -> list[Path]:
    """Set the repository, tag and branch in pyproject.toml (and the version where it is repeated), then
    :func:`generate`; return the files changed."""
    now = current(root)
    version = now.version
    if tag is not None:
        match = TAG.match(tag)
        if not match:
            raise ValueError(f"expected a release tag v<version>, such as v0.2.0, got {tag!r}")
        version = match["version"]
    new = replace(now, repository=(repository or now.repository).rstrip("/").removesuffix(".git"),
                  branch=branch or now.branch, version=version)
    return sorted(set(_set_project(root, new) + generate(root)))  # pyproject.toml first: generate reads it


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab_course.release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", help="the course's GitHub repository, https://github.com/OWNER/NAME")
    parser.add_argument("--tag", help="the release tag, v<version> (sets the version)")
    parser.add_argument("--branch", help="the branch Binder and nbgitpuller serve")
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated link, cell or time is stale")
    parser.add_argument("--root", type=Path, default=paths.ROOT, help=argparse.SUPPRESS)  # the tests' copies
    args = parser.parse_args(argv)
    try:
        if args.check:
            if args.repository or args.tag or args.branch:
                parser.error("--check takes no --repository, --tag or --branch")
            stale = generate(args.root, check=True)
            for path in stale:
                print(f"{path}: out of date (python -m attnlab_course.release)", file=sys.stderr)
            return 1 if stale else 0
        changed = release(args.root, args.repository, args.tag, args.branch)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    now = current(args.root)
    for path in changed:
        print(f"rewrote {path.relative_to(args.root)}")
    print(f"{len(changed)} files changed. The course lives at {now.repository} (branch {now.branch}, release "
          f"{now.tag}). The badges, Colab cells and install lines work once that repository is public and the tag "
          f"{now.tag} is pushed: commit, then git tag {now.tag} && git push origin {now.branch} {now.tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
