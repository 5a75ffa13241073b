"""pytest plugin loaded by :mod:`attnlab.grader` in its nbval run (``-p attnlab._nbval_hooks``); not for direct use.

It does two things nbval cannot be told on its command line:

* per-cell timeouts: the cells of an exercise (metadata ``attnlab``) get ``--nbval-cell-timeout``; the notebook's own
  cells, which come from the solution notebook, get the more generous ``--attnlab-setup-timeout``;
* a record of every cell nbval ran, written as JSON to ``--attnlab-record`` at the end of the session: the cell's
  ``attnlab`` metadata, nbval's outcome and message, and the fresh outputs (images dropped, text truncated). nbval
  keeps running the cells after a timeout but marks them xfail; the record keeps the real outcome of each.
"""

from __future__ import annotations

import json
import re

import pytest

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MAX_TEXT = 4000
_records: list[dict] = []


def pytest_addoption(parser):
    group = parser.getgroup("attnlab", "attnlab grader")
    group.addoption("--attnlab-record", help="write the record of every nbval cell to this JSON file")
    group.addoption("--attnlab-setup-timeout", type=float, default=120.0,
                    help="timeout in seconds for the cells that are not part of an exercise")


def _short(text: str) -> str:
    text = _ANSI.sub("", text)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "\n... (truncated)"


def _output(out) -> dict:
    kind = out.get("output_type")
    if kind == "stream":
        return {"output_type": kind, "name": out.get("name"), "text": _short(out.get("text", ""))}
    if kind == "error":
        return {"output_type": kind, "ename": out.get("ename"), "evalue": _short(out.get("evalue", "")),
                "traceback": [_short(line) for line in out.get("traceback", [])[-20:]]}
    return {"output_type": kind, "text": _short(str(out.get("data", {}).get("text/plain", "")))}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    option = item.config.option
    if not hasattr(item, "cell") or not option.attnlab_record:
        yield
        return
    exercise_timeout = option.nbval_cell_timeout
    if "attnlab" not in item.cell.metadata:
        option.nbval_cell_timeout = max(option.attnlab_setup_timeout, exercise_timeout)
    try:
        yield
    finally:
        option.nbval_cell_timeout = exercise_timeout


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    if not hasattr(item, "cell") or call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
        return
    failed = call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception)
    _records.append({
        "cell_num": item.cell_num,
        "first_line": _short(item.cell.source.strip().split("\n")[0][:80]),
        "attnlab": item.cell.metadata.get("attnlab"),
        "when": call.when,
        "ok": not failed,
        "message": _short(str(call.excinfo.value)) if failed else "",
        "outputs": [_output(o) for o in (getattr(item, "test_outputs", None) or [])],
    })


def pytest_sessionfinish(session):
    path = session.config.option.attnlab_record
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_records, f, indent=1)
