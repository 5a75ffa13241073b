"""Slide structure for a copy of a notebook, generated from its content (the committed notebooks are never changed).

The rules, in the order a reader meets them:

* the title (``# ...``) and every level-2 heading (``## ...``, a section of :func:`attnlab_course.timing.sections`)
  start a new slide, a horizontal step of the deck; the slide carries ``data-section`` with the section's title;
* a level-3 heading starts a subslide (a vertical step), and so does whatever no longer fits the slide's height:
  markdown cells are split into their paragraphs, lists and blocks, and each piece is measured (estimated) in pixels;
* a cell whose code is long and whose output is a figure becomes two subslides: the code, then the figure;
* an explorer shows its stored picture (the PNG beside its widget), with a speaker note to let the room predict;
* an exercise shows the learner's stub (``# your code here``); the reference solution goes to the speaker notes
  and the check cell is skipped; the header's time block goes to the notes;
* printed output longer than ``MAX_OUTPUT_LINES`` is cut, saying how many lines are left out;
* a list taller than a slide is split between its items onto as many subslides as it needs, and a paragraph taller
  than a slide gets smaller text (``attnlab-text-small``);
* the Colab set-up cell is skipped (it is set-up, not content);
* every code cell gets a font size (a ``attnlab-code-N`` tag, N in px) at which its longest line fits the slide.
"""

from __future__ import annotations

import ast
import copy
import math
import re

import nbformat

from ..authoring import cell_role, stub_solution
from ..colab import is_colab_cell
from ..timing import TIME_MARK

SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720
CONTENT_HEIGHT = 640  # px of content a slide may hold (title bar, margins and padding excluded)
TEXT_PX, TEXT_LINE = 26, 35  # prose font size and line height, as in slides.css
SMALL_TEXT_PX = 21  # the font of a block that would not fit at TEXT_PX
CHARS_PER_LINE = 96  # prose characters per line at TEXT_PX on a 1280 px slide
CODE_WIDTH = 1180  # px available to a line of code
CODE_SIZES = (20, 18, 17, 16, 15, 14, 13, 12)  # px; the largest at which the cell's code fits
MONO_EM = 0.602  # width of one monospace character in em (DejaVu Sans Mono)
LINE_EM = 1.3  # line height of code, as in slides.css
MAX_CODE_LINES = 34  # longer code is cut on the slide (the notebook has it all)
WRAP_CHARS = 130  # printed lines longer than this wrap on the slide instead of shrinking the font
LONG_CODE_LINES = 8  # code longer than this is shown apart from its figure
FIGURE_PX = 420  # height a figure is given when it shares a slide with its code
MAX_OUTPUT_LINES = 14
NBVAL = re.compile(r"^\s*#\s*NBVAL_\w+\s*\n?", re.MULTILINE)
WIDGET = "application/vnd.jupyter.widget-view+json"


_DETAILS = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.S)


def fold_details(source: str) -> str:
    """Render the markdown inside each ``<details>`` element to HTML, so that the answer stays folded.

    nbconvert's markdown renderer ends an HTML block at the first blank line and closes ``<details>`` there, which
    leaves the answer visible under its "Show answer" summary; JupyterLab folds it. One HTML block with no blank
    line keeps it folded everywhere.
    """
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    def render(match: re.Match) -> str:
        inner = markdown2html_mistune(match.group(2).strip())
        inner = re.sub(r"\n\s*\n", "\n", inner)
        return f"<details><summary>{match.group(1)}</summary>\n{inner.strip()}\n</details>"

    return _DETAILS.sub(render, source)


def code_size(lines: list[str], height_lines: int = 0) -> int:
    """The largest font size in ``CODE_SIZES`` at which the longest of ``lines`` fits ``CODE_WIDTH`` and
    ``height_lines`` lines fit ``CONTENT_HEIGHT`` (the smallest size when none does)."""
    longest = max((len(line.expandtabs()) for line in lines), default=0)
    return next((s for s in CODE_SIZES if (longest + 1) * s * MONO_EM <= CODE_WIDTH
                 and height_lines * s * LINE_EM <= CONTENT_HEIGHT - 40), CODE_SIZES[-1])


def markdown_blocks(source: str) -> list[str]:
    """Split markdown into blocks that can go on different slides: headings, paragraphs, whole lists, whole
    ``<details>`` elements, whole ``$$`` displays and fenced code."""
    blocks, current, depth, fence, math_open = [], [], 0, False, False
    for line in source.split("\n"):
        stripped = line.strip()
        if not current and not stripped:
            continue
        boundary = (not stripped and not depth and not fence and not math_open)
        starts_block = (stripped.startswith("#") and not depth and not fence and not math_open)
        if starts_block and current:
            blocks.append("\n".join(current).strip())
            current = []
        if boundary:
            blocks.append("\n".join(current).strip())
            current = []
            continue
        current.append(line)
        if stripped.startswith("```"):
            fence = not fence
        if not fence:
            depth += stripped.count("<details") - stripped.count("</details>")
            depth = max(depth, 0)
            if stripped.count("$$") % 2:
                math_open = not math_open
        if stripped.startswith("#") and not depth:
            blocks.append("\n".join(current).strip())
            current = []
    if current:
        blocks.append("\n".join(current).strip())
    return _join_lists([b for b in blocks if b])


def _is_list(block: str) -> bool:
    return bool(re.match(r"\s*([-*+]|\d+\.)\s", block))


def _join_lists(blocks: list[str]) -> list[str]:
    """Keep a list whose items are separated by blank lines in one block (up to half a slide), and a lone bold
    label ("**What you will learn**") with the block it introduces."""
    out: list[str] = []
    for block in blocks:
        if out and re.fullmatch(r"\*\*[^*\n]+\*\*:?", out[-1].strip()):
            out[-1] += "\n\n" + block
        elif out and _is_list(block) and _is_list(out[-1]) and markdown_height(out[-1] + "\n" + block) < 360:
            out[-1] += "\n\n" + block
        else:
            out.append(block)
    return out


def split_list(block: str, height: int = CONTENT_HEIGHT - 70) -> list[str]:
    """Cut a list into runs of whole items, each at most ``height`` px tall (a heading may share the first slide); a
    numbered list keeps its numbers. Anything else, and a list that already fits, comes back whole."""
    if not _is_list(block) or markdown_height(block) <= height:
        return [block]
    items = re.split(r"\n(?=(?:[-*+]|\d+\.)\s)", block)  # an item starts at the margin; nested lines are indented
    runs = [items[0]]
    for item in items[1:]:
        joined = runs[-1] + "\n" + item
        if markdown_height(joined) <= height:
            runs[-1] = joined
        else:
            runs.append(item)
    return runs


def markdown_height(block: str) -> int:
    """Estimated rendered height of a markdown block, in px."""
    stripped = block.strip()
    if stripped.startswith("#"):
        return 70
    if stripped.startswith("<details"):
        return TEXT_LINE + 20  # collapsed: the summary line
    if stripped.startswith("$$"):
        return 40 + 40 * max(1, stripped.count("\\\\") + 1)
    if stripped.startswith("|"):
        return 20 + 40 * stripped.count("\n")
    text = re.sub(r"<details>.*?</details>", "", stripped, flags=re.S)
    label = re.match(r"\*\*[^*\n]+\*\*:?\s*\n\s*\n", text)  # a bold label joined to its block
    if label:
        text = text[label.end():]
    listed = _is_list(text)
    items = re.split(r"\n\s*(?=[-*+] |\d+\. )", text) if listed else [text]
    width = CHARS_PER_LINE - 10 if listed else CHARS_PER_LINE  # list items are indented
    height = 0.0
    for item in items:
        words = " ".join(item.split())
        lines = max(1, math.ceil(len(words) / width))
        height += lines * (TEXT_LINE + 4 * ("$" in words)) + 8  # inline math makes lines taller
    return round(height) + 24 + (TEXT_LINE + 30) * bool(label) + (TEXT_LINE + 20) * block.count("<details")


def _output_lines(cell) -> list[str]:
    lines = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            lines += out.get("text", "").rstrip("\n").split("\n")
        elif "text/plain" in out.get("data", {}) and "image/png" not in out.get("data", {}):
            lines += out["data"]["text/plain"].rstrip("\n").split("\n")
    return lines


def _has_figure(cell) -> bool:
    return any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
               for o in cell.get("outputs", []))


def _truncate(cell) -> None:
    """Cut printed output to ``MAX_OUTPUT_LINES`` lines, saying how many were left out."""
    kept = 0
    for out in cell.get("outputs", []):
        if out.get("output_type") != "stream":
            continue
        lines = out.text.rstrip("\n").split("\n")
        room = MAX_OUTPUT_LINES - kept
        if len(lines) > room:
            out.text = "\n".join(lines[:max(room - 1, 0)]) + f"\n… {len(lines) - max(room - 1, 0)} more lines in the notebook\n"
        kept += min(len(lines), room)


def explorer_controls(source: str) -> list[str]:
    """Names of the controls given to ``explorer(draw, name=...)`` in a code cell (empty if there is none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "explorer":
            return [k.arg for k in node.keywords if k.arg and k.arg != "alt"]  # alt= describes, it controls nothing
    return []


def _code_height(cell) -> int:
    size = int(next(t for t in cell.metadata["tags"] if t.startswith("attnlab-code-")).rsplit("-", 1)[1])
    line = round(size * LINE_EM)
    height = 24 + line * len(cell.source.split("\n"))
    out = _output_lines(cell)
    if out:
        height += 16 + line * len(out)
    if _has_figure(cell):
        height += FIGURE_PX
    return height


def _meta(cell, slide_type: str, **data) -> None:
    cell.metadata["slideshow"] = {"slide_type": slide_type, **({"data": data} if data else {})}


def _tag(cell, *tags: str) -> None:
    cell.metadata["tags"] = list(cell.metadata.get("tags", [])) + list(tags)


def slides_notebook(nb):
    """A copy of ``nb`` with slide structure (cell metadata ``slideshow``) and slide-ready cells; ``nb`` is unchanged."""
    src = copy.deepcopy(nb)
    cells = []  # (cell, kind, height): kind is "heading1", "heading2", "heading3", "content", "notes" or "skip"
    for index, cell in enumerate(src.cells):
        if cell.cell_type == "markdown":
            source, notes = cell.source, ""
            if index == 0 and TIME_MARK in source:
                source, notes = source[: source.index(TIME_MARK)], source[source.index(TIME_MARK):]
            for block in [run for whole in markdown_blocks(source) for run in split_list(whole)]:
                piece = nbformat.v4.new_markdown_cell(fold_details(block))
                fenced = re.findall(r"^```[^\n]*\n(.*?)^```", block, re.S | re.M)
                if fenced:
                    _tag(piece, f"attnlab-code-{code_size([l for f in fenced for l in f.split(chr(10))])}")
                if cell.get("attachments"):
                    piece["attachments"] = cell["attachments"]
                level = len(block) - len(block.lstrip("#")) if block.startswith("#") else 0
                kind = f"heading{min(level, 3)}" if level else "content"
                height = markdown_height(block)
                if height > CONTENT_HEIGHT:  # one block taller than a slide: smaller text (slides.css)
                    _tag(piece, "attnlab-text-small")
                    height = round(height * SMALL_TEXT_PX / TEXT_PX)
                cells.append((piece, kind, height))
            if notes.strip():
                cells.append((nbformat.v4.new_markdown_cell(notes), "notes", 0))
            continue
        if cell.cell_type != "code" or is_colab_cell(cell):  # the Colab set-up cell is no slide
            cells.append((cell, "skip", 0))
            continue
        cell.source = NBVAL.sub("", cell.source).strip("\n")
        role = cell_role(cell)
        if role and role[1] == "check":
            cells.append((cell, "skip", 0))
            continue
        if role and role[1] == "solution":
            solution = nbformat.v4.new_markdown_cell(f"Reference solution of exercise {role[0]}:\n\n```python\n"
                                                     f"{cell.source}\n```")
            cell.source = stub_solution(cell.source)
            cell.outputs = []
        else:
            solution = None
        controls = explorer_controls(cell.source)
        for out in cell.get("outputs", []):
            if WIDGET in out.get("data", {}) and "image/png" in out["data"]:
                del out["data"][WIDGET]  # the explorer's stored picture; the widget needs a kernel to move
        _truncate(cell)
        lines = cell.source.split("\n")
        if len(lines) > MAX_CODE_LINES:
            cut = MAX_CODE_LINES - 1
            cell.source = "\n".join(lines[:cut] + [f"# … {len(lines) - cut} more lines in the notebook"])
            lines = cell.source.split("\n")
        printed = [line for line in _output_lines(cell) if len(line) <= WRAP_CHARS]
        _tag(cell, f"attnlab-code-{code_size(lines + printed, len(lines))}")
        if _has_figure(cell) and len(cell.source.split("\n")) > LONG_CODE_LINES:
            figure = copy.deepcopy(cell)
            figure["id"] = f"{cell.get('id', 'cell')}-figure"[:64]
            cell.outputs = [o for o in cell.outputs if not any(k.startswith("image/") for k in o.get("data", {}))]
            figure.outputs = [o for o in figure.outputs if any(k.startswith("image/") for k in o.get("data", {}))]
            _tag(figure, "remove_input", "attnlab-figure")
            cells.append((cell, "content", _code_height(cell)))
            cells.append((figure, "figure", CONTENT_HEIGHT))
        else:
            if _has_figure(cell):
                _tag(cell, "attnlab-figure-with-code")
            cells.append((cell, "content", _code_height(cell)))
        if controls:
            cells.append((nbformat.v4.new_markdown_cell(
                "Explorer: before moving anything, ask the room to predict what changing "
                + ", ".join(f"`{c}`" for c in controls) + " will do. The slide shows its default state; move the "
                "controls live in JupyterLab."), "notes", 0))
        if solution is not None:
            cells.append((solution, "notes", 0))

    section, used, out_cells, first, lone_heading = "Introduction", 0, [], True, False
    for cell, kind, height in cells:
        # a heading is never left alone on a slide: what follows it stays when it fits a slide by itself
        fits = used + height <= CONTENT_HEIGHT or (lone_heading and height <= CONTENT_HEIGHT)
        if kind in ("notes", "skip"):
            _meta(cell, kind)
            out_cells.append(cell)
            continue
        if first or kind in ("heading1", "heading2"):
            if kind == "heading2":
                section = re.match(r"##\s+(.*)", cell.source).group(1).strip()
            _meta(cell, "slide", section=section)
            used, first = height, False
        elif kind == "heading3" or kind == "figure" or not fits:
            _meta(cell, "subslide")
            used = height
        else:
            _meta(cell, "-")
            used += height
        lone_heading = kind.startswith("heading")
        out_cells.append(cell)
    src.cells = out_cells
    return src
