"""Figures every reader can use: a written text alternative on every figure, and colours that stay apart under
colour-vision deficiencies.

Colour-vision deficiencies are simulated with colorspacious (Machado, Oliveira and Fernandes 2009, severity 100, i.e.
deuteranopia, protanopia and tritanopia), and colours compared by their distance in CAM02-UCS (Luo, Cui and Li 2006):
about 1 is a just-noticeable difference. The issue found pairs at 5 to 8 under deuteranopia hard to tell apart; every
pair of series colours here must stay at least ``MIN_DISTANCE`` apart under each simulation and with normal vision.
"""

from __future__ import annotations

import html
import itertools
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from attnlab import plot

colorspacious = pytest.importorskip("colorspacious")

ROOT = Path(__file__).resolve().parents[1]
MIN_DISTANCE = 10.0  # CAM02-UCS distance every pair of series colours keeps, under every simulation
DEFICIENCIES = ("deuteranomaly", "protanomaly", "tritanomaly")  # at severity 100: -anopia

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))


def simulate(color, deficiency: str | None) -> np.ndarray:
    """sRGB (0-1) of ``color`` as seen with ``deficiency`` (None: normal vision)."""
    from matplotlib.colors import to_rgb

    rgb = np.array(to_rgb(color))
    if deficiency is None:
        return rgb
    cvd = {"name": "sRGB1+CVD", "cvd_type": deficiency, "severity": 100}
    return np.clip(colorspacious.cspace_convert(rgb, cvd, "sRGB1"), 0, 1)


def distances(colors) -> list[tuple[float, str, str, str]]:
    """(distance, colour, colour, vision) for every pair of ``colors`` and every simulated vision, smallest first."""
    out = []
    for a, b in itertools.combinations(colors, 2):
        for deficiency in (None, *DEFICIENCIES):
            d = colorspacious.deltaE(simulate(a, deficiency), simulate(b, deficiency), input_space="sRGB1",
                                     uniform_space="CAM02-UCS")
            out.append((float(d), a, b, deficiency or "normal"))
    return sorted(out)


def lightness(color) -> float:
    from matplotlib.colors import to_rgb

    return float(colorspacious.cspace_convert(to_rgb(color), "sRGB1", "CAM02-UCS")[0])


def test_the_simulation_is_the_published_one():
    """Pure red and green, which deuteranopes confuse, come out close; blue and yellow stay far apart."""
    red_green = distances(["#ff0000", "#00aa00"])
    assert min(d for d, *_, vision in red_green if vision == "deuteranomaly") < 12
    assert min(d for d, *_, vision in red_green if vision == "normal") > 40
    assert min(d for d, *_ in distances(["#0000ff", "#ffff00"])) > 50


def test_the_palette_stays_apart_under_every_simulated_deficiency():
    worst = distances(list(plot.PALETTE.values()))[:3]
    assert worst[0][0] >= MIN_DISTANCE, f"closest pairs of the palette (distance, a, b, vision): {worst}"


def test_the_palette_is_matplotlibs_cycle_with_a_line_style_each():
    import matplotlib as mpl

    cycle = mpl.rcParams["axes.prop_cycle"].by_key()
    assert cycle["color"] == list(plot.PALETTE.values())
    assert len(set(map(str, cycle["linestyle"]))) == len(plot.PALETTE), "each colour has its own line style"


def test_the_layout_colours_differ_in_colour_and_in_lightness():
    colors = [plot.LAYOUT_COLORS[name] for name in ("MHA", "GQA", "MQA")]
    worst = distances(colors)[0]
    assert worst[0] >= 2 * MIN_DISTANCE, f"closest layout colours: {worst}"
    light = [lightness(c) for c in colors]
    assert all(b - a >= 20 for a, b in zip(light, light[1:])), f"lightness MHA < GQA < MQA, 20 apart: {light}"


def figures(path: Path):
    """(cell index, output) of every output of the notebook that shows a picture."""
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if any(mime.startswith("image/") for mime in output.get("data", {})):
                yield index, output


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}" if path.parent.name == "solutions" else path.stem


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_every_figure_has_a_written_text_alternative(path):
    """Each picture carries an alt that says something, written for it (not derived), in its HTML and metadata."""
    problems, seen = [], {}
    for index, output in figures(path):
        alt = output.get("metadata", {}).get("image/png", {}).get("alt")
        derived = output.get("metadata", {}).get("attnlab", {}).get("alt_derived", False)
        if alt is None:
            problems.append(f"cell {index}: no text alternative")
            continue
        try:
            plot.check_alt(alt)
        except ValueError as error:
            problems.append(f"cell {index}: {error}")
        if derived:
            problems.append(f"cell {index}: the explorer's alt is derived from its draw function; write one (alt=)")
        if len(alt.split()) > 80:
            problems.append(f"cell {index}: alt of {len(alt.split())} words; keep it to what a listener can hold")
        if alt not in [html.unescape(a) for a in re.findall(r'<img [^>]*alt="([^"]*)"', output["data"].get("text/html", ""))]:
            problems.append(f"cell {index}: no <img alt> in its text/html (JupyterLab would show no alt)")
        if alt in seen:
            problems.append(f"cell {index}: the same alt as cell {seen[alt]}: say what this figure shows")
        seen.setdefault(alt, index)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_id)
def test_every_figures_series_colours_stay_apart(path):
    """The colours a figure's legends name stay apart under every simulated deficiency (stored by plot.show)."""
    problems = []
    for index, output in figures(path):
        colors = output.get("metadata", {}).get("attnlab", {}).get("series_colors")
        if colors is None:
            if "alt_derived" not in output.get("metadata", {}).get("attnlab", {}):  # explorers have no legend record
                problems.append(f"cell {index}: not shown with plot.show (no series colours recorded)")
            continue
        close = [d for d in distances(colors) if d[0] < MIN_DISTANCE]
        if close:
            problems.append(f"cell {index}: series colours too close (distance, a, b, vision): {close[:3]}")
    assert not problems, "\n".join(problems)
