"""The grading's pytest processes, forked from a warm server (:mod:`attnlab_course.grading.warm`).

Each child must be the process a cold start made: a session of its own, exactly the grading's environment, working
folder and memory limit, its output in the log, its exit status (or the signal that stopped it) reported; killing
it kills what it started; no checker module imported before the grading's seed is known; and the server takes its
children with it when the runner goes away.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab_course.grading import runner, warm

on_linux = pytest.mark.skipif(not warm.available, reason="the warm server runs on Linux only")

PROBE = '''
import json, os, resource, sys
from pathlib import Path

def test_probe():
    Path("probe.json").write_text(json.dumps({
        "pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgid(0), "cwd": os.getcwd(),
        "env": dict(os.environ), "memory": resource.getrlimit(resource.RLIMIT_AS)[0],
        "checkers": sorted(m for m in sys.modules if m.startswith("attnlab.exercises.nb")),
    }))
    print("probe ran")
'''


@pytest.fixture
def server():
    started = warm.Server({**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    yield started
    started.close()


def _start(server, folder: Path, test: str, **kwargs) -> warm.Child:
    (folder / "test_probe.py").write_text(test)
    (folder / "pytest.ini").write_text("[pytest]\n")
    args = ["-c", str(folder / "pytest.ini"), "-p", "no:cacheprovider", "-q", str(folder / "test_probe.py")]
    env = {"PATH": os.environ["PATH"], "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "ONLY_THIS": "1"}
    return server.start(args, env=env, cwd=str(folder), log=str(folder / "pytest.log"),
                        memory=kwargs.get("memory", runner.GRADER_MEMORY))


@on_linux
def test_a_child_is_a_fresh_session_with_the_gradings_environment_folder_and_limit(server, tmp_path):
    child = _start(server, tmp_path, PROBE, memory=3 * 2**30)
    assert child.wait(timeout=60) == 0, (tmp_path / "pytest.log").read_text()
    seen = json.loads((tmp_path / "probe.json").read_text())
    assert seen["pid"] == child.pid and seen["sid"] == child.pid and seen["pgid"] == child.pid
    assert seen["cwd"] == str(tmp_path)
    assert {k: v for k, v in seen["env"].items() if k not in ("PYTEST_CURRENT_TEST", "PYTEST_VERSION")} == {
        "PATH": os.environ["PATH"], "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "ONLY_THIS": "1"}
    assert seen["memory"] == 3 * 2**30
    assert seen["checkers"] == [], "no checker module is imported before the grading sets its seed"
    assert "1 passed" in (tmp_path / "pytest.log").read_text(), "its output is in the log"


@on_linux
def test_two_children_are_two_processes_and_exit_statuses_come_back(server, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    passing = _start(server, tmp_path / "a", "def test_ok():\n    pass\n")
    failing = _start(server, tmp_path / "b", "def test_no():\n    assert False\n")
    assert passing.pid != failing.pid
    assert (passing.wait(timeout=60), failing.wait(timeout=60)) == (0, 1)


@on_linux
def test_killing_a_child_kills_what_it_started_and_reports_the_signal(server, tmp_path):
    sleeper = ("import subprocess, time\n\ndef test_hang():\n"
               "    proc = subprocess.Popen(['sleep', '300'])\n"
               "    open('sleeper.pid', 'w').write(str(proc.pid))\n"
               "    time.sleep(300)\n")
    child = _start(server, tmp_path, sleeper)
    for _ in range(300):
        if (tmp_path / "sleeper.pid").exists() and (tmp_path / "sleeper.pid").read_text():
            break
        time.sleep(0.05)
    assert child.wait(timeout=0.1) is None, "still running"
    child.kill()
    assert child.wait(timeout=30) == -signal.SIGKILL
    grandchild = int((tmp_path / "sleeper.pid").read_text())
    for _ in range(100):
        if not _alive(grandchild):
            break
        time.sleep(0.05)
    assert not _alive(grandchild), "the process it started died with its session"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@on_linux
def test_when_the_runner_goes_away_the_server_kills_its_children_and_exits(tmp_path):
    """A runner killed mid-batch: its server sees the pipe close, kills the gradings it forked, and exits."""
    script = ("import json, os, sys, time\nfrom pathlib import Path\nfrom attnlab_course.grading import warm\n"
              "folder = Path(sys.argv[1])\n"
              "(folder / 't.py').write_text('import time\\ndef test_hang():\\n    time.sleep(300)\\n')\n"
              "server = warm.Server(dict(os.environ))\n"
              "child = server.start(['-p', 'no:cacheprovider', '-q', str(folder / 't.py')], env=dict(os.environ),\n"
              "                     cwd=str(folder), log=str(folder / 'log'), memory=2**33)\n"
              "print(json.dumps([server.proc.pid, child.pid]), flush=True)\n"
              "time.sleep(300)\n")
    runner_proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        server_pid, child_pid = json.loads(runner_proc.stdout.readline())
        assert _alive(server_pid) and _alive(child_pid)
    finally:
        runner_proc.kill()
        runner_proc.wait()
    for _ in range(200):
        if not _alive(server_pid) and not _alive(child_pid):
            break
        time.sleep(0.05)
    assert not _alive(child_pid), "the grading forked for a runner that is gone was killed"
    assert not _alive(server_pid), "the server exited"


def test_where_the_system_cannot_fork_pytest_starts_cold_and_grades_alike(tmp_path, monkeypatch):
    """The path off Linux (Windows and macOS, never sandboxed), forced here: the same verdicts."""
    import make_submissions
    import nbformat

    path = tmp_path / "02-correct.ipynb"
    nbformat.write(make_submissions.write_all(tmp_path / "fixtures")["02-correct.ipynb"].build(), path)
    monkeypatch.setattr(warm, "available", False)
    monkeypatch.setattr(warm.Server, "start", lambda *a, **k: pytest.fail("the warm server was used"))
    report = runner.grade(path, use_sandbox=False)
    assert not report.problem and [r.status for r in report.results] == ["passed"] * 3, report
