"""Plot helpers (drawn headless, Agg backend) and the interactive explorer, with and without ipywidgets."""

from __future__ import annotations

import base64
import sys

import numpy as np
import pytest

from attnlab import causal_mask, softmax
from attnlab import plot
from attnlab.widgets import CSS_CLASS, explorer

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
    bundle = ex._repr_mimebundle_()
    assert WIDGET_MIME in bundle and bundle[WIDGET_MIME]["model_id"] == ex.widget.model_id
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert recorder.calls[n_calls:] == [dict(n=4, name="b", flag=True, temperature=1.5)], \
        "the static fallback shows the default state"
    assert recorder.plt.get_fignums() == [], "every figure drawn is closed (none shown twice at the end of a cell)"


def test_draw_may_return_any_displayable(close_figures):
    ex = explorer(lambda word="hi": f"<{word}>", word=["hi", "ho"])
    bundle = ex._repr_mimebundle_()
    assert WIDGET_MIME in bundle and "image/png" not in bundle


# --- explorer without ipywidgets ------------------------------------------------------------------------------------


def test_without_ipywidgets_a_static_bundle_and_no_error(recorder, monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # `import ipywidgets` now raises ImportError
    with pytest.raises(ImportError):
        import ipywidgets  # noqa: F401
    ex = explorer(recorder, n=(1, 10, 1), name=["a", "b", "c"], flag=False, temperature=(0.1, 5.0, 0.1))
    assert ex.widget is None
    bundle = ex._repr_mimebundle_()
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
