"""pytest plugin loaded by the grader into its nbval run (``-p attnlab_course.grading.nbval_hooks``); not for direct use.

This pytest process is the trusted side of a grading; nbval runs the grading notebook's cells in the learner's
kernel, and this plugin

* starts that kernel in its sandbox (:mod:`.sandbox`) when the grading asks for one: nbval's kernel start is
  replaced by one that talks to the kernel over Unix sockets in the sandbox's own folder;
* hands nbval the kernel that the grading's entry point launched before pytest loaded (:mod:`.kernel`), while the
  runner is still building the notebook, and makes the run wait for the notebook to appear;
* listens on the check socket (mode 0600, in the grading's private runtime folder) and, while nbval runs a check
  cell, judges that exercise (:mod:`.trusted`): the kernel's ``check`` connects and first says hello with the
  grading's secret key (:func:`accept_kernel` closes any other connection), the checker runs here and calls the
  learner's function across the socket;
* gives the cells of an exercise (metadata ``attnlab``) ``--nbval-cell-timeout`` and the notebook's own cells, which
  come from the solution notebook, the more generous ``--attnlab-setup-timeout``;
* settles each exercise's one :class:`~attnlab.exercises._protocol.Verdict` here, when its cells have run: from the
  judge, from a failed exercise cell, and from nbval's comparison of the check cell's output
  (:func:`.trusted.exercise_cell_verdict`, :func:`.trusted.check_cell_verdict`), and when the kernel stops
  (:func:`.trusted.kernel_stopped_verdict`);
* writes those verdicts, and where each cell starts and the kernel stops, to ``--attnlab-record`` (:mod:`.record`),
  line by line, so that a grading stopped by its deadline still tells what it had found.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from . import kernel, record

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MAX_TEXT = 4000
_state: dict = {}


def pytest_addoption(parser):
    group = parser.getgroup("attnlab", "attnlab grader")
    group.addoption("--attnlab-record", help="append the record of every nbval cell to this JSON-lines file")
    group.addoption("--attnlab-setup-timeout", type=float, default=120.0,
                    help="timeout in seconds for the cells that are not part of an exercise")
    group.addoption("--attnlab-grading", help="the grading's configuration (JSON): check socket, tokens, sandbox")


def _short(text: str) -> str:
    text = _ANSI.sub("", str(text))
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "\n... (truncated)"


def _output(out) -> dict:
    kind = out.get("output_type")
    if kind == "stream":
        return {"output_type": kind, "name": out.get("name"), "text": _short(out.get("text", ""))}
    if kind == "error":
        return {"output_type": kind, "ename": _short(out.get("ename", "")), "evalue": _short(out.get("evalue", "")),
                "traceback": [_short(line) for line in out.get("traceback", [])[-20:]]}
    return {"output_type": kind, "text": _short(str(out.get("data", {}).get("text/plain", "")))}


def _append(kind: str, **fields) -> None:
    if _state.get("record"):
        record.append(_state["record"], kind, **fields)


# --- the kernel, in its sandbox ---------------------------------------------------------------------------------


def _connect(km, startup_timeout: float):
    """nbval's ``start_new_kernel`` from the launch on: a client, once the kernel answers."""
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=startup_timeout)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc


def _kernel_starter(grading: dict, early=None):
    """A replacement for nbval's ``start_new_kernel``. ``early`` is a kernel launched before the notebook was ready
    (:func:`.kernel.start_early`): nbval's first call connects to it, later calls (a restart) start new ones."""

    def start(startup_timeout=60, kernel_name="python", **kwargs):
        if early is not None and not early.get("taken"):
            early["taken"] = True
            if "error" in early:
                raise early["error"]
            return _connect(early["km"], startup_timeout)
        return _connect(kernel.launch(grading, kernel_name, **kwargs), startup_timeout)

    return start


def pytest_configure(config):
    _state["record"] = config.option.attnlab_record
    if config.option.attnlab_record:
        Path(config.option.attnlab_record).write_text("", encoding="utf-8")
    path = config.option.attnlab_grading
    if not path:
        return
    grading = json.loads(Path(path).read_text(encoding="utf-8"))
    from attnlab import exercises

    exercises._SECRET = int(grading["seed"])  # before any checker module is imported: their inputs depend on it
    exercises._load_all()
    if hasattr(socket, "AF_UNIX"):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(grading["socket"])
        os.chmod(grading["socket"], 0o600)  # in a folder of mode 0700 too: only the sandbox's uid connects to it
        if grading.get("uid") is not None:
            os.chown(grading["socket"], grading["uid"], grading["uid"])
    else:  # Windows: loopback TCP (never sandboxed there)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        grading["socket"] = f"tcp:{listener.getsockname()[1]}"
    listener.listen(8)
    _state.update(grading=grading, listener=listener)
    import nbval.kernel

    early = kernel.EARLY
    if grading.get("notebook"):
        if early is None:  # pytest started some other way than by the grading's entry point
            early = kernel.launch_early(grading, Path(grading["notebook"]))
        _wait_for(Path(grading["notebook"]), float(grading.get("notebook_wait", 120)))
    nbval.kernel.start_new_kernel = _kernel_starter(grading, early)
    nbval.kernel.RunningKernel.get_message = _while_alive(nbval.kernel.RunningKernel.get_message)


def _while_alive(get_message, poll: float = 0.1):
    """nbval's wait for a kernel message, cut short when the kernel has died: nbval waits out the cell's timeout,
    then as long again for output, before it sees that a dead kernel will never answer (13 s lost per grading whose
    kernel exits, crashes or is killed)."""
    from queue import Empty

    def wait(self, stream, timeout=None):
        give_up = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll if give_up is None else min(poll, max(0.0, give_up - time.monotonic()))
            try:
                return get_message(self, stream, timeout=left)
            except Empty:
                if not self.is_alive() or (give_up is not None and time.monotonic() >= give_up):
                    raise

    return wait


def _wait_for(path: Path, seconds: float) -> None:
    """Wait until the runner has written the notebook (it appears complete, by a rename), at most ``seconds``."""
    give_up = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < give_up:
        time.sleep(0.005)


# --- judging a check cell ----------------------------------------------------------------------------------------


def _drain(listener) -> None:
    """Close connections made before this check cell started (learner code cannot queue one up in advance)."""
    listener.setblocking(False)
    try:
        while True:
            conn, _ = listener.accept()
            conn.close()
    except (BlockingIOError, OSError):
        pass
    finally:
        listener.setblocking(True)


def accept_kernel(listener, key: str, give_up: float, done: threading.Event | None = None, hello_seconds=5.0):
    """The next connection whose first message is :class:`~attnlab.exercises._protocol.Hello` with this grading's
    key, and its second message, a :class:`~attnlab.exercises._protocol.Begin`; None when none comes before
    ``give_up`` (or ``done`` is set). Connections that do not start so (another user's, or one that says nothing for
    ``hello_seconds``) are closed and the wait goes on."""
    from attnlab.exercises import _protocol, _wire

    listener.settimeout(0.1)
    while True:  # until the kernel's check connects, or the check cell ends without it
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            if (done is not None and done.is_set()) or time.monotonic() > give_up:
                return None  # the kernel's check never called: the check cell failed before it, or check was replaced
            continue
        except OSError:
            return None
        try:
            hello = _protocol.recv(conn, time.monotonic() + hello_seconds, expect=(_protocol.Hello,))
            if hmac.compare_digest(hello.key.encode(), key.encode()):
                return conn, _protocol.recv(conn, time.monotonic() + hello_seconds, expect=(_protocol.Begin,))
        except (OSError, _wire.WireError, ConnectionError, TimeoutError):
            pass
        conn.close()


def _judge_one(exercise_id: str, timeout: float, result: dict) -> None:
    from . import trusted

    grading, listener = _state["grading"], _state["listener"]
    give_up = time.monotonic() + timeout + grading.get("connect_slack", 10.0)
    accepted = accept_kernel(listener, grading.get("key", ""), give_up, result["done"], max(timeout, 5.0))
    if accepted is None:
        return
    conn, begin = accepted
    conn.settimeout(timeout)
    with conn:
        if begin.exercise != exercise_id:
            verdict = trusted.Verdict(exercise_id, "failed", "the check cell checked another exercise "
                                                             f"({begin.exercise[:20]!r})")
        else:
            upto = grading["order"][: grading["order"].index(exercise_id) + 1]
            sources = [grading["sources"][e] for e in upto if e in grading["sources"]]
            verdict = trusted.judge(exercise_id, conn, timeout, sources, grading["graded"].get(exercise_id))
        result["verdict"] = verdict
        trusted.tell_kernel(conn, verdict, grading["tokens"][exercise_id])
    if verdict.status == "timed out":
        _interrupt_kernel()
        if not result["done"].wait(timeout=5):
            _kill_kernel()  # the interrupt did not end the cell (SIGINT ignored?): stop the kernel; the run goes on


def _interrupt_kernel() -> None:
    km = kernel.LAUNCHED.get("km")
    if km is not None:
        try:
            km.interrupt_kernel()
        except Exception:  # the kernel is gone already: nothing to interrupt
            pass


def _kill_kernel() -> None:
    import signal

    process = getattr(getattr(kernel.LAUNCHED.get("km"), "provisioner", None), "process", None)
    if process is not None and process.poll() is None:
        try:
            os.kill(process.pid, signal.SIGKILL)  # the sandbox's bubblewrap: its PID namespace goes with it
        except OSError:
            pass


def pytest_collection_modifyitems(items):
    """Note which exercises this run grades (their check cells): those a kernel that stops leaves ungraded."""
    _state["present"] = [meta["exercise"] for meta in (getattr(i, "cell", {}).get("metadata", {}).get("attnlab") or {}
                                                       for i in items) if meta.get("role") == "check"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    option = item.config.option
    if not hasattr(item, "cell") or not option.attnlab_record:
        yield
        return
    meta = item.cell.metadata.get("attnlab") or {}
    _append("cell", exercise=meta.get("exercise"))
    exercise_timeout = option.nbval_cell_timeout
    if "exercise" not in meta:  # one of the notebook's own cells
        option.nbval_cell_timeout = max(option.attnlab_setup_timeout, exercise_timeout)
    item.parent.timed_out = False  # nbval's flag sticks once set; we want to know about this cell alone
    judging = None
    if meta.get("role") == "check" and "grading" in _state:
        # the trusted deadline fires first; nbval interrupts the kernel a little later
        option.nbval_cell_timeout = exercise_timeout + 2
        _drain(_state["listener"])
        result: dict = {"done": threading.Event()}
        judging = (threading.Thread(target=_judge_one, args=(meta["exercise"], exercise_timeout, result),
                                    daemon=True), result, time.monotonic())
        judging[0].start()
        item.attnlab_judging = result
    try:
        yield
    finally:
        option.nbval_cell_timeout = exercise_timeout
        if judging is not None:
            thread, result, start = judging
            result["done"].set()
            thread.join(timeout=max(0.0, exercise_timeout + 5 - (time.monotonic() - start)))


# --- settling the verdicts ---------------------------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After each cell: settle what it tells (see :func:`_settle`), note a failed cell of the notebook's own, and
    notice a kernel that stopped. Once the kernel has stopped, the cells after it tell nothing."""
    yield
    if not hasattr(item, "cell") or "grading" not in _state or _state.get("stopped") or call.when == "teardown":
        return
    if call.when == "setup":
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            # nbval could not start the kernel: not the learner's doing
            _state["stopped"] = True
            _append("broken", text=_short(str(call.excinfo.value)).strip()[:300])
        return
    failed = call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception)
    running = getattr(item.parent, "kernel", None)
    cell = {
        "ok": not failed,
        "timed_out": bool(getattr(item.parent, "timed_out", False)),  # nbval's deadline fired during this cell
        "kernel_alive": running is not None and running.is_alive(),  # nbval stops a kernel it cannot interrupt
        "message": _short(str(call.excinfo.value)) if failed else "",
        "outputs": [_output(o) for o in (getattr(item, "test_outputs", None) or [])],
    }
    meta = item.cell.metadata.get("attnlab") or {}
    exercise = meta.get("exercise")
    if exercise is not None:
        _settle(exercise, meta.get("role"), cell, item)
    elif failed and cell["kernel_alive"]:
        from . import trusted

        _append("note", text=trusted.own_cell_failed_note(item.cell.source, cell))
    if not cell["kernel_alive"]:
        _kernel_stopped(exercise)


def _verdict(verdict) -> None:
    _state.setdefault("settled", set()).add(verdict.exercise)
    if _state.get("record"):
        record.append_verdict(_state["record"], verdict)


def _settle(exercise_id: str, role, cell: dict, item) -> None:
    """Write the one verdict of ``exercise_id`` once its cells tell it: a failed exercise cell, or its check cell."""
    from . import trusted

    if exercise_id in _state.setdefault("settled", set()):
        return
    timeout = item.config.option.nbval_cell_timeout
    if role == "solution":
        verdict = trusted.exercise_cell_verdict(exercise_id, cell, timeout)
    elif role == "check":
        judged = (getattr(item, "attnlab_judging", None) or {}).get("verdict")
        verdict = trusted.check_cell_verdict(exercise_id, judged, cell, timeout)
    else:
        verdict = None
    if verdict is not None:
        _verdict(verdict)


def _kernel_stopped(exercise_id: str | None) -> None:
    """The kernel stopped during a cell of ``exercise_id`` (None: one of the notebook's own cells). That exercise
    gets its verdict if it has none; when no exercise is to blame, every exercise still to come is not graded. The
    runner grades the exercises after a culprit in a run of their own."""
    from . import trusted

    _state["stopped"] = True
    settled = _state.setdefault("settled", set())
    if exercise_id is None:
        _append("note", text=trusted.OWN_CELL_STOPPED)
        for other in _state.get("present", []):
            if other not in settled:
                _verdict(trusted.kernel_stopped_verdict(other, culprit=False))
    elif exercise_id not in settled:
        _verdict(trusted.kernel_stopped_verdict(exercise_id, culprit=True))
    _append("stopped", exercise=exercise_id)


# --- the end of the run ----------------------------------------------------------------------------------------------


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _state["exitstatus"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave at once when the grading is over: the record is complete (each line was closed as it was written) and
    nbval has stopped the kernel, so the interpreter's own shutdown (ZeroMQ's linger, module teardown: 0.4 s) would
    only delay the verdicts."""
    if config.option.attnlab_grading and "exitstatus" in _state:
        _kill_kernel()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_state["exitstatus"])
