"""Build the slide decks and the static site from the notebooks, offline.

Both use plain nbconvert (no Sphinx): the notebooks already carry their outputs, so a page is one ``HTMLExporter`` call
and a deck one ``SlidesExporter`` call on a copy that :mod:`.slideshow` gave slide structure. The browser libraries
come from pinned npm packages (:mod:`.assets`) into ``<out>/_static/``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from html import escape
from pathlib import Path

import nbformat
from traitlets.config import Config

from .. import paths
from . import assets
from .slideshow import SLIDE_HEIGHT, SLIDE_WIDTH, slides_notebook

ROOT = paths.ROOT
TEMPLATES = Path(__file__).with_name("templates")


@dataclass(frozen=True)
class CourseNotebook:
    """One notebook of the course: the file the pages are made from, and the learner and solution versions."""

    stem: str  # "02_masks"
    source: Path  # the solution notebook when there is one, else the learner notebook (00_start_here)
    learner: Path | None
    solution: Path | None

    @property
    def title(self) -> str:
        """The notebook's first heading, e.g. ``02 · Masks: who may attend to whom``."""
        nb = nbformat.read(self.source, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                match = re.search(r"^#\s+(.+)$", cell.source, re.MULTILINE)
                if match:
                    return match.group(1).strip()
        return self.stem


def course_notebooks(root: Path = ROOT) -> list[CourseNotebook]:
    """Every notebook of the course, in order: ``notebooks/NN_*.ipynb`` and ``notebooks/solutions/NN_*.ipynb``."""
    notebooks = Path(root) / "notebooks"
    stems = sorted({p.stem for p in notebooks.glob("[0-9][0-9]_*.ipynb")}
                   | {p.stem for p in (notebooks / "solutions").glob("[0-9][0-9]_*.ipynb")})
    out = []
    for stem in stems:
        learner, solution = notebooks / f"{stem}.ipynb", notebooks / "solutions" / f"{stem}.ipynb"
        learner, solution = (learner if learner.exists() else None), (solution if solution.exists() else None)
        out.append(CourseNotebook(stem, solution or learner, learner, solution))
    return out


def _config(template: str) -> Config:
    c = Config()
    c.TemplateExporter.extra_template_basedirs = [str(TEMPLATES)]
    c.TemplateExporter.extra_template_paths = [str(TEMPLATES / "common")]
    c.TemplateExporter.template_name = template
    c.TemplateExporter.exclude_input_prompt = True
    c.TemplateExporter.exclude_output_prompt = True
    c.HTMLExporter.mathjax_url = assets.MATHJAX
    c.HTMLExporter.require_js_url = assets.REQUIRE
    c.HTMLExporter.widget_renderer_url = assets.WIDGETS
    c.HTMLExporter.jupyter_widgets_base_url = "_static/"  # never used: widget_renderer_url is set
    c.HTMLExporter.embed_images = True
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_input_tags = {"remove_input"}
    return c


def _cache(out: Path) -> Path:
    return Path(out).parent / ".cache" / "npm"


def build_slides(out: Path, root: Path = ROOT, cache: Path | None = None) -> dict:
    """One reveal.js deck per notebook into ``out`` (``out/NN_topic.html``) and an index; returns what was built."""
    from nbconvert import SlidesExporter

    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # explorers show their pictures on slides: no widget renderer needed
    assets.install(out / "_static", cache or _cache(out), skip=("@jupyter-widgets/html-manager",))
    c = _config("attnlab-slides")
    c.SlidesExporter.reveal_url_prefix = assets.REVEAL
    c.SlidesExporter.reveal_theme = "white"
    c.SlidesExporter.reveal_transition = "none"
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.reveal_width, c.SlidesExporter.reveal_height = str(SLIDE_WIDTH), str(SLIDE_HEIGHT)
    exporter = SlidesExporter(config=c)
    decks = {}
    for item in course_notebooks(root):
        nb = slides_notebook(nbformat.read(item.source, as_version=4))
        nb.metadata.pop("widgets", None)
        html, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": item.title}})
        path = out / f"{item.stem}.html"
        path.write_text(html, encoding="utf-8")
        decks[item.stem] = {"title": item.title, "bytes": path.stat().st_size,
                            "slides": sum(1 for c in nb.cells if c.metadata.slideshow["slide_type"] == "slide"),
                            "subslides": sum(1 for c in nb.cells if c.metadata.slideshow["slide_type"] == "subslide")}
    links = "\n".join(f'<li><a href="{s}.html">{escape(d["title"])}</a></li>' for s, d in decks.items())
    (out / "index.html").write_text(_page("Attention from Scratch: slides", f"<h1>Slides</h1>\n<ul>\n{links}\n</ul>\n"
                                          "<p>Keys: arrows to move, <kbd>s</kbd> for the speaker notes, <kbd>f</kbd> "
                                          "for full screen, <kbd>Esc</kbd> for the overview.</p>"), encoding="utf-8")
    static = sum(p.stat().st_size for p in (out / "_static").rglob("*") if p.is_file())
    return {"seconds": round(time.perf_counter() - start, 1), "decks": decks, "static_bytes": static}


def _page(title: str, body: str, css: str = "", head: str = "", nav: str = "") -> str:
    """A plain HTML page in the site's style (system fonts, no scripts): ``nav`` above, ``body`` in ``<main>``; dark
    when the reader's system asks for it; links underlined and at 4.5:1 or more in both."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1.0">\n<title>{escape(title)}</title>\n'
            f"<style>\nbody {{ max-width: 1000px; margin: 0 auto; padding: 0 16px 40px; line-height: 1.5;\n"
            f'  font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; color: #222; background: #fff; }}\n'
            f"a {{ color: #1a5fb4; }} code {{ font-family: \"DejaVu Sans Mono\", monospace; background: #f3f3f3; "
            f"padding: 0 3px; }}\n:root {{ color-scheme: light dark; }}\n"
            f"@media (prefers-color-scheme: dark) {{ body {{ color: #e8e8e8; background: #121212; }} "
            f"a {{ color: #8cb4ff; }} code {{ background: #2a2a2a; }} td, th {{ border-color: #555 !important; }} }}\n"
            f"table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; "
            f"padding: 4px 8px; text-align: left; vertical-align: top; }}\n"
            f"nav.attnlab-nav {{ display: flex; flex-wrap: wrap; gap: 0.4em 1.4em; padding: 10px 0; "
            f"border-bottom: 1px solid #ddd; }}\nnav.attnlab-nav a {{ text-decoration: none; }}\n"
            f"nav.attnlab-nav .spacer {{ flex: 1; }}\n"
            f"a.anchor-link {{ visibility: hidden; margin-left: 0.3em; text-decoration: none; }}\n"
            f":hover > a.anchor-link {{ visibility: visible; }}\n{css}</style>\n{head}\n"
            f"</head>\n<body>\n{nav}{chr(10) if nav else ''}<main>\n{body}\n</main>\n</body>\n</html>\n")


EXPLORER_NOTE = ("*A static copy of an explorer: the controls show their stored state and do nothing here. Run the "
                 "notebook in JupyterLab (`make lab`) to move them.*")


def _nav(pages: list[tuple[str, str]], index: int | None, item: CourseNotebook | None, where: str) -> str:
    """The navigation bar: home, previous and next notebook, downloads, the guide."""
    links = ['<a href="index.html">Course home</a>']
    if index is not None:
        if index > 0:
            links.append(f'<a href="{pages[index - 1][0]}.html" rel="prev">&larr; {escape(pages[index - 1][1])}</a>')
        if index + 1 < len(pages):
            links.append(f'<a href="{pages[index + 1][0]}.html" rel="next">{escape(pages[index + 1][1])} &rarr;</a>')
    links.append('<span class="spacer"></span>')
    if item is not None:
        if item.learner:
            links.append(f'<a href="notebooks/{item.stem}.ipynb" download>learner notebook (.ipynb)</a>')
        if item.solution:
            links.append(f'<a href="notebooks/solutions/{item.stem}.ipynb" download>solution notebook (.ipynb)</a>')
    links.append('<a href="instructor-guide.html">Instructor guide</a>')
    label = "Course pages" if where == "top" else "Course pages (bottom)"  # two nav landmarks, each named
    return f'<nav class="attnlab-nav {where}" aria-label="{label}">' + " ".join(links) + "</nav>"


def _course_map(readme: str, pages: dict[str, str]) -> str:
    """The README's course table as HTML, each notebook linked to its page (notebooks missing from it appended)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    rows = [line for line in readme.split("\n") if line.startswith("|")]
    start = next((i for i, line in enumerate(rows) if line.replace(" ", "").startswith("|notebook|")), None)
    table, seen = [], set()
    if start is not None:
        table = rows[start:start + 2]
        for line in rows[start + 2:]:
            match = re.match(r"\|\s*`?(\d\d_\w+)`?\s*\|", line)
            if not match:
                break
            seen.add(match.group(1))
            table.append(line)
    else:
        table = ["| notebook | you will learn |", "|---|---|"]
    table += [f"| `{stem}` | {title} |" for stem, title in pages.items() if stem not in seen]
    html = markdown2html_mistune("\n".join(table))
    for stem in pages:
        html = html.replace(f"<code>{stem}</code>", f'<a href="{stem}.html"><code>{stem}</code></a>')
    return html


MD_LINK = re.compile(r"\]\((?:\.\./)?(?:docs/)?(?P<stem>[\w-]+)\.md(?P<fragment>#[^)]*)?\)")


def docs_pages(root: Path = ROOT) -> list[tuple[str, str, Path]]:
    """The pages of ``docs/`` the site includes, as ``(stem, title, path)``: every ``docs/*.md`` but the instructor
    guide, which the site renders from its source (:mod:`.guide`)."""
    out = []
    for path in sorted((Path(root) / "docs").glob("*.md")):
        if path.name == "instructor-guide.md":
            continue
        match = re.search(r"^#\s+(.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
        out.append((path.stem, match.group(1).replace("`", "").strip() if match else path.stem, path))
    return out


def _site_links(markdown: str, root: Path = ROOT) -> str:
    """Links between the README and the docs pages, made links between their pages on the site."""
    def link(match):
        stem = match["stem"]
        if stem == "README":
            return "](index.html)"
        if (Path(root) / "docs" / f"{stem}.md").exists():
            return f"]({stem}.html{match['fragment'] or ''})"
        return match[0]

    return MD_LINK.sub(link, markdown)


def _site_notebook(item: CourseNotebook):
    nb = nbformat.read(item.source, as_version=4)
    from .slideshow import NBVAL, explorer_controls, fold_details

    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type == "markdown":
            # a link to another notebook of the course goes to its page
            cell.source = re.sub(r"\]\((?:\.\./)?(\d\d_\w+)\.ipynb(#[^)]*)?\)", r"](\1.html\2)", fold_details(cell.source))
        if cell.cell_type == "code":
            cell.source = NBVAL.sub("", cell.source).strip("\n")
            if explorer_controls(cell.source):
                cells.append(nbformat.v4.new_markdown_cell(EXPLORER_NOTE))
    nb.cells = cells
    for n, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{n}"
    _drop_stored_scripts(nb)
    return nb


def _drop_stored_scripts(nb) -> None:
    """Leave the scripts out of the explorers' stored outputs (widget state): the one an explorer shows beside its
    picture names its slider handles in JupyterLab, which this page's own script does here, and a static page shows
    a script output as "JavaScript output is disabled"."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for model in state.values():
        outputs = model.get("state", {}).get("outputs")
        if model.get("model_name") == "OutputModel" and outputs:
            model["state"]["outputs"] = [o for o in outputs if "application/javascript" not in o.get("data", {})]


def build_site(out: Path, root: Path = ROOT, cache: Path | None = None) -> dict:
    """Every notebook as a page, a landing page with the course map, the instructor guide and the other pages of
    ``docs/``, the .ipynb downloads."""
    import shutil

    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from . import guide

    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    assets.install(out / "_static", cache or _cache(out))
    exporter = HTMLExporter(config=_config("attnlab-page"))
    items = course_notebooks(root)
    pages = [(item.stem, item.title) for item in items]
    built = {}
    for index, item in enumerate(items):
        resources = {"metadata": {"name": item.title},
                     "attnlab": {"nav_top": _nav(pages, index, item, "top"),
                                 "nav_bottom": _nav(pages, index, item, "bottom")}}
        html, _ = exporter.from_notebook_node(_site_notebook(item), resources=resources)
        (out / f"{item.stem}.html").write_text(html, encoding="utf-8")
        for source, target in ((item.learner, out / "notebooks" / f"{item.stem}.ipynb"),
                               (item.solution, out / "notebooks" / "solutions" / f"{item.stem}.ipynb")):
            if source:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
        built[item.stem] = (out / f"{item.stem}.html").stat().st_size

    mathjax = (exporter.environment.get_template("attnlab_head.j2").module.attnlab_head(
        {"mathjax_url": assets.MATHJAX, "require_js_url": assets.REQUIRE}))
    top_nav = _nav(pages, None, None, "top")  # of every page that is not a notebook's
    guide_html = markdown2html_mistune(_site_links(guide.render(root), root))
    (out / "instructor-guide.html").write_text(_page(
        "Attention from Scratch: instructor guide", guide_html, head=str(mathjax), nav=top_nav), encoding="utf-8")

    docs, docs_built = docs_pages(root), {}
    for stem, title, path in docs:  # the docs pages the README links to
        page_html = markdown2html_mistune(_site_links(path.read_text(encoding="utf-8"), root))
        (out / f"{stem}.html").write_text(_page(f"Attention from Scratch: {title}", page_html, nav=top_nav,
                                                css="pre { white-space: pre-wrap; overflow-wrap: anywhere; }\n"),
                                          encoding="utf-8")
        docs_built[stem] = (out / f"{stem}.html").stat().st_size

    readme = (Path(root) / "README.md").read_text(encoding="utf-8")
    intro = readme.split("\n## ")[0].split("\n", 1)[1].split("\n|")[0].strip()
    intro = "\n".join(line for line in intro.splitlines() if not line.startswith("[![")).strip()  # no badges offline
    body = ("<h1>Attention from Scratch</h1>\n" + markdown2html_mistune(intro)
            + "\n<h2>The course</h2>\n" + _course_map(readme, dict(pages))
            + "\n<p>Each page shows a notebook with its stored outputs, the reference solutions included; download "
              "the learner version (exercises left for you) or the solution version from the bar at its top. "
              "Explorers are live only in JupyterLab: run the course with <code>make lab</code>.</p>\n"
              '<p>For instructors: the <a href="instructor-guide.html">instructor guide</a> (goals, session plan, '
              "discussion prompts, the mistakes each exercise diagnoses, grading).</p>\n"
            + "<h2>More about the course</h2>\n<ul>\n"
            + "".join(f'<li><a href="{stem}.html">{escape(title)}</a></li>\n' for stem, title, _ in docs) + "</ul>")
    (out / "index.html").write_text(_page("Attention from Scratch", body, head=str(mathjax), nav=top_nav),
                                    encoding="utf-8")
    return {"seconds": round(time.perf_counter() - start, 1), "pages": built, "docs": docs_built}
