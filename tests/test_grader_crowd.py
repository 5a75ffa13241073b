"""Many gradings at once: ``--jobs 20`` with no cgroup (the fallback), an honest and a hostile submission, while
another local user, and root without the grading's key, try to reach each grading's check socket.

It runs apart from the attack batch of ``test_grader_attacks.py`` (and may run at the same time, on another worker):
its hostile children carry a mark of their own, so that each module counts only its own survivors.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import make_submissions
import nbformat
import pytest
from helpers import processes_marked

from attnlab.exercises import _protocol
from attnlab_course.grading import cli, isolation, runner, sandbox

if sandbox.unavailable_reason():
    pytest.skip(f"grader crowd tests skipped: {sandbox.unavailable_reason()} ({sandbox.INSTALL_HINT})",
                allow_module_level=True)

DAEMON_MARK = b"attnlab-crowd-daemon"


def _survivors() -> list[str]:
    return processes_marked(DAEMON_MARK)


SPIN_AND_FORK = make_submissions.Submission("02_masks", "spin_and_fork", {
    "base": "learner", "about": "leave sleeping children in sessions of their own, then spin ignoring SIGINT",
    "code": {"2.1": '''
import os, signal, subprocess, sys
for _ in range(3):
    subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)  # attnlab-crowd-daemon"],
                     start_new_session=True)
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
'''}})


def _as_stranger(uid: int, address: str) -> str:
    """Connect to ``address`` as ``uid`` in a child process: "connected" or the error's name."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only makes system calls, then leaves
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(address)
            outcome = "connected"
        except OSError as exc:
            outcome = type(exc).__name__
        except BaseException:
            outcome = "failed"
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        return f.read()


def _knock(folder: Path, stop: threading.Event, seen: dict) -> None:
    """While the batch runs: another local user, then root without the key, try the check socket of each grading."""
    stranger = isolation.lease_uid()
    try:
        while not stop.is_set() and len(seen["stranger"]) < 6:
            for proc in Path("/proc").iterdir():
                try:  # a grading's pytest process (started cold or forked warm) works in its trusted folder
                    cwd = Path(os.readlink(proc / "cwd"))
                    is_pytest = b"pytest" in (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if not (is_pytest and cwd.name == "trusted" and cwd.is_relative_to(folder)):
                    continue
                address = str(cwd.parent / "run" / "check.sock")
                if not os.path.exists(f"/proc/{proc.name}/root{address}"):
                    continue  # not listening yet
                for where in (address, f"/proc/{proc.name}/root{address}"):
                    seen["stranger"].append(_as_stranger(stranger.uid, where))
                try:  # root reaches it through the grading's own mount namespace, but has no key
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                        sock.connect(f"/proc/{proc.name}/root{address}")
                        _protocol.send(sock, _protocol.Hello("0" * 64))
                        _protocol.send(sock, _protocol.Begin("2.1"))
                        sock.settimeout(1.5)
                        seen["root"].append("served" if sock.recv(1) else "closed")
                except socket.timeout:
                    seen["root"].append("unanswered")
                except ConnectionResetError:  # closed with our messages unread
                    seen["root"].append("closed")
                except OSError as exc:
                    seen["root"].append(type(exc).__name__)
            time.sleep(0.5)
    finally:
        stranger.release()


@pytest.fixture(scope="module")
def crowded(tmp_path_factory):
    """``--jobs 20``, no cgroup (forced), an honest and a hostile submission, another user knocking meanwhile."""
    folder = tmp_path_factory.mktemp("crowded")
    nbformat.write(make_submissions.write_all(tmp_path_factory.mktemp("honest"))["02-correct.ipynb"].build(),
                   folder / "02-correct.ipynb")
    nbformat.write(SPIN_AND_FORK.build(), folder / "02-spin_and_fork.ipynb")
    gradings = Path(tempfile.mkdtemp(prefix="attnlab-test-"))  # only this batch's gradings, reachable by their uids
    os.chmod(gradings, 0o711)
    seen = {"stranger": [], "root": []}
    stop = threading.Event()
    knocker = threading.Thread(target=_knock, args=(gradings, stop, seen), daemon=True)
    reports: list = []
    grade_many = runner.grade_many
    out = io.StringIO()
    try:
        with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(io.StringIO()):
            mp.setenv(isolation.NO_CGROUP_ENV, "1")
            mp.setattr(tempfile, "tempdir", str(gradings))
            mp.setattr(runner, "grade_many", lambda *a, **k: reports.extend(grade_many(*a, **k)) or reports)
            if os.geteuid() == 0:
                knocker.start()
            status = cli.main(["--batch", str(folder), "--jobs", "20"])
    finally:
        stop.set()
        if knocker.is_alive():
            knocker.join(timeout=30)
        survivors = _survivors()
        os.rmdir(gradings)
    return {"status": status, "reports": {r.path.name: r for r in reports}, "out": out.getvalue(), "seen": seen,
            "survivors": survivors}


def test_with_20_jobs_an_honest_submission_passes_beside_a_hostile_one(crowded):
    assert [r.status for r in crowded["reports"]["02-correct.ipynb"].results] == ["passed"] * 3
    assert crowded["reports"]["02-spin_and_fork.ipynb"].results[0].status == "timed out"
    assert crowded["survivors"] == [], "the hostile submission's children died with its grading"


def test_without_a_cgroup_the_batch_says_so_in_one_line(crowded):
    notes = [line for line in crowded["out"].splitlines() if line.startswith("note: no cgroup")]
    assert len(notes) == 1 and isolation.NO_CGROUP_ENV in notes[0], crowded["out"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another local user")
def test_another_local_user_cannot_reach_the_check_socket(crowded):
    stranger, root = crowded["seen"]["stranger"], crowded["seen"]["root"]
    assert stranger and root, "the gradings were found while they ran"
    assert "connected" not in stranger, stranger
    assert set(stranger) <= {"PermissionError", "FileNotFoundError"}, stranger
    assert "closed" in root or "unanswered" in root, "root could reach the socket (the test can see a failure)"
    assert "served" not in root, "a connection without the grading's key is never served"
