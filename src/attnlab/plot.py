"""Figures the notebooks share: heatmaps of weights and masks, growth on log-log axes, the course's colour-blind-safe
palette, the colours of the attention layouts (MHA, GQA, MQA), and :func:`show`, which shows a figure with its text
alternative.

The palette is Okabe and Ito's (*Color Universal Design*, 2008, https://jfly.uni-koeln.de/color/), less its yellow,
which is too pale on white. Importing this module makes it matplotlib's colour cycle (``C0`` ... ``C6``), each colour
with its own line style, so that two series differ in more than colour; ``tests/test_plot_widgets.py`` simulates
deuteranopia, protanopia and tritanopia (Machado et al. 2009, via colorspacious) and requires every pair to stay apart.
``import attnlab`` itself stays numpy-only: this module is imported on first use of ``attnlab.plot``.
"""

from __future__ import annotations

import numpy as np

PALETTE = {
    "blue": "#0072B2", "vermillion": "#D55E00", "bluish green": "#009E73", "reddish purple": "#CC79A7",
    "orange": "#E69F00", "sky blue": "#56B4E9", "black": "#000000",
}
"""The course's series colours, in the order of matplotlib's cycle (``C0`` is blue, ``C1`` vermillion, ...)."""

LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 3)))
"""The line style that goes with each palette colour in the cycle: series are told apart without colour too."""

LAYOUT_COLORS = {"MHA": PALETTE["black"], "GQA": PALETTE["blue"], "MQA": PALETTE["orange"]}
"""One colour per key/value layout: every query head has its own K and V (MHA), groups share them (GQA), all share one
(MQA). Darkest to lightest as the key/value heads get fewer, so the three differ in lightness, not only in hue."""

STYLE = {
    "axes.prop_cycle": None,  # filled in by use_style (it needs matplotlib's cycler)
    "figure.facecolor": "white",  # an opaque figure stays legible on a dark page
    "savefig.facecolor": "white",
}
"""The rc settings the course's figures are drawn with (:func:`use_style`)."""


def use_style() -> None:
    """Make the course palette (with its line styles) matplotlib's default cycle, and figures opaque white.

    Called when this module is imported, so a notebook that does ``from attnlab import plot`` draws in it.
    """
    import matplotlib as mpl
    from cycler import cycler

    style = dict(STYLE, **{"axes.prop_cycle": cycler(color=list(PALETTE.values()), linestyle=list(LINESTYLES))})
    mpl.rcParams.update(style)


def layout_name(H: int, Hkv: int) -> str:
    """``"MHA"``, ``"GQA"`` or ``"MQA"``: the name of ``Hkv`` key/value heads shared by ``H`` query heads.

    >>> layout_name(32, 32), layout_name(32, 8), layout_name(32, 1)
    ('MHA', 'GQA', 'MQA')
    """
    if not (isinstance(H, (int, np.integer)) and isinstance(Hkv, (int, np.integer))) or H < 1 or Hkv < 1 or H % Hkv:
        raise ValueError(f"expected positive integers with Hkv dividing H, got H={H!r}, Hkv={Hkv!r}")
    return "MHA" if Hkv == H else "MQA" if Hkv == 1 else "GQA"


def _axes(ax, figsize):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def heatmap(matrix, *, ax=None, title: str = "", xlabel: str = "key position j", ylabel: str = "query position i",
            annotate: bool | None = None, vmin: float | None = 0.0, vmax: float | None = 1.0, cmap: str = "Blues",
            xticklabels=None, yticklabels=None, colorbar: bool = True, fmt: str = "{:.2f}"):
    """Draw a ``(T, S)`` matrix (attention weights by default) as a heatmap; returns the axes.

    Cells are annotated with their values when the matrix is small (at most 12 x 12) unless ``annotate`` says otherwise.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {m.shape}")
    ax = _axes(ax, (0.45 * m.shape[1] + 2.2, 0.4 * m.shape[0] + 1.6))
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    for labels, setter, n in ((xticklabels, ax.set_xticks, m.shape[1]), (yticklabels, ax.set_yticks, m.shape[0])):
        if labels is not None:
            setter(range(n), labels)
        elif n <= 16:
            setter(range(n))
    _annotate(ax, im, m, annotate, fmt)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, shrink=0.8)
    return ax


def _annotate(ax, im, m, annotate, fmt):
    if annotate is None:
        annotate = max(m.shape) <= 12
    if annotate:
        for (i, j), value in np.ndenumerate(m):
            r, g, b, _ = im.cmap(im.norm(value))  # the cell's own colour: diverging maps are dark at both ends
            dark = bool(np.isfinite(value)) and 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=8, color="white" if dark else "black")


def update_heatmap(ax, matrix, *, annotate: bool | None = None, fmt: str = "{:.2f}"):
    """Show ``matrix`` on axes drawn by :func:`heatmap` (or :func:`mask_heatmap`), in place: same colours and labels.

    The matrix may have another shape; the limits and ticks follow it. For explorers that keep their figure
    (``attnlab.widgets``), which is faster than drawing a new heatmap at every step. Returns the axes.
    """
    from matplotlib.ticker import AutoLocator

    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"update_heatmap needs a 2-D matrix, got shape {m.shape}")
    if len(ax.get_images()) != 1:
        raise ValueError(f"update_heatmap needs axes drawn by heatmap (one image), got {len(ax.get_images())} images")
    (im,) = ax.get_images()
    T, S = m.shape
    im.set_data(m)
    im.set_extent((-0.5, S - 0.5, T - 0.5, -0.5))
    ax.set(xlim=(-0.5, S - 0.5), ylim=(T - 0.5, -0.5))
    for axis, n in ((ax.xaxis, S), (ax.yaxis, T)):  # ticks as heatmap chooses them (explicit labels are not kept)
        if n <= 16:
            axis.set_ticks(range(n))
        else:
            axis.set_major_locator(AutoLocator())
    for text in list(ax.texts):
        text.remove()
    _annotate(ax, im, m, annotate, fmt)
    return ax


def mask_heatmap(mask, *, ax=None, title: str = "", xlabel: str = "key position j", ylabel: str = "query position i",
                 **kwargs):
    """Draw a boolean ``(T, S)`` mask: dark = may attend (True), light = masked (False)."""
    m = np.asarray(mask)
    if m.dtype != bool or m.ndim != 2:
        raise ValueError(f"mask_heatmap needs a 2-D boolean mask, got {m.dtype} of shape {m.shape}")
    kwargs.setdefault("annotate", False)
    return heatmap(m.astype(float), ax=ax, title=title, xlabel=xlabel, ylabel=ylabel, cmap="Greens", colorbar=False,
                   **kwargs)


def loglog(x, series: dict, *, ax=None, title: str = "", xlabel: str = "", ylabel: str = "", fit: bool = True,
           marker: str = "o"):
    """Plot each ``name -> y`` series against ``x`` on log-log axes; with ``fit``, add the fitted slope to the legend.

    Returns ``(ax, slopes)`` where ``slopes[name]`` is the least-squares slope of ``log y`` against ``log x``: 2 means
    quadratic growth, 1 linear.
    """
    x = np.asarray(x, dtype=float)
    if np.any(x <= 0):
        raise ValueError(f"x must be positive on log axes, got min {x.min()}")
    series = {name: np.asarray(y, dtype=float) for name, y in series.items()}
    for name, y in series.items():  # check everything before drawing anything
        if y.shape != x.shape:
            raise ValueError(f"series {name!r} has shape {y.shape} but x has shape {x.shape}")
        if np.any(y <= 0):
            raise ValueError(f"series {name!r} must be positive on log axes, got min {y.min()}")
    ax = _axes(ax, (6, 4))
    slopes = {}
    for name, y in series.items():
        label = name
        if fit and len(x) >= 2:
            slopes[name] = float(np.polyfit(np.log(x), np.log(y), 1)[0])
            label = f"{name} (slope {slopes[name]:.2f})"
        ax.loglog(x, y, marker=marker, label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return ax, slopes


GENERIC_ALT = ("figure", "plot", "a plot", "a figure", "chart", "image", "graph")
"""Text alternatives that say nothing about what a figure shows; ``show`` refuses them."""


def check_alt(alt) -> str:
    """``alt`` with its white space collapsed; raises ValueError if it is not a text alternative that says something
    (a str of 6 words or more, not one of ``GENERIC_ALT``)."""
    if not isinstance(alt, str):
        raise ValueError(f"alt must be a str describing the figure, got {type(alt).__name__}")
    alt = " ".join(alt.split())
    if len(alt.split()) < 6 or alt.lower().rstrip(".") in GENERIC_ALT:
        raise ValueError(f"alt must say what the figure shows and what to notice (6 words or more), got {alt!r}")
    return alt


def image_bundle(png_base64: str, alt: str) -> tuple[dict, dict]:
    """A display bundle of a PNG (base64) with its text alternative, for every frontend: ``image/png`` with ``alt``
    in its metadata (nbconvert's templates of the site and slides read it), ``text/html`` as ``<img alt=...>``
    (JupyterLab's image renderer ignores the metadata, its HTML renderer keeps ``alt``), and ``alt`` as text/plain."""
    from html import escape

    alt = check_alt(alt)
    html = f'<img src="data:image/png;base64,{png_base64}" alt="{escape(alt, quote=True)}">'
    return {"image/png": png_base64, "text/html": html, "text/plain": alt}, {"image/png": {"alt": alt}}


def series_colors(fig) -> list[str]:
    """The distinct colours (``#rrggbb``) of the series a figure's legends name: the colours a reader must tell
    apart. :func:`show` stores them with the figure, where a test checks them under colour-vision simulation."""
    from matplotlib.colors import to_hex

    found = []
    for ax in fig.axes:
        legend = ax.get_legend()
        for handle in (legend.legend_handles if legend is not None else []):
            getter = getattr(handle, "get_color", None) or getattr(handle, "get_facecolor", None)
            if getter is None:
                continue
            color = getter()
            if len(np.shape(color)) == 2:  # a collection: its first colour
                if not len(color):
                    continue
                color = color[0]
            if isinstance(color, str) and color.lower() == "none":
                continue
            hex_ = to_hex(color)
            if hex_ not in found:
                found.append(hex_)
    return found


def show(fig=None, *, alt: str) -> None:
    """Show ``fig`` (the current figure by default) with ``alt``, its text alternative: what the figure shows and what
    to notice in it, in a sentence or two a screen reader can read out.

    In a notebook the figure is displayed as the inline backend draws it, with ``alt`` as its plain-text form, as the
    image's ``alt`` metadata (which the site's and the slides' templates write into ``<img alt="...">``) and as an
    HTML ``<img alt="...">``, the form JupyterLab renders (see :func:`image_bundle`); the colours of the series its
    legends name go into the output's metadata (``attnlab.series_colors``). The figure is then closed. Outside a
    notebook this is ``plt.show()``.
    """
    import matplotlib.pyplot as plt

    alt = check_alt(alt)
    fig = plt.gcf() if fig is None else fig
    if not hasattr(fig, "savefig"):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        get_ipython = lambda: None  # noqa: E731
    shell = get_ipython()
    if shell is None or "inline" not in plt.get_backend():
        plt.show()
        return
    from IPython.display import display

    data, metadata = shell.display_formatter.format(fig)  # exactly what the inline backend would have shown
    if "image/png" not in data:  # figures switched off (as the grader does): the words stand in for the picture
        display({"text/plain": alt}, raw=True)
        plt.close(fig)
        return
    bundle, image_metadata = image_bundle(data["image/png"], alt)
    data.update(bundle)
    for mime, meta in metadata.items():  # the inline backend's width/height of a retina figure
        if isinstance(meta, dict):
            image_metadata.setdefault(mime, {}).update({k: v for k, v in meta.items() if k != "alt"})
    image_metadata["attnlab"] = {"series_colors": series_colors(fig)}
    display(data, raw=True, metadata=image_metadata)
    plt.close(fig)

try:  # a learner's `pip install attnlab` may come without matplotlib: the names above still work
    use_style()
except ImportError:  # pragma: no cover
    pass
