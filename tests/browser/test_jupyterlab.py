"""The course in a real browser: every notebook run in JupyterLab, driven by Playwright in headless Chromium.

nbval proves the kernel side; these tests check what a learner sees: "Run all" finishes without error outputs, no widget
shows "Error displaying widget", every explorer renders, and moving one control of each explorer changes what it shows.
Screenshots go to ``artifacts/screenshots/`` (git ignores it) and the update times to ``artifacts/explorer_timings.json``:
each explorer of a solution notebook (and of 00) is moved ``STEPS`` times, back and forth, each move timed in the page
from the control's release to the frame that shows the new picture, and its median and max are reported (learner
notebooks share their explorers' code, so one move each checks that they work; one learner notebook runs here, all of
them under nbval).

The learner notebooks are run by ``test_jupyterlab_learner.py``: a module of its own, so that pytest-xdist's
``--dist loadscope`` can give the two halves of the suite to different workers.
"""

from __future__ import annotations

import statistics

import pytest

from . import axe
from .conftest import ARTIFACTS, CHROMIUM, NOTEBOOKS

if not CHROMIUM.exists():
    pytest.skip(f"browser tests skipped: no Chromium at {CHROMIUM} (install it: apt-get install chromium)",
                allow_module_level=True)

RUN_TIMEOUT_MS = 120_000
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on show
UPDATE_TIMEOUT_MS = 20_000
STEPS = 5  # moves per measured explorer

pytestmark = pytest.mark.browser

_STATE_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext || !panel.sessionContext.session) return null;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return {
    kernel: panel.sessionContext.session.kernel ? panel.sessionContext.session.kernel.status : 'none',
    pending: cells.filter(c => c.model.sharedModel.getSource().trim() && c.model.executionCount === null).length,
    busy: cells.filter(c => c.promptNode && c.promptNode.textContent.includes('*')).length,
    errors: cells.flatMap((c, i) => c.model.outputs.toJSON()
        .filter(o => o.output_type === 'error').map(o => `cell ${i}: ${o.ename}: ${o.evalue}`)),
    widgetOutputs: cells.filter(c => c.model.outputs.toJSON()
        .some(o => o.data && o.data['application/vnd.jupyter.widget-view+json'])).length,
  };
}"""


def _open_and_run(page, relpath: str) -> dict:
    """Open ``relpath`` in the JupyterLab of ``page`` (the only notebook open), wait for its kernel, run all."""
    page.evaluate("async path => { await window.jupyterapp.commands.execute('docmanager:open',"
                  " {path, factory: 'Notebook'}); }", relpath)
    page.wait_for_function("path => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w && w.context && w.context.path === path && w.sessionContext"
                           " && w.sessionContext.session && w.sessionContext.session.kernel"
                           " && w.sessionContext.session.kernel.status === 'idle'; }",
                           arg=relpath, timeout=RUN_TIMEOUT_MS)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")  # resolves when all ran
    page.wait_for_function(f"() => {{ const s = ({_STATE_JS})(); "
                           "return s && s.kernel === 'idle' && s.pending === 0 && s.busy === 0; }",
                           timeout=RUN_TIMEOUT_MS, polling=250)
    page.wait_for_timeout(500)  # let the last outputs render
    return page.evaluate(f"({_STATE_JS})()")


def _close(page) -> None:
    """Shut the notebook's kernel down and close its panel, without asking: the next test opens its own."""
    page.evaluate("""async () => { const w = window.jupyterapp.shell.currentWidget;
      if (!w) return; if (w.sessionContext) await w.sessionContext.shutdown(); w.dispose(); }""")


def _full_screenshot(page, path) -> None:
    """The whole notebook, not just the viewport: grow the window to the notebook's height for one screenshot."""
    height = page.evaluate(f"() => {{ const n = document.querySelector('{PANEL} .jp-WindowedPanel-outer'); "
                           "if (!n) return 0; n.scrollTop = 0; return n.scrollHeight; }")
    original = page.viewport_size
    page.set_viewport_size({"width": original["width"], "height": min(max(height + 200, original["height"]), 30_000)})
    page.wait_for_timeout(300)
    page.screenshot(path=str(path), type="jpeg", quality=85)  # a PNG this tall took 2.4-3.7 s to encode
    page.set_viewport_size(original)


def _explorer_view(explorer) -> str:
    """What an explorer (a locator or an element handle) currently shows: its images' sources and its output text."""
    return explorer.evaluate(_VIEW_JS)


_VIEW_JS = """e => {
  const out = e.querySelector('.widget-output') || e;
  return Array.from(out.querySelectorAll('img')).map(i => i.src.slice(-200)).join('|') + '#' + out.innerText;
}"""


# The time a learner waits is measured in the page, from the event that lets the control go (pointerup, or change for
# a dropdown) to the first animation frame after the explorer's output last changed: what the browser paints next.
# Python's own clock would start late, when Playwright's mouse.up returns, which is after the page has handled the
# release (a style recalculation of the whole notebook there, 50-60 ms in a trace of 06, that the learner waits for
# too) and would end late, when a poll from Python sees the new picture.
_TIMING_JS = """e => {
  if (e.attnlabTiming) return;
  const out = e.querySelector('.widget-output') || e;
  const timing = e.attnlabTiming = {armed: false, release: null, changed: null, frame: null};
  new MutationObserver(() => {
    const at = performance.now();
    timing.changed = at;
    requestAnimationFrame(() => { if (timing.changed === at) timing.frame = performance.now(); });
  }).observe(out, {subtree: true, childList: true, characterData: true, attributes: true});
  const release = () => { if (timing.armed && timing.release === null) timing.release = performance.now(); };
  for (const type of ['pointerup', 'change']) document.addEventListener(type, release, true);
}"""
_ARM_JS = "e => { Object.assign(e.attnlabTiming, {armed: true, release: null}); }"
# An explorer whose slider redraws while it is dragged (continuous_update) may show its last picture before the
# release: the learner then waits for nothing, 0 ms.
_WAITED_JS = """e => { const t = e.attnlabTiming; t.armed = false;
  return t.release === null || t.frame === null ? null : Math.max(0, t.frame - t.release); }"""


def _drive(page, explorer, arm=lambda: None) -> str:
    """Move one control the way a learner would, calling ``arm()`` just before letting it go; return what was done.

    Everything the move needs from the page is read before the control is let go: finding an element by a selector
    makes Playwright search the whole notebook's DOM on the page's main thread (a JavaScript profile of 06's explorer:
    10-15 ms a search), which would hold up the reply and the new picture being timed."""
    slider = explorer.locator(".noUi-handle").first
    if slider.count():
        box = slider.bounding_box()
        track = explorer.locator(".noUi-target").first.bounding_box()
        label = explorer.locator(".widget-slider .widget-label").first
        action = f"dragged slider {label.inner_text() if label.count() else ''}".strip()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        target_x = track["x"] + track["width"] * (0.85 if box["x"] < track["x"] + track["width"] / 2 else 0.15)
        page.mouse.move(target_x, box["y"] + box["height"] / 2, steps=8)
        arm()
        page.mouse.up()
        return action
    select = explorer.locator("select").first
    if select.count():
        options = select.locator("option").all_inner_texts()
        current = select.input_value()
        choice = next(o for o in options if o != current)
        handle = select.element_handle()
        arm()
        handle.select_option(label=choice)
        return f"picked {choice!r}"
    checkbox = explorer.locator("input[type=checkbox]").first
    if checkbox.count():
        handle = checkbox.element_handle()
        arm()
        handle.click()
        return "toggled checkbox"
    raise AssertionError("explorer has no slider, dropdown or checkbox to drive")


MEASURED_NOTEBOOKS = [n for n in NOTEBOOKS if n.startswith(("solutions/", "00_"))]
# The learner notebooks run by test_jupyterlab_learner.py: one, as the learner's path in the browser (its stubs and
# checks after "Run all"). Every learner notebook runs under nbval, and its explorers are the solution's own code, driven
# above; running all eight again in JupyterLab cost 3.5 minutes of the suite's 15 and found nothing nbval did not.
LEARNER_NOTEBOOKS = [n for n in NOTEBOOKS if n not in MEASURED_NOTEBOOKS and n.startswith("02_")]


@pytest.mark.parametrize("relpath", MEASURED_NOTEBOOKS)
def test_notebook_runs_in_jupyterlab(relpath, lab_page, timings):
    run_and_check(relpath, lab_page, timings)


def run_and_check(relpath, page, timings):
    """Open ``relpath`` in JupyterLab, run all, check what a learner sees and drive every explorer."""
    try:
        state = _open_and_run(page, relpath)
        _check_notebook(page, relpath, state, timings)
    finally:  # free the kernel and the page for the next notebook
        _close(page)


def _check_notebook(page, relpath, state, timings):
    shots = ARTIFACTS / "screenshots"
    stem = relpath.replace("/", "__").removesuffix(".ipynb")
    _full_screenshot(page, shots / f"{stem}.jpg")

    assert state["errors"] == [], f"{relpath}: error outputs after Run all: {state['errors']}"
    text = page.locator(PANEL).inner_text()
    assert "Error displaying widget" not in text, f"{relpath}: a widget failed to render"
    assert "Model not found" not in text

    explorers = page.locator(f"{PANEL} .attnlab-explorer")
    # every notebook has an explorer, and every widget output of the notebook rendered as one
    assert state["widgetOutputs"] >= 1, f"{relpath}: no explorer was displayed"
    assert explorers.count() == state["widgetOutputs"], (
        f"{relpath}: {state['widgetOutputs']} widget outputs but {explorers.count()} explorers rendered")

    for n in range(explorers.count()):
        explorer = explorers.nth(n)
        explorer.scroll_into_view_if_needed()
        handle = explorer.element_handle()  # found once: the waits below must not search the page (see _drive)
        page.wait_for_function("e => e.querySelector('.widget-output img') || "
                               "(e.querySelector('.widget-output') && e.querySelector('.widget-output').innerText.trim())",
                               arg=handle, timeout=UPDATE_TIMEOUT_MS)
        explorer.screenshot(path=str(shots / f"{stem}__explorer{n}_before.png"))
        steps = []
        handle.evaluate(_TIMING_JS)  # watches the output from now on
        for step in range(STEPS if relpath.startswith(("solutions/", "00_")) else 1):
            before = _explorer_view(handle)
            action = _drive(page, explorer, arm=lambda: handle.evaluate(_ARM_JS))
            page.wait_for_function(f"([e, before]) => {{ const now = ({_VIEW_JS})(e);"
                                   " return now !== before && !now.startsWith('#'); }",
                                   arg=[handle, before], timeout=UPDATE_TIMEOUT_MS, polling=20)
            _wait_idle(page)  # the next move starts from a quiet kernel (an explorer may redraw more than once)
            page.wait_for_timeout(50)  # and the last picture's frame has come
            waited = handle.evaluate(_WAITED_JS)
            assert waited is not None, f"{relpath}: explorer {n}: no release or no new picture seen after: {action}"
            steps.append(round(waited / 1000, 3))
            assert _explorer_view(handle) != before, f"{relpath}: explorer {n} did not change after: {action}"
            if step == 0:
                page.wait_for_timeout(200)
                explorer.screenshot(path=str(shots / f"{stem}__explorer{n}_after.png"))
        timings[f"{relpath} explorer {n}"] = {"action": action, "update_seconds": steps[0], "steps_seconds": steps,
                                              "median_seconds": round(statistics.median(steps), 3),
                                              "max_seconds": max(steps)}
        _work_by_keyboard(page, explorer, f"{relpath}: explorer {n}")
    # every control has an accessible name, and nothing else in an explorer breaks a WCAG 2.1 A/AA rule
    if axe.available():
        found = axe.audit(page, within=f"{PANEL} .attnlab-explorer")
        assert found == [], f"{relpath}: WCAG 2.1 A/AA violations in the explorers: {axe.summary(found)}"


def _work_by_keyboard(page, explorer, what: str) -> None:
    """Each slider of ``explorer`` takes the keyboard focus and moves with End and Home, as a keyboard user would."""
    handles = explorer.locator("[role=slider]")
    for h in range(handles.count()):
        handle = handles.nth(h)
        label = handle.get_attribute("aria-label")
        assert label, f"{what}: slider {h} has no accessible name"
        for key in ("End", "Home"):
            before = handle.get_attribute("aria-valuenow")
            handle.focus()
            page.keyboard.press(key)
            page.wait_for_timeout(50)
            if handle.get_attribute("aria-valuenow") != before:
                break
        else:
            raise AssertionError(f"{what}: slider {label!r} did not move with End or Home")
        _wait_idle(page)


def _wait_idle(page) -> None:
    """Wait for the kernel to finish what a move started (an explorer may redraw more than once); slow is no failure."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("() => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;"
                               " return k && k.status === 'idle'; }", timeout=RUN_TIMEOUT_MS, polling=20)
    except PlaywrightTimeout:
        pass
