"""Fixtures for the browser tests: a JupyterLab server on a free loopback port and a headless Chromium page.

JupyterLab runs from this environment with Galata's test configuration (no token, the Galata helper extension), on a
copy of the notebooks in a temporary folder so that running them never rewrites the course's stored outputs.
``ATTNLAB_BROWSER_NOTEBOOKS`` names another notebooks folder to copy instead (e.g. to measure a branch's explorers),
``ATTNLAB_ARTIFACTS`` another folder for the screenshots and timings.

The explorers' update times (from the release of a control to the new picture) are written to
``artifacts/explorer_timings.json`` and summed up at the end of the run, median and max per explorer; they are
measured, not asserted.
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from helpers import ARTIFACTS, EXPLORER_TIMINGS

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = pathlib.Path(os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium"))
SOURCE = pathlib.Path(os.environ.get("ATTNLAB_BROWSER_NOTEBOOKS", ROOT / "notebooks")).resolve()
NOTEBOOKS = sorted(str(p.relative_to(SOURCE)) for p in SOURCE.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
MEASURED: dict[str, dict] = {}  # explorer -> its update times, filled by the tests; summed up by tests/conftest.py

SETTINGS = {
    # attach every cell to the page, so that what the test checks is what a learner scrolling down would see
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """Base URL of a JupyterLab server running the course's notebooks (copies) from this environment."""
    work = tmp_path_factory.mktemp("lab")
    shutil.copytree(SOURCE, work / "root", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for name, value in SETTINGS.items():
        path = work / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port = _free_port()
    config = work / "jupyter_server_config.py"
    config.write_text(
        "from jupyterlab.galata import configure_jupyter_server\n"
        "configure_jupyter_server(c)\n"
        f"c.ServerApp.port = {port}\n"
        "c.ServerApp.ip = '127.0.0.1'\n"
        "c.ServerApp.allow_root = True\n"
        f"c.ServerApp.root_dir = {str(work / 'root')!r}\n"
        f"c.LabApp.user_settings_dir = {str(work / 'settings')!r}\n"
        "c.LabApp.check_for_updates_class = 'jupyterlab.NeverCheckForUpdate'\n"
    )
    # warm up matplotlib's font cache in this environment so the first notebook does not spend its time building it
    subprocess.run([sys.executable, "-c", "import matplotlib.pyplot as plt; plt.figure()"], check=True)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(work / "config"), "JUPYTER_RUNTIME_DIR": str(work / "runtime")}
    log = open(work / "lab.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", f"--config={config}", "--no-browser"],
                              stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{base}/lab", timeout=5) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"JupyterLab did not start; its log:\n{(work / 'lab.log').read_text()[-3000:]}")
        time.sleep(0.5)
    yield base
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                  "--disable-background-networking", "--disable-component-update"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="module")
def lab_page(browser, lab):
    """One JupyterLab page for a module's notebooks, loaded once: each test opens its notebook in it and closes it
    after (loading JupyterLab's application took 3.6-3.8 s per notebook on an idle machine)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{lab}/lab?reset", wait_until="domcontentloaded")  # ?reset: no restored tabs
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started", timeout=120_000)
    page.evaluate("() => window.jupyterapp.restored")
    yield page
    context.close()


@pytest.fixture(scope="session")
def timings():
    """Explorer update times, written to artifacts/explorer_timings.json when the session ends."""
    (ARTIFACTS / "screenshots").mkdir(parents=True, exist_ok=True)
    yield MEASURED
    for entry in MEASURED.values():
        entry["measured_at"] = time.time()
    with open(ARTIFACTS / ".explorer_timings.lock", "w") as lock:  # two workers may finish at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = json.loads(EXPLORER_TIMINGS.read_text()) if EXPLORER_TIMINGS.exists() else {}
        EXPLORER_TIMINGS.write_text(json.dumps({**previous, **MEASURED}, indent=2, sort_keys=True) + "\n")
