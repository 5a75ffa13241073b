"""Where the course lives is said once (pyproject.toml), and every link is generated from it
(``attnlab_course.release``): the generated parts are current, no other file names the repository, and a release to
a fake fork, in a copy of the repository, moves every link."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from attnlab_course import colab, release
from test_environment import ROOT, tomllib

GENERATOR = Path("src/attnlab_course/release.py")  # the one module that spells the links out
OWNER, NAME = "a-course-fork", "attn-course"  # never written together here: the copy of this file must not name it
FORK = (f"https://github.com/{OWNER}/{NAME}", "v0.3.0", "spring-2027")
# a link to the course in any of its forms: Binder, Colab, a pip requirement, an nbgitpuller query
LINK = re.compile(r"mybinder\.org/v2/gh/[^\s)\"'<]+|colab\.research\.google\.com/github/[^\s)\"'<]+"
                  r"|git\+https://[^\s\"'<]+|git-pull\?[^\s)\"'<`]+")


def tracked_files(root: Path) -> list[Path]:
    """The repository's files, committed or not, that git does not ignore."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         capture_output=True, text=True, check=True).stdout
    return [Path(root) / name for name in sorted(set(out.split("\0"))) if name and (Path(root) / name).is_file()]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def _without_generated_parts(path: Path, text: str, root: Path) -> str:
    """What of a file is written by hand: the generated blocks, the Colab cells and the lines release writes removed."""
    rel = path.relative_to(root)
    if path.suffix == ".md":
        return release.BLOCK.sub("", text)
    if path.suffix == ".ipynb":
        nb = json.loads(text)
        nb["cells"] = [c for c in nb["cells"] if not colab.is_colab_cell(c)]
        return json.dumps(nb)
    if rel in (Path("pyproject.toml"), Path("course/pyproject.toml")):
        return re.sub(r'(?m)^Repository = ".*"$', "", text)
    return text


def hand_written_mentions(root: Path, where: release.Release, files: list[Path] | None = None) -> dict[str, list[str]]:
    """Each file that names the course's repository outside the one place and the generated parts, with what it says."""
    owner, name = where.slug.split("/")
    patterns = re.compile("|".join([re.escape(where.repository), re.escape(f"github.com/{where.slug}"),
                                    re.escape(f"github.com%2F{owner}%2F{name}"), rf"\b{re.escape(where.slug)}\b"]),
                          re.I)
    found = {}
    for path in tracked_files(root) if files is None else files:
        text = _text(path)
        if text is None or path.relative_to(root) == GENERATOR:
            continue
        hits = patterns.findall(_without_generated_parts(path, text, root))
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def links(root: Path, where: release.Release) -> dict[str, list[str]]:
    """Every link to the course at ``where``, file by file (generated parts included)."""
    found = {}
    for path in tracked_files(root):
        text = _text(path)
        if text is None or path.relative_to(root) == GENERATOR:
            continue
        hits = [link for link in LINK.findall(text) if where.slug in urllib.parse.unquote(link)]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


# ------------------------------------------------------------------------------------------------------- this checkout


def test_everything_generated_is_up_to_date():
    stale = release.generate(ROOT, check=True)
    assert stale == [], f"out of date: {stale}; run python -m attnlab_course.release (make learner does)"
    assert release.main(["--check"]) == 0


def test_no_other_file_names_the_repository():
    found = hand_written_mentions(ROOT, release.current())
    assert found == {}, ("these files name the repository by hand; generate the link instead (a block "
                         f"<!-- generated: NAME --> in Markdown, see attnlab_course.release): {found}")


def test_the_one_place_is_pyproject_toml():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    now = release.current()
    assert (now.repository, now.version, now.branch) == (
        data["project"]["urls"]["Repository"], data["project"]["version"], data["tool"]["attnlab"]["release"]["branch"])
    course = tomllib.loads((ROOT / "course" / "pyproject.toml").read_text())["project"]
    assert course["version"] == now.version and f"attnlab=={now.version}" in course["dependencies"]
    assert course["urls"]["Repository"] == now.repository
    import attnlab

    assert attnlab.__version__ == now.version


def test_the_readme_and_setup_page_carry_every_way_in():
    now = release.current()
    readme = (ROOT / "README.md").read_text()
    setup = (ROOT / "docs" / "setup.md").read_text()
    assert now.binder() in readme and now.colab() in readme and f'pip install "{now.requirement()}"' in readme
    assert now.binder() in setup and now.nbgitpuller() in setup
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert now.colab(f"notebooks/{notebook.name}") in setup
    assert f'"{now.requirement("course")}" -c requirements.lock' in setup
    assert now.requirement(subdirectory="course", distribution="attnlab-course") in setup
    assert colab.requirement() == now.requirement()


def test_the_links_follow_each_service_format():
    r = release.Release(*FORK[:1], FORK[2], FORK[1][1:])
    assert r.slug == f"{OWNER}/{NAME}" and r.name == NAME and r.tag == "v0.3.0"
    assert r.binder() == (f"https://mybinder.org/v2/gh/{OWNER}/{NAME}/spring-2027"
                          "?urlpath=lab/tree/notebooks/00_start_here.ipynb")
    assert r.colab("notebooks/02_masks.ipynb") == (f"https://colab.research.google.com/github/{OWNER}/{NAME}"
                                                   "/blob/v0.3.0/notebooks/02_masks.ipynb")
    query = urllib.parse.urlsplit(r.nbgitpuller()).query
    assert urllib.parse.parse_qs(query) == {"repo": [FORK[0]], "branch": ["spring-2027"],
                                            "urlpath": [f"lab/tree/{NAME}/notebooks/00_start_here.ipynb"]}
    assert "/" not in query and ":" not in query, "every reserved character of the query is percent-encoded"
    assert r.requirement("course") == f"attnlab[course] @ git+https://github.com/{OWNER}/{NAME}@v0.3.0"
    assert r.requirement(subdirectory="course", distribution="attnlab-course").endswith("@v0.3.0#subdirectory=course")


def test_the_readmes_times_are_the_notebooks_estimates():
    text = "| notebook | you will learn | time |\n|---|---|---:|\n| `02_masks` | masks | 7 min |\n\nafter\n"
    fixed = release.readme_times(text)
    header = nbformat.read(ROOT / "notebooks" / "solutions" / "02_masks.ipynb", as_version=4).cells[0].source
    minutes = int(re.search(r"\*\*Time\*\*: about (\d+) minutes", header)[1])
    assert fixed == text.replace("7 min", f"{minutes} min")


@pytest.mark.parametrize("bad, message", [
    (["--repository", "https://gitlab.com/o/r"], "https://github.com/OWNER/NAME"),
    (["--tag", "0.2.0"], "v<version>"),
    (["--tag", "v0.2.0; rm"], "v<version>"),
    (["--branch", "a b"], "branch"),
])
def test_a_release_refuses_what_no_link_can_use(bad, message, tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    assert release.main(bad + ["--root", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert (tmp_path / "pyproject.toml").read_text() == (ROOT / "pyproject.toml").read_text(), "nothing written"


def test_an_unknown_block_is_an_error():
    with pytest.raises(ValueError, match="unknown generated block 'badge'"):
        release.render_blocks("<!-- generated: badge -->\n<!-- end generated -->\n", release.current())


# ------------------------------------------------------------------------------------------------------- a fake fork


@pytest.fixture(scope="module")
def forked(tmp_path_factory):
    """A copy of the repository (its tracked files), released to a fake fork with ``make release``'s command."""
    copy = tmp_path_factory.mktemp("fork") / "checkout"
    for path in tracked_files(ROOT):
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)  # so that tracked_files lists the copy's files
    before = links(copy, release.current(copy))
    repository, tag, branch = FORK
    assert release.main(["--root", str(copy), "--repository", repository, "--tag", tag, "--branch", branch]) == 0
    return copy, before


def test_a_release_to_a_fork_changes_every_link(forked):
    copy, before = forked
    old, new = release.current(), release.current(copy)
    after = links(copy, new)
    assert (new.repository, new.tag, new.branch) == FORK
    assert {"README.md", "docs/setup.md", *(str(p.relative_to(copy)) for p in release.notebooks(copy))} <= set(before)
    assert set(after) == set(before), "the same files hold links"
    old_slug = old.slug.replace("/", "%2F")
    for path, found in after.items():
        assert len(found) == len(before[path]), f"{path}: {before[path]} became {found}"
        for link in found:
            decoded = urllib.parse.unquote(link)
            assert new.slug in decoded, f"{path}: {link} does not name the fork"
            assert old.slug not in decoded and old_slug not in link, f"{path}: {link} still names {old.slug}"
            if "colab.research" in link or "git+" in link:
                assert f"/blob/{new.tag}/" in link or f"@{new.tag}" in link, f"{path}: {link} is not at {new.tag}"
            else:
                assert new.branch in decoded, f"{path}: {link} is not on {new.branch}"
    for path in release.notebooks(copy):
        assert colab.is_up_to_date(nbformat.read(path, as_version=4), colab.cell_source(new.requirement())), path
    from attnlab_course import authoring

    solutions = authoring.solution_notebooks(copy / "notebooks" / "solutions")
    assert authoring.stale_learner_notebooks(solutions) == [], "the learner notebooks are what make learner writes"


def test_after_a_release_the_fork_names_itself_only_in_the_one_place(forked):
    copy, _ = forked
    new = release.current(copy)
    assert release.generate(copy, check=True) == []
    assert hand_written_mentions(copy, new) == {}
    course = tomllib.loads((copy / "course" / "pyproject.toml").read_text())["project"]
    assert course["version"] == "0.3.0" and "attnlab==0.3.0" in course["dependencies"]
    assert course["urls"]["Repository"] == FORK[0]
    assert '__version__ = "0.3.0"' in (copy / "src" / "attnlab" / "__init__.py").read_text()
    old = release.current()
    for path in tracked_files(copy):
        text = _text(path)
        if text is None or path.relative_to(copy) == GENERATOR:
            continue
        assert old.repository not in text and old.slug not in text, f"{path} still names {old.repository}"


def test_a_planted_hand_written_link_is_found(forked, tmp_path):
    copy, _ = forked
    new = release.current(copy)
    planted = copy / "docs" / "planted.md"
    planted.write_text(f"# A page\n\nInstall it: `pip install git+{new.repository}`\n")
    try:
        assert set(hand_written_mentions(copy, new, [planted, copy / "README.md", copy / "docs" / "setup.md"])) == {
            "docs/planted.md"}
    finally:
        planted.unlink()
