"""Plot helpers (drawn headless, Agg backend) and the interactive explorer, with and without ipywidgets."""

from __future__ import annotations

import base64
import io
import sys

import numpy as np
import pytest

from attnlab import causal_mask, softmax
from attnlab import plot
from attnlab.widgets import CSS_CLASS, PICTURE_STYLE, explorer

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


# --- plot -----------------------------------------------------------------------------------------------------------


def test_heatmap_labels_values_and_annotations(close_figures):
    w = softmax(np.arange(12.0).reshape(3, 4))
    ax = plot.heatmap(w, title="weights")
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("weights", "key position j", "query position i")
    (image,) = ax.get_images()
    assert np.array_equal(image.get_array(), w) and image.get_clim() == (0.0, 1.0)
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 12 and texts[0] == f"{w[0, 0]:.2f}", "small matrices are annotated cell by cell"
    assert len(ax.figure.axes) == 2, "a colorbar is added"


def test_heatmap_on_given_axes_without_annotations(close_figures):
    _, (left, right) = close_figures.subplots(1, 2)
    ax = plot.heatmap(np.zeros((20, 20)), ax=right, xlabel="j", ylabel="i", colorbar=False, vmin=None, vmax=None)
    assert ax is right and ax.get_xlabel() == "j" and ax.get_ylabel() == "i"
    assert len(ax.texts) == 0, "matrices larger than 12 x 12 are not annotated by default"
    assert len(left.get_images()) == 0


def test_mask_heatmap(close_figures):
    mask = causal_mask(5)
    ax = plot.mask_heatmap(mask, title="causal")
    assert ax.get_title() == "causal" and ax.get_xlabel() == "key position j"
    (image,) = ax.get_images()
    assert np.array_equal(image.get_array(), mask.astype(float))
    assert image.get_cmap().name == "Greens" and len(ax.texts) == 0


def test_update_heatmap_follows_a_new_shape(close_figures):
    ax = plot.heatmap(softmax(np.zeros((3, 3))), title="weights")
    w = softmax(np.arange(20.0).reshape(4, 5))
    assert plot.update_heatmap(ax, w, annotate=True) is ax
    (image,) = ax.get_images()
    assert np.array_equal(image.get_array(), w) and image.get_extent() == [-0.5, 4.5, 3.5, -0.5]
    assert ax.get_xlim() == (-0.5, 4.5) and ax.get_ylim() == (3.5, -0.5)
    assert list(ax.get_xticks()) == [0, 1, 2, 3, 4] and list(ax.get_yticks()) == [0, 1, 2, 3]
    assert [t.get_text() for t in ax.texts] == [f"{x:.2f}" for x in w.ravel()], "the old annotations are gone"
    assert ax.get_title() == "weights"
    plot.update_heatmap(ax, np.zeros((20, 20)))
    assert len(ax.texts) == 0
    with pytest.raises(ValueError, match=r"2-D matrix, got shape \(3,\)"):
        plot.update_heatmap(ax, np.zeros(3))
    _, bare = close_figures.subplots()
    with pytest.raises(ValueError, match="axes drawn by heatmap"):
        plot.update_heatmap(bare, w)


def test_layout_names_and_colours():
    assert [plot.layout_name(32, n) for n in (32, 8, 1)] == ["MHA", "GQA", "MQA"]
    assert plot.layout_name(1, 1) == "MHA", "one head: its own K and V"
    assert set(plot.LAYOUT_COLORS) == {"MHA", "GQA", "MQA"} and len(set(plot.LAYOUT_COLORS.values())) == 3
    for H, Hkv in ((32, 3), (0, 1), (8, 0), (8.0, 2)):
        with pytest.raises(ValueError, match="Hkv dividing H"):
            plot.layout_name(H, Hkv)


def test_loglog_fits_slopes(close_figures):
    x = np.array([128, 256, 512, 1024, 2048])
    ax, slopes = plot.loglog(x, {"scores": x**2.0, "tiled": 3.0 * x}, title="memory", xlabel="S", ylabel="bytes")
    assert slopes == pytest.approx({"scores": 2.0, "tiled": 1.0}, abs=1e-9)
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("memory", "S", "bytes")
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["scores (slope 2.00)", "tiled (slope 1.00)"]


def test_loglog_without_fit(close_figures):
    ax, slopes = plot.loglog([1, 2, 4], {"y": [1, 2, 4]}, fit=False)
    assert slopes == {} and [t.get_text() for t in ax.get_legend().get_texts()] == ["y"]


# --- explorer with ipywidgets -----------------------------------------------------------------------------------------


class Recorder:
    """A ``draw`` function that records every call and returns a small figure."""

    def __init__(self, plt):
        self.plt = plt
        self.calls = []

    def __call__(self, n=4, name="b", flag=True, temperature=1.5):
        self.calls.append(dict(n=n, name=name, flag=flag, temperature=temperature))
        fig, ax = self.plt.subplots(figsize=(2, 1))
        ax.set_title(f"n={n}")
        return fig


@pytest.fixture
def recorder(close_figures):
    return Recorder(close_figures)


def test_controls_start_at_draw_defaults(recorder):
    import ipywidgets

    ex = explorer(recorder, n=ipywidgets.IntSlider(min=1, max=10, continuous_update=False), name=["a", "b", "c"],
                  flag=True, temperature=(0.1, 5.0, 0.1))
    defaults = dict(n=4, name="b", flag=True, temperature=1.5)
    assert ex.defaults == defaults
    assert recorder.calls == [defaults], "drawn once, with draw's own defaults (even for an explicit widget)"
    assert CSS_CLASS in ex.widget._dom_classes


def test_update_changes_the_value_and_redraws(recorder):
    ex = explorer(recorder, n=(1, 10, 1), name=["a", "b", "c"])
    ex.update(n=7)
    ex.update(name="c")
    assert recorder.calls[-2:] == [dict(n=7, name="b", flag=True, temperature=1.5),
                                   dict(n=7, name="c", flag=True, temperature=1.5)]
    with pytest.raises(ValueError, match=r"no control named 'm'; expected one of \['n', 'name'\]"):
        ex.update(m=3)


def test_mimebundle_has_the_widget_and_a_png_fallback(recorder):
    ex = explorer(recorder, n=(1, 10, 1))
    ex.update(n=9)
    n_calls = len(recorder.calls)
    bundle, metadata = ex._repr_mimebundle_()
    assert WIDGET_MIME in bundle and bundle[WIDGET_MIME]["model_id"] == ex.widget.model_id
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert recorder.calls[n_calls:] == [dict(n=4, name="b", flag=True, temperature=1.5)], \
        "the static fallback shows the default state"
    assert recorder.plt.get_fignums() == [], "every figure drawn is closed (none shown twice at the end of a cell)"


def test_draw_may_return_any_displayable(close_figures):
    ex = explorer(lambda word="hi": f"<{word}>", word=["hi", "ho"])
    bundle, metadata = ex._repr_mimebundle_()
    assert WIDGET_MIME in bundle and "image/png" not in bundle


# --- explorer that keeps its figure (draw with a view) ---------------------------------------------------------------


class LiveDraw:
    """A ``draw`` that builds its figure on the first call only, counting builds and the figure's full redraws."""

    def __init__(self, plt):
        self.plt = plt
        self.builds = 0
        self.full_draws = 0

    def __call__(self, height=0.5, grid=False, *, view):
        if view.fig is None:
            self.builds += 1
            view.fig, ax = self.plt.subplots(figsize=(3, 2), layout="constrained")
            (view.bar,) = ax.bar([0], [height], animated=True)
            view.label = view.fig.suptitle("", animated=True)  # figure-level: a plain savefig would leave it out
            ax.set_ylim(0, 1)
            view.fig.draw = self._counting(view.fig.draw)
            view.ax, view.grid = ax, False
        view.bar.set_height(height)
        view.label.set_text(f"height {height:.1f}")
        if grid != view.grid:  # not animated: a change here needs the whole figure drawn again
            view.ax.grid(grid)
            view.grid = grid
        return view.fig

    def _counting(self, draw):
        def counted(renderer):
            self.full_draws += 1
            return draw(renderer)
        return counted


def _shown_png(ex) -> bytes:
    return ex._last


def test_a_live_explorer_builds_once_and_redraws_only_what_is_animated(close_figures):
    draw = LiveDraw(close_figures)
    ex = explorer(draw, height=(0.0, 1.0, 0.1), grid=False)
    assert ex.live and draw.builds == 1 and draw.full_draws == 1
    first = _shown_png(ex)
    assert first.startswith(b"\x89PNG")
    ex.update(height=0.9)
    ex.update(height=0.2)
    assert draw.builds == 1 and draw.full_draws == 1, "animated artists only: the cached background is reused"
    assert _shown_png(ex) != first
    ex.update(grid=True)
    assert draw.full_draws == 2, "a change to an artist that is not animated redraws the whole figure"
    assert close_figures.get_fignums() == [], "the live figure is shown inside the explorer only"


def test_a_live_explorer_shows_the_same_picture_as_a_fresh_figure(close_figures):
    from PIL import Image

    draw = LiveDraw(close_figures)
    ex = explorer(draw, height=(0.0, 1.0, 0.1))
    ex.update(height=0.8)
    stepped = np.asarray(Image.open(io.BytesIO(_shown_png(ex))))
    fresh = explorer(draw, height=(0.0, 1.0, 0.1))
    fresh.update(height=0.8)
    assert np.array_equal(stepped, np.asarray(Image.open(io.BytesIO(_shown_png(fresh))))), \
        "blitted steps give the picture a full draw gives"


def _texts_figure(plt, colour="black"):
    """A figure with every kind of text a live explorer redraws: tick labels, a title, a rotated axis label, a
    two-line annotation and math text."""
    fig, ax = plt.subplots(figsize=(3, 2), dpi=72)
    ax.plot([0, 1], [0, 1])
    ax.set_title("weights = softmax(q·k)", color=colour)
    ax.set_ylabel("query position i")
    ax.text(0.3, 0.5, "0.25\n(+1.50)", color=colour)
    ax.text(0.6, 0.2, r"$\sqrt{d_k}$", color=colour)
    return fig


def _draw_with_text_cache(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnlab.widgets import _TextCache

    canvas = FigureCanvasAgg(fig)
    cache = _TextCache(canvas.get_renderer())
    cache.install()
    canvas.draw()
    return canvas, cache


def test_the_live_text_cache_draws_a_string_from_memory_as_it_drew_it_first(close_figures):
    fig = _texts_figure(close_figures)
    canvas, cache = _draw_with_text_cache(fig)
    first = np.array(canvas.buffer_rgba())
    assert cache.strings, "the plain strings were recorded"
    recorded = dict(cache.strings)
    canvas.draw()  # every plain string now comes from the cache
    assert cache.strings.keys() == recorded.keys()
    assert np.array_equal(np.array(canvas.buffer_rgba()), first)
    assert first[..., :3].min() < 64, "text was drawn at all"


@pytest.mark.parametrize("family", ["DejaVu Sans", "DejaVu Serif", "monospace"])
def test_the_live_text_cache_lays_out_text_as_matplotlib_does(close_figures, family):
    """The font line metrics the cache keeps per font give every text the layout matplotlib computes itself, to the
    bit, whatever the font, size, weight, line count and resolution."""
    from matplotlib.backends.backend_agg import RendererAgg

    from attnlab.widgets import _TextCache

    for dpi in (72, 100):
        fig = close_figures.figure(dpi=dpi)
        plain, cached = RendererAgg(200, 100, dpi), RendererAgg(200, 100, dpi)
        _TextCache(cached).install()
        for size, weight, text in ((7, "normal", "x"), (10, "bold", "two\nlines"), (15.5, "light", "Qp (±1.5)")):
            t = fig.text(0.1, 0.5, text, family=family, size=size, weight=weight)
            assert repr(t._get_layout(cached)) == repr(t._get_layout(plain)), (family, dpi, size, weight)
        assert len(cached.attnlab_text_cache.heights) == 3


def test_the_live_text_cache_draws_in_the_colour_of_the_moment(close_figures):
    fig = _texts_figure(close_figures)
    canvas, _ = _draw_with_text_cache(fig)  # recorded in black
    for text in fig.axes[0].texts + [fig.axes[0].title]:
        text.set_color("tab:red")
    canvas.draw()
    red_from_memory = np.array(canvas.buffer_rgba())
    fresh, _ = _draw_with_text_cache(_texts_figure(close_figures, colour="tab:red"))  # recorded in red
    assert np.array_equal(red_from_memory, np.array(fresh.buffer_rgba()))


def test_the_live_text_cache_moves_a_string_by_whole_pixels(close_figures):
    """A string recorded at one place and drawn from memory at another looks as if drawn there first."""
    def positioned(xs):
        fig = close_figures.figure(figsize=(2, 1), dpi=72)
        canvas, cache = _draw_with_text_cache(fig)
        text = fig.text(xs[0], 30, "k3 0.42", transform=None)  # display pixels
        canvas.draw()
        for x in xs[1:]:
            text.set_x(x)
            canvas.draw()
        return np.array(canvas.buffer_rgba())

    moved = positioned([10.3, 47.6])  # recorded at 10, drawn from memory at 48
    direct = positioned([47.6])  # recorded at 48
    assert np.array_equal(moved, direct)


def test_the_static_picture_of_a_live_explorer_shows_its_animated_artists(close_figures):
    from PIL import Image

    def draw(title, *, view):
        view.fig, ax = close_figures.subplots(figsize=(3, 2))
        ax.set_axis_off()
        view.fig.suptitle(title, animated=True, fontsize=20)
        return view.fig

    pictures = [explorer(draw, title=titles)._repr_mimebundle_()[0]["image/png"] for titles in (["", "W"], ["WWW", ""])]
    blank, titled = (np.asarray(Image.open(io.BytesIO(base64.b64decode(p))).convert("L")) for p in pictures)
    assert blank.min() == 255 and titled.min() < 128, "the animated title is drawn in the static picture"


def test_a_live_draw_must_return_its_view_figure(close_figures):
    def draw(n=1, *, view):
        view.fig = close_figures.figure()
        return close_figures.figure()

    ex = explorer(draw, n=(1, 3, 1))  # ipywidgets shows the error inside the widget; the explorer raises it:
    with pytest.raises(ValueError, match="must build view.fig once and return it"):
        ex._show(n=2)


def test_hold_changes_controls_without_redrawing(recorder):
    ex = explorer(recorder, n=(1, 10, 1), name=["a", "b", "c"])
    shown = ex._last
    with ex.hold():
        ex.update(n=2)
        ex.update(name="a")
    assert len(recorder.calls) == 1 and ex._last is shown, "held: the picture stays"
    ex.update(n=3)
    assert recorder.calls[-1] == dict(n=3, name="a", flag=True, temperature=1.5)


# --- explorer without ipywidgets ------------------------------------------------------------------------------------


def test_without_ipywidgets_a_static_bundle_and_no_error(recorder, monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # `import ipywidgets` now raises ImportError
    with pytest.raises(ImportError):
        import ipywidgets  # noqa: F401
    ex = explorer(recorder, n=(1, 10, 1), name=["a", "b", "c"], flag=False, temperature=(0.1, 5.0, 0.1))
    assert ex.widget is None
    bundle, metadata = ex._repr_mimebundle_()
    assert WIDGET_MIME not in bundle
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    assert "install ipywidgets" in bundle["text/plain"]
    assert recorder.calls == [dict(n=4, name="b", flag=True, temperature=1.5)]
    with pytest.raises(RuntimeError, match="ipywidgets is not installed"):
        ex.update(n=3)


def test_without_ipywidgets_defaults_come_from_the_controls_when_draw_has_none(monkeypatch, close_figures):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    seen = []

    def draw(n, word, on):
        seen.append((n, word, on))
        return "text"

    explorer(draw, n=(2, 10, 2), word=["x", "y"], on=True)._repr_mimebundle_()
    assert seen == [(6, "x", True)], "as ipywidgets.interact would start them: middle of the range, first option"


@pytest.mark.parametrize("alt", ["", "a plot", "Figure.", "two lines", 42, None])
def test_show_refuses_a_missing_or_generic_text_alternative(alt, close_figures):
    import matplotlib.pyplot as plt

    plt.plot([1, 2])
    with pytest.raises(ValueError, match="alt must"):
        plot.show(alt=alt)


def test_show_in_a_notebook_carries_the_text_alternative_into_the_output(close_figures):
    """In an IPython kernel with the inline backend, the alt text is the plain-text form and the image's alt."""
    import nbformat
    from nbclient import NotebookClient

    code = ("import matplotlib.pyplot as plt\nfrom attnlab import plot\nfig, ax = plt.subplots()\nax.plot([1, 2, 3])\n"
            "ax.plot([3, 2, 1], label='falling'); ax.plot([2, 2, 2], label='flat', color='#E69F00'); ax.legend()\n"
            "plot.show(fig, alt='A rising line from 1 to 3:   it grows by \"one\" per step.')\n"
            "print(len(plt.get_fignums()))")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert [o.output_type for o in outputs] == ["display_data", "stream"], outputs
    alt = 'A rising line from 1 to 3: it grows by "one" per step.'
    assert outputs[0].data["text/plain"] == alt
    assert outputs[0].metadata["image/png"]["alt"] == alt
    assert outputs[0].data["image/png"]
    # JupyterLab renders the HTML form: the same PNG, with the alt (escaped) on the <img>
    assert outputs[0].data["text/html"] == (f'<img src="data:image/png;base64,{outputs[0].data["image/png"]}" '
                                            'alt="A rising line from 1 to 3: it grows by &quot;one&quot; per step.">')
    # the colours the legend names: the palette's second (the first unlabelled line took C0) and the given orange
    assert outputs[0].metadata["attnlab"]["series_colors"] == [plot.PALETTE["vermillion"].lower(), "#e69f00"]
    assert outputs[1].text == "0\n"  # the figure is closed, so the inline backend does not draw it a second time


def test_live_pictures_are_drawn_at_the_static_pictures_resolution_and_stay_opaque(close_figures):
    from PIL import Image

    from attnlab.widgets import LIVE_DPI

    draw = LiveDraw(close_figures)  # a (3, 2)-inch figure, at matplotlib's 100 dpi until the explorer draws it
    ex = explorer(draw, height=(0.0, 1.0, 0.1))
    ex.update(height=0.3)
    live = Image.open(io.BytesIO(_shown_png(ex)))
    assert live.size == (3 * LIVE_DPI, 2 * LIVE_DPI), live.size
    assert np.asarray(live)[..., 3].min() == 255, "the figure's background is opaque"
    bundle, _ = explorer(draw, height=(0.0, 1.0, 0.1))._repr_mimebundle_()
    static = Image.open(io.BytesIO(base64.b64decode(bundle["image/png"])))
    assert static.mode == "RGB" and static.size == live.size


# --- text alternatives and accessible names of explorers -------------------------------------------------------------


def test_an_explorer_carries_its_text_alternative_written_or_derived(recorder):
    ex = explorer(recorder, n=(1, 10, 1), alt=lambda n: f"A small empty figure titled n={n}, one per step.")
    bundle, metadata = ex._repr_mimebundle_()
    alt = "A small empty figure titled n=4, one per step."
    assert metadata == {"image/png": {"alt": alt}, "attnlab": {"alt_derived": False}}
    assert bundle["text/html"].endswith(f' alt="{alt}">') and bundle["image/png"] in bundle["text/html"]
    assert ex.alt_text({"n": 7}) == ("A small empty figure titled n=7, one per step.", False)

    def draw(n=3):
        """Bars of the weights at n."""
        return recorder(n=n)

    derived = explorer(draw, n=(1, 10, 1))
    assert derived.alt_text(derived.defaults) == ("Explorer picture: Bars of the weights at n, drawn with n = 3.", True)
    assert derived._repr_mimebundle_()[1]["attnlab"] == {"alt_derived": True}
    with pytest.raises(ValueError, match="alt must"):
        explorer(recorder, n=(1, 10, 1), alt="a plot")


def test_the_live_picture_of_an_explorer_says_what_it_shows_now(recorder):
    ex = explorer(recorder, n=(1, 10, 1), alt=lambda n: f"A small empty figure titled n={n}, one per step.")
    ex.update(n=6)
    png = base64.b64encode(ex._last).decode("ascii")
    assert ex.picture.value == (f'<img style="{PICTURE_STYLE}" src="data:image/png;base64,{png}" '
                                'alt="A small empty figure titled n=6, one per step.">')


def test_a_step_replaces_the_picture_and_displays_nothing_new(recorder, monkeypatch):
    """The picture is shown once, as a widget, and each step only replaces its value: one message to the frontend,
    which does not re-render the explorer's output area (nor send it back to the kernel, which sends it back again).
    After a draw that fails (the traceback replaces the picture), the next picture is shown again."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append(a[0]))
    ex = explorer(recorder, n=(1, 10, 1), alt="A small empty figure, one per step of n.")
    assert shown[-1] is ex.picture and ex._last is not None
    first, count = ex.picture.value, len(shown)
    ex.update(n=6)
    assert len(shown) == count and ex.picture.value != first
    recorder.calls.clear()
    monkeypatch.setattr(ex, "draw", lambda **values: 1 / 0)
    ex.update(n=7)  # ipywidgets shows the error inside the widget
    monkeypatch.setattr(ex, "draw", recorder)
    ex.update(n=8)
    assert shown[-1] is ex.picture and recorder.calls[-1]["n"] == 8


def test_a_step_with_the_picture_on_show_skips_interactives_output(recorder, monkeypatch):
    """interactive would run every step inside its Output widget (capture on and off, clear, four flushes of stdout
    and stderr); a step that only swaps the picture draws outside it. A draw that fails, or that returns no figure,
    runs again inside it, so that the output shows the traceback or the result, as interactive does."""
    ex = explorer(recorder, n=(1, 10, 1), alt="A small empty figure, one per step of n.")
    entered = []
    monkeypatch.setattr(type(ex.widget.out), "__enter__", lambda out: entered.append(out))
    monkeypatch.setattr(type(ex.widget.out), "__exit__", lambda out, *exc: None)
    ex.update(n=6)
    assert entered == [] and recorder.calls[-1]["n"] == 6 and ex._last_values["n"] == 6

    def fails(**values):
        recorder.calls.append(values)
        raise ZeroDivisionError

    monkeypatch.setattr(ex, "draw", fails)
    ex.update(n=7)
    assert entered == [ex.widget.out] and [c["n"] for c in recorder.calls[-2:]] == [7, 7], "drawn again inside"
    monkeypatch.setattr(ex, "draw", recorder)
    ex.update(n=8)  # the picture comes back through the output, once
    ex.update(n=9)
    assert len(entered) == 2 and [c["n"] for c in recorder.calls[-2:]] == [8, 9]
    monkeypatch.setattr(ex, "draw", lambda **values: f"n is {values['n']}")
    ex.update(n=3)
    assert len(entered) == 3, "a result that is no figure is shown by interactive, in the output"


def test_every_control_of_an_explorer_has_a_name(recorder):
    import ipywidgets

    ex = explorer(recorder, n=ipywidgets.IntSlider(min=1, max=10), name=["a", "b", "c"],
                  temperature=ipywidgets.FloatSlider(min=0.1, max=5.0, description="T"))
    names = {w._kwarg: (w.description, w.tooltip) for w in ex.widget.kwargs_widgets}
    assert names == {"n": ("n", "n"), "name": ("name", "name"), "temperature": ("T", "T")}


def test_an_explorer_with_sliders_names_their_handles_beside_each_picture(recorder, monkeypatch):
    import IPython.display

    from attnlab.widgets import NAME_SLIDERS_JS

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append(a[0]))
    ex = explorer(recorder, n=(1, 10, 1), alt="A small empty figure, one per step of n.")
    ex.update(n=6)
    scripts = [d for d in shown if isinstance(d, dict) and "application/javascript" in d]
    assert scripts == [{"application/javascript": NAME_SLIDERS_JS}], "one script with the picture, and no text"
    assert shown[-1] is ex.picture
    assert "aria-label" in NAME_SLIDERS_JS and ".attnlab-explorer" in NAME_SLIDERS_JS
    shown.clear()
    explorer(recorder, n=[3, 4, 5], alt="A small empty figure, one per choice of n.")
    assert not any(isinstance(d, dict) and "application/javascript" in d for d in shown), "a dropdown needs no script"
