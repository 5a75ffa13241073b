"""Interactive explorers for the notebooks, built on ``ipywidgets.interactive``.

An explorer calls ``draw(**values)`` whenever a control changes and shows what it returns (a matplotlib figure, or
anything else IPython can display). It degrades gracefully: the displayed bundle also carries a static picture of the
default state, so a viewer without a widget frontend (GitHub, nbviewer, a plain ``nbconvert``) shows that picture, and
without ipywidgets installed the explorer shows only the picture, with a note, and no error.

Every picture an explorer shows, live or static, carries a text alternative (``alt=``: a str, or a function of the
control values that returns one, so that it can say what the picture shows now), the way :func:`attnlab.plot.show`
carries it: in an HTML ``<img alt>``, in the PNG's metadata and as plain text. Without ``alt=`` it is derived from the
first line of ``draw``'s docstring and the control values, and marked so (``attnlab.alt_derived``): a test of the
notebooks asks for a written one.

The live picture is an ``ipywidgets.HTML`` (``Explorer.picture``: an ``<img>`` with its ``alt``), shown once in the
widget's output; a step only replaces its value. That is one message to the frontend, which swaps one image. Displaying
each picture anew into the output instead (what ``interactive`` does) made JupyterLab re-render the output area, send
the new picture back to the kernel as the output widget's state, and receive it once more as the kernel's echo: about
100 ms of every step, measured in the browser, more than most pictures take to draw.

A slider step should feel immediate, and re-plotting a whole figure can take most of a second. So ``draw`` may keep its
figure: if it has an argument named ``view``, it gets the same namespace on every call, with ``view.fig`` ``None`` the
first time. It builds the figure and its artists then, keeps them on ``view``, and on later calls only updates them
(``set_data``, ``set_height``, ``set_text``, ...). The explorer freezes the figure's layout after the first picture
and redraws only what changed: artists made with ``animated=True`` (whole axes may be animated) are drawn over a
cached picture of everything else, which is drawn again only when something not animated changed. Text, most of
what a step draws, is rasterised once per string and then drawn from memory (``_TextCache``). (A ``draw`` without a
view still works: its new figure is drawn once per step, without IPython's second, tight-bbox pass.)
"""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
import io
import types

CSS_CLASS = "attnlab-explorer"
PICTURE_STYLE = "max-width: 100%; height: auto"
# Live pictures are drawn at the static picture's resolution: a 14-inch figure is then 1008 px wide, about a notebook
# column, instead of 1400 px that the browser scales down anyway; half the pixels to draw, encode, send and decode.
LIVE_DPI = 72

# ipywidgets draws a slider with noUiSlider, whose handle (role="slider", the part that takes the keyboard) has no
# accessible name: its visible label is not tied to it, and ipywidgets 8 offers no way to tie it. A screen reader then
# announces "slider, 3" with no word of what it sets. So an explorer with sliders shows, beside its picture, this
# script: it names every slider handle of its explorer after the slider's label (aria-label), and again whenever
# ipywidgets rebuilds a handle. JupyterLab and Notebook run it (the explorer's outputs are trusted); a frontend that
# does not run scripts shows nothing for it, and the slider works as before.
#
# The same script makes letting go of a slider cheaper. noUiSlider sets the page's <body> cursor while a handle is
# dragged and resets it on release, and every element of the page inherits the cursor from <body>, so the browser
# recomputes the style of the whole notebook twice a move (a trace of 06's explorer in JupyterLab: 2,411 elements,
# about 30 ms of each release, during which the kernel's new picture waits). One rule, added to the page once, gives
# <body>'s children their own cursor ("auto", the default), so a change at <body> stops there. What it gives up: while
# a handle is dragged outside its slider, the pointer shows the cursor of what is under it. JupyterLab's own drags set
# their cursor with !important and are not affected.
NAME_SLIDERS_JS = """(() => {
  if (!document.getElementById('attnlab-slider-release')) {
    const style = document.createElement('style');
    style.id = 'attnlab-slider-release';
    style.textContent = 'body > * { cursor: auto; }';
    document.head.appendChild(style);
  }
  let tries = 0;
  const attach = () => {
    const root = element.closest('.attnlab-explorer');
    if (!root) { if (tries++ < 100) setTimeout(attach, 50); return; }
    const name = () => root.querySelectorAll('.widget-slider').forEach(slider => {
      const label = slider.querySelector('.widget-label');
      const text = label ? label.textContent.trim() : '';
      slider.querySelectorAll('[role=slider]').forEach(handle => {
        if (text && handle.getAttribute('aria-label') !== text) handle.setAttribute('aria-label', text);
      });
    });
    name();
    if (!root.attnlabNamer) {
      root.attnlabNamer = new MutationObserver(name);
      root.attnlabNamer.observe(root, {childList: true, subtree: true});
    }
  };
  attach();
})();"""


def _figure_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72, bbox_inches="tight")
    return buf.getvalue()


def _is_figure(obj) -> bool:
    return type(obj).__name__ == "Figure" and hasattr(obj, "savefig")


def _static_bundle(result, alt: str) -> dict:
    """A mimebundle of ``result`` without widgets: PNG for a figure (with ``alt``), else the object's own reprs."""
    if _is_figure(result):
        import matplotlib.pyplot as plt

        for artist in _animated(result):  # a saved figure leaves out animated figure-level artists: show them all
            artist.set_animated(False)
        png = _figure_png(result)
        plt.close(result)
        return _picture(base64.b64encode(png).decode("ascii"), alt)
    from IPython.core.formatters import format_display_data

    data, _ = format_display_data(result)
    return data


def _picture(png_base64: str, alt: str) -> dict:
    """The static picture's bundle: the PNG with its text alternative, as :func:`attnlab.plot.image_bundle` makes it."""
    from .plot import image_bundle

    data, _ = image_bundle(png_base64, alt)
    data["text/plain"] = f"(explorer, static view) {data['text/plain']}"
    return data


class View(types.SimpleNamespace):
    """What a ``draw`` with a ``view`` argument keeps between calls: ``fig`` (``None`` until the first call builds it)
    and any artists it wants to change later, as attributes."""

    def __init__(self, **kwargs):
        super().__init__(**{"fig": None, **kwargs})


def _animated(fig, *, detach: bool = False) -> list:
    """The figure's animated artists (outermost only: an animated axes draws its own children), in drawing order.

    With ``detach``, a change inside an animated artist (a legend's text, say) stops making the whole figure stale:
    the animated artist is drawn again at every step anyway.
    """
    found = []

    def walk(artist, inside):
        for child in artist.get_children():
            if inside and detach:
                child.stale_callback = None
            if child.get_animated() and not inside:
                found.append(child)
            walk(child, inside or child.get_animated())

    walk(fig, False)
    return sorted(found, key=lambda a: a.get_zorder())


class _TextCache:
    """Text on a live canvas, rendered once per string and font and then blended from memory.

    matplotlib's Agg renderer lays out and rasterises every glyph of every text at every draw; an explorer redraws its
    animated axes' tick labels, titles and annotations at every step, and that text was most of a step's drawing time
    (about half of 02's, in a profile). Here each text's origin is put on a whole pixel, so the glyph bitmaps of a
    string depend only on the string, its font, size and angle: the first draw records them (the ``draw_text_image``
    calls Agg makes) and later draws of the same string anywhere replay them, shifted by whole pixels, in the colour of
    the moment. Texts move by less than half a pixel; the static pictures do not use this.
    """

    LIMIT = 4096  # strings kept; past that the cache starts afresh (titles with numbers in them are all different)

    def __init__(self, renderer):
        self.renderer = renderer
        self.draw_uncached = renderer.draw_text
        self.strings = {}
        self.heights = {}

    def install(self):
        self.renderer.draw_text = self.draw_text
        # matplotlib asks a renderer that has this method for a font's line metrics instead of looking the font up
        # and reading its tables for every text at every draw (Text._get_layout; a tenth of a step of 02's explorer)
        self.renderer._get_font_height_metrics = self.font_height_metrics
        self.renderer.attnlab_text_cache = self

    @staticmethod
    def font_key(prop) -> tuple:
        """What FontProperties hashes, as a key that does not change when ``prop`` is changed later."""
        return (tuple(prop.get_family()), prop.get_style(), prop.get_variant(), prop.get_weight(), prop.get_stretch(),
                prop.get_size_in_points(), prop.get_file(), prop.get_math_fontfamily())

    def font_height_metrics(self, prop) -> tuple:
        """``(ascent, descent, line gap)`` in pixels of the font ``prop``, read once per font, size and resolution,
        with matplotlib's own arithmetic (``Text._get_layout``, 3.11), so that the layout is the same to the bit."""
        key = (self.font_key(prop), self.renderer.dpi)
        metrics = self.heights.get(key)
        if metrics is None:
            metrics = self.heights[key] = _font_height_metrics(prop, self.renderer.dpi)
        return metrics

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath:  # math text goes through another path of Agg's, uncached
            return self.draw_uncached(gc, x, y, s, prop, angle, ismath, mtext)
        x, y = round(x), round(y)
        key = (s, self.font_key(prop), angle, gc.get_antialiased(), self.renderer.dpi,
               repr(mtext.get_fontfeatures()) if mtext is not None else None,
               mtext.get_language() if mtext is not None else None)
        glyphs = self.strings.get(key)
        if glyphs is None:
            if len(self.strings) >= self.LIMIT:
                self.strings.clear()
            self.strings[key] = self._record(gc, x, y, s, prop, angle, mtext)
            return
        agg = self.renderer._renderer
        for image, dx, dy, glyph_angle in glyphs:
            agg.draw_text_image(image, x + dx, y + dy, glyph_angle, gc)

    def _record(self, gc, x, y, s, prop, angle, mtext) -> list:
        """Draw ``s`` the usual way at the whole pixel ``(x, y)``, keeping each glyph's bitmap, offset and angle."""
        import numpy as np

        agg, glyphs = self.renderer._renderer, []

        class Recorder:
            def draw_text_image(self, image, gx, gy, glyph_angle, gc_):
                glyphs.append((np.array(image), gx - x, gy - y, glyph_angle))
                agg.draw_text_image(image, gx, gy, glyph_angle, gc_)

            def __getattr__(self, name):
                return getattr(agg, name)

        self.renderer._renderer = Recorder()
        try:
            self.draw_uncached(gc, x, y, s, prop, angle, False, mtext)
        finally:
            self.renderer._renderer = agg
        return glyphs


def _font_height_metrics(prop, dpi: float) -> tuple:
    """matplotlib's reading of a font's line metrics in ``Text._get_layout``: the OS/2 table's typographic ascender,
    descender and line gap, else the hhea table's, scaled to pixels; ``(None, None, None)`` when the font has neither,
    and matplotlib then measures the font itself."""
    from matplotlib.font_manager import fontManager, get_font

    font = get_font(fontManager._find_fonts_by_props(prop))
    for table_name, linegap_key, ascent_key, descent_key in (
            ("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"), ("hhea", "lineGap", "ascent", "descent")):
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        scale = 1 / font.get_sfnt_table("head")["unitsPerEm"] * prop.get_size_in_points() * dpi / 72
        return table[ascent_key] * scale, -table[descent_key] * scale, table[linegap_key] * scale
    return None, None, None


class _LiveCanvas:
    """Renders a figure that persists between calls: full draws only when something not animated changed."""

    def __init__(self):
        self.fig = None
        self.background = None
        self.animated = []

    def png(self, fig) -> bytes:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        if not isinstance(fig.canvas, FigureCanvasAgg):
            FigureCanvasAgg(fig)
        canvas = fig.canvas
        if fig is not self.fig and fig.dpi > LIVE_DPI:
            fig.set_dpi(LIVE_DPI)  # before the first draw, so that the layout is made at this size
        renderer = canvas.get_renderer()
        if getattr(renderer, "attnlab_text_cache", None) is None:  # a new renderer: a new cache
            _TextCache(renderer).install()
        if fig is not self.fig or fig.stale or self.background is None:
            canvas.draw()  # everything not animated; the layout engine runs here, once
            if fig.get_layout_engine() is not None and self.fig is not fig:
                fig.set_layout_engine("none")  # frozen: later draws keep the first layout
            self.background = canvas.copy_from_bbox(fig.bbox)
            self.animated = _animated(fig, detach=True)
            self.fig = fig
        else:
            canvas.restore_region(self.background)
        for artist in self.animated:
            artist.draw(renderer)
        fig.stale = False
        return _rgba_png(canvas.buffer_rgba())


def _rgba_png(buffer) -> bytes:
    """PNG of an RGBA canvas buffer, at the fastest compression (the picture is sent once and replaced soon).

    The buffer is encoded as it is, RGBA, without copying: dropping the alpha channel first costs a copy of every
    pixel, more than the encoder saves on the smaller input."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(buffer)  # (height, width, 4), uint8
    out = io.BytesIO()
    Image.frombuffer("RGBA", (pixels.shape[1], pixels.shape[0]), pixels, "raw", "RGBA", 0, 1).save(
        out, format="png", compress_level=1)
    return out.getvalue()


def _recompressed(png: bytes) -> str:
    """A PNG re-encoded at the usual compression, base64: the live pictures are compressed fast, not small."""
    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(out, format="png")  # the figure is opaque: no alpha to keep
    return base64.b64encode(out.getvalue()).decode("ascii")


@functools.cache
def _interactive_class():
    """``ipywidgets.interactive``, whose steps skip its output once the explorer's picture is on show.

    ``interactive`` runs every step inside its ``Output`` widget: it tells the frontend to capture the step's messages
    and to stop, clears the output, and flushes stdout and stderr on the way in and out, each flush a round trip to the
    kernel's I/O thread (measured: 12 flushes a step for 04's explorer, about 9 ms of its 50-75). A step that only swaps
    the picture needs none of that, so it draws directly (``Explorer._step``). The first picture, a draw that raises
    and a draw that returns something else than a figure still go through ``interactive`` (the draw runs again there):
    its output shows the traceback, or the result, as before.
    """
    import ipywidgets

    class Interactive(ipywidgets.interactive):
        explorer = None  # set once built: interactive draws the first picture in __init__, through its output

        def update(self, *args):
            ex = self.explorer
            if ex is not None and ex._picture_shown:
                self.kwargs = {w._kwarg: w.get_interact_value() for w in self.kwargs_widgets}
                try:
                    if ex._step(self.kwargs):
                        return
                except Exception:
                    pass  # drawn again below, in the output, which shows the traceback
                ex._picture_shown = False
            super().update(*args)

    return Interactive


class Explorer:
    """The object :func:`explorer` returns; display it (last line of a cell) to show it.

    ``widget`` is the ``ipywidgets.interactive`` (``None`` without ipywidgets); ``update(**values)`` sets controls the
    way a learner would, which is how the tests drive it.
    """

    def __init__(self, draw, controls: dict, alt=None):
        from .plot import check_alt  # importing attnlab.plot sets the course's palette before the first drawing

        if alt is not None and not callable(alt):
            check_alt(alt)
        self.draw = draw
        self.alt = alt
        self.defaults = {}
        self.live = "view" in inspect.signature(draw).parameters and "view" not in controls
        self.view = View()  # what a live `draw` keeps between the widget's calls
        self._canvas = _LiveCanvas()
        self._held, self._last, self._last_values = False, None, None
        self._has_sliders = False
        self.picture, self._picture_shown = None, False  # the picture widget, and whether the output shows it
        try:
            import ipywidgets
        except ImportError:
            ipywidgets = None
        signature = inspect.signature(draw).parameters
        start = {name: signature[name].default if name in signature else inspect.Parameter.empty for name in controls}
        if ipywidgets is None:
            self.widget = None
            self.defaults = {name: _default_value(c, start[name]) for name, c in controls.items()}
            return
        # a control starts at the default of the matching argument of `draw`, when it has one
        made = {name: ipywidgets.interactive.widget_from_abbrev(c, start[name]) for name, c in controls.items()}
        for name, control in made.items():
            # an explicit widget starts at draw's default too (IntSlider's own default would be 0 or its min)
            if start[name] is not inspect.Parameter.empty and getattr(control, "value", start[name]) != start[name]:
                control.value = start[name]
            if hasattr(control, "style") and hasattr(control.style, "description_width"):
                control.style.description_width = "initial"  # show whole labels, not "temperat..."
            if hasattr(control, "description") and not control.description:
                control.description = name  # every control has a visible label, its accessible name
            if hasattr(control, "tooltip") and not control.tooltip:
                control.tooltip = control.description
        # every slider view of ipywidgets (int, float, log, range, selection) is a noUiSlider
        self._has_sliders = any(getattr(c, "_view_name", "").endswith("SliderView") for c in made.values())
        # the picture: an HTML widget whose value is replaced at each step (see _show)
        self.picture = ipywidgets.HTML(layout=ipywidgets.Layout(width="100%", margin="0"))
        self.widget = _interactive_class()(self._show, **made)
        self.widget.explorer = self
        self.widget.add_class(CSS_CLASS)
        self.defaults = dict(self.widget.kwargs)

    def alt_text(self, values: dict) -> tuple[str, bool]:
        """The text alternative of the picture for these control values, and whether it was derived (not written)."""
        from .plot import check_alt

        if callable(self.alt):
            return check_alt(self.alt(**values)), False
        if self.alt is not None:
            return check_alt(self.alt), False
        doc = (inspect.getdoc(self.draw) or "").strip().split("\n")[0].rstrip(".")
        state = ", ".join(f"{name} = {value}" for name, value in values.items())
        return check_alt(f"Explorer picture{': ' + doc if doc else ''}, drawn with {state or 'no controls'}."), True

    def _bundle(self, png_base64: str, values: dict) -> tuple[dict, dict]:
        from .plot import image_bundle

        alt, derived = self.alt_text(values)
        data, metadata = image_bundle(png_base64, alt)
        metadata["attnlab"] = {"alt_derived": derived}
        return data, metadata

    def _call(self, values: dict, view):
        return self.draw(**values, view=view) if self.live else self.draw(**values)

    def _show(self, **values):
        """``interactive``'s function, run inside its output: draw, and show the picture (or what draw returned)."""
        from IPython.display import display

        if self._held and self._last is not None:
            return  # the picture stays as it is while controls are held
        try:
            result = self._call(values, self.view)
        except BaseException:
            self._picture_shown = False  # the widget shows the traceback instead of the picture
            raise
        if not _is_figure(result):
            self._picture_shown = False
            display(result)
            return
        data, metadata = self._picture_of(result, values)
        if self.picture is None:  # no ipywidgets (only a direct call gets here): the picture as an output
            display(data, raw=True, metadata=metadata)
            return
        if not self._picture_shown:
            if self._has_sliders:  # no text/plain: a frontend that runs no scripts shows nothing
                display({"application/javascript": NAME_SLIDERS_JS}, raw=True)
            display(self.picture)
            self._picture_shown = True

    def _step(self, values: dict) -> bool:
        """A step while the picture is on show, outside ``interactive``'s output: draw and swap the picture. False,
        with nothing shown, when draw returned no figure."""
        if self._held and self._last is not None:
            return True
        result = self._call(values, self.view)
        if not _is_figure(result):
            return False
        self._picture_of(result, values)
        return True

    def _picture_of(self, fig, values: dict) -> tuple[dict, dict]:
        """Render ``fig`` (closed: it is shown inside the explorer only), put it in the picture widget, return its
        bundle."""
        import matplotlib.pyplot as plt

        plt.close(fig)  # not shown again at the end of the cell
        if self.live and fig is not self.view.fig:
            self._picture_shown = False
            raise ValueError("a draw with a view must build view.fig once and return it, got another figure")
        # rendered here rather than by IPython: one draw (no tight-bbox pass), partial when the figure persists
        canvas = self._canvas if self.live else _LiveCanvas()
        self._last = canvas.png(fig)
        self._last_values = dict(values)
        data, metadata = self._bundle(base64.b64encode(self._last).decode("ascii"), values)
        if self.picture is not None:
            # as wide as the output at most, like a picture in an output area (a wider one would make it scroll)
            self.picture.value = data["text/html"].replace("<img ", f'<img style="{PICTURE_STYLE}" ', 1)
        return data, metadata

    @contextlib.contextmanager
    def hold(self):
        """Change controls without redrawing (the picture stays), e.g. to keep one control consistent with another."""
        self._held = True
        try:
            yield self
        finally:
            self._held = False

    def update(self, **values) -> None:
        """Set controls by name, as a learner moving a slider would."""
        if self.widget is None:
            raise RuntimeError("ipywidgets is not installed; this explorer is static")
        controls = {w._kwarg: w for w in self.widget.kwargs_widgets}
        for name, value in values.items():
            if name not in controls:
                raise ValueError(f"no control named {name!r}; expected one of {sorted(controls)}")
            controls[name].value = value

    def _repr_mimebundle_(self, include=None, exclude=None):
        alt, derived = self.alt_text(self.defaults)
        if self._last is not None and self._last_values == self.defaults:  # the widget already drew the defaults:
            static = _picture(_recompressed(self._last), alt)                 # that picture, not a second drawing
        else:
            static = _static_bundle(self._call(self.defaults, View()), alt)  # a figure of its own
        metadata = {"image/png": {"alt": alt}, "attnlab": {"alt_derived": derived}} if "image/png" in static else {}
        if self.widget is None:
            static["text/plain"] = f"(static view: install ipywidgets to make this explorer interactive) {alt}"
            return static, metadata
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude)
        # a frontend with widget support shows the widget; any other shows the static picture instead of plain text
        for mime, value in static.items():
            if mime != "text/plain":
                bundle.setdefault(mime, value)
        return bundle, metadata


def _default_value(control, start):
    """The value a control abbreviation starts at, as ``ipywidgets.interactive`` would choose it."""
    if start is not inspect.Parameter.empty:
        return start
    if hasattr(control, "value"):
        return control.value
    if isinstance(control, tuple) and len(control) >= 2 and all(isinstance(c, (int, float)) for c in control):
        lo, hi = control[0], control[1]
        return type(lo)((lo + hi) / 2) if isinstance(lo, float) else (lo + hi) // 2
    if isinstance(control, (list, tuple)) and control:
        first = control[0]
        return first[1] if isinstance(first, tuple) and len(first) == 2 else first
    return control


def explorer(draw, /, *, alt=None, **controls) -> Explorer:
    """Make an explorer: ``draw(**values)`` is called with the value of every control.

    ``alt`` is the text alternative of its picture: what it shows and what to notice, as a str, or a function of the
    control values (called like ``draw``) that returns one. Without it, one is derived from ``draw``'s docstring.

    Controls are ``ipywidgets`` widgets or the abbreviations ``ipywidgets.interact`` understands: ``(min, max, step)``
    for a slider, a list for a dropdown, a bool for a checkbox. A control starts at the default value of the matching
    argument of ``draw``.

    A ``draw`` with an argument named ``view`` keeps its figure between calls (see the module docstring): it gets the
    same :class:`View` every time, builds ``view.fig`` when it is ``None`` and afterwards only updates the artists;
    those made with ``animated=True`` are redrawn over a cached picture of the rest, which makes a step several times
    faster. The static picture (GitHub, nbval) is the widget's first picture when it shows the defaults, else it comes
    from a call with a fresh view; either way it shows every artist.

    Examples
    --------
    In a notebook, ``draw`` returns a figure and the explorer is the last expression of its cell. Here ``draw``
    returns text, and what it shows outside a notebook is swallowed, so that the example runs anywhere:

    >>> import contextlib, io
    >>> import numpy as np
    >>> from attnlab import softmax
    >>> def draw(temperature=1.0):
    ...     return softmax(np.array([1.0, 2.0, 3.0]) / temperature).round(2)
    >>> with contextlib.redirect_stdout(io.StringIO()):
    ...     ex = explorer(draw, temperature=(0.1, 5.0, 0.1))
    ...     ex.update(temperature=0.5)  # what a learner moving the slider does
    >>> ex.defaults, ex.widget.kwargs
    ({'temperature': 1.0}, {'temperature': 0.5})
    """
    if not callable(draw):
        raise ValueError(f"draw must be a function of the control values, got {type(draw).__name__}")
    return Explorer(draw, controls, alt)
