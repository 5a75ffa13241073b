"""The trusted pytest process of each grading, forked from a warm process that has imported what it needs.

A grading's trusted side is a pytest process running nbval and the grader's hooks (:mod:`.runner`). Started cold,
it spent about 1.2 s of CPU importing pytest, nbval, jupyter_client, nbformat and the checkers before it could
launch the learner's kernel: half the CPU of a sandboxed grading of notebook 02, and, on a busy machine, half of a
class's wait. So a runner starts one :class:`Server` the first time it grades: a process that imports all of that
once, then forks a child per grading. The child is the process a cold start would have made, from the same imported
state: it starts a session of its own, takes the grading's environment, working folder, memory limit and (as root)
its private runtime folder, launches the kernel (:func:`.kernel.start_early`) and runs pytest, its output going to a
log file. The server itself never grades, never talks to a kernel and never runs anything of a learner's; it only
reads requests from its runner on a pipe, forks, and reports each child's pid and, when it ends, its exit status
(``-N`` when signal N stopped it, as :mod:`subprocess` says). When the runner goes away (its end of the pipe
closes) the server kills what it forked and exits.

Why not :mod:`multiprocessing`'s forkserver: it imports the caller's ``__main__`` script again in every child, so a
script calling :func:`.runner.grade_many` without an ``if __name__ == "__main__"`` guard would grade itself
recursively. Off Linux (no ``os.fork``, or macOS), the runner starts pytest cold (:data:`available`).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import subprocess
import sys
import threading

# Linux only. macOS has fork, but its system libraries (numpy's Accelerate BLAS among them) are not safe to use in a
# forked child, which is why Python starts processes there by spawning; the runner starts pytest cold there.
available = hasattr(os, "fork") and sys.platform.startswith("linux")

# What the server imports before it forks: everything a grading's pytest process imports, and nbformat without
# rfc3987_syntax (see :data:`.runner.PYTEST_MAIN`).
PRELOAD = ("import sys; sys.modules['rfc3987_syntax'] = None; "
           "import pytest, nbformat, nbval.plugin, nbval.kernel, jupyter_client.manager; "
           "import attnlab_course.grading.nbval_hooks, attnlab_course.grading.sandbox, attnlab.exercises; "
           "from attnlab_course.grading import warm; warm.serve()")


# --- the server (its own process) --------------------------------------------------------------------------------


def serve() -> None:
    """Read requests (JSON lines) on stdin, fork a child for each, and write ``{"id", "pid"}`` and then
    ``{"id", "status"}`` lines on stdout; exit, killing every child's session, when stdin closes."""
    import gc
    import selectors

    import nbformat

    # The checkers draw their inputs from the grading's secret seed when their modules are imported, in the child
    # (nbval_hooks.pytest_configure): a module imported here would have the same inputs in every grading.
    early = sorted(name for name in sys.modules if name.startswith("attnlab.exercises.nb"))
    if early:
        raise RuntimeError(f"checker modules imported before the grading's seed is known: {early}")
    nbformat.validate(nbformat.v4.new_notebook())  # builds and caches nbformat's schema validator (0.1 s a child)
    gc.freeze()  # what the imports made is never collected: a child's collections skip it (and share its pages)
    requests, replies = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # nothing imported may write into the replies
    os.close(devnull)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    children: dict[int, int] = {}  # pid -> request id
    pending = b""

    def reply(**message) -> None:
        os.write(replies, (json.dumps(message) + "\n").encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in children:
                reply(id=children.pop(pid), status=os.waitstatus_to_exitcode(status))

    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in selector.select():
                if key.fd == wake_r:
                    os.read(wake_r, 4096)
                    reap()
                    continue
                data = os.read(requests, 65536)
                if not data:  # the runner is gone
                    return
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    if "kill" in request:
                        # only a child not yet reaped: its pid (and its session's id) cannot be anyone else's
                        pid = next((pid for pid, ident in children.items() if ident == request["kill"]), None)
                        if pid is not None:
                            _kill_session(pid)
                        continue
                    pid = os.fork()
                    if pid == 0:
                        for fd in (requests, replies, wake_r, wake_w):
                            os.close(fd)
                        _child(request)  # never returns
                    children[pid] = request["id"]
                    reply(id=request["id"], pid=pid)
            reap()
    finally:
        for pid in children:
            _kill_session(pid)


def _kill_session(pid: int) -> None:
    """SIGKILL a child and its session (pytest, and the kernel launcher it started)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _child(request: dict) -> None:
    """One grading's pytest process, forked from the server: set up as the cold start was, run pytest, exit."""
    code = 3
    try:
        os.setsid()  # the runner kills the grading by its session's process group
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(devnull)
        os.close(log)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (request["memory"], request["memory"]))
        if request.get("private_runtime"):
            from . import sandbox

            sandbox.enter_private_runtime(sandbox.Config.read(request["private_runtime"]))
        import pytest

        from . import kernel

        kernel.start_early(request["args"])
        code = int(pytest.main(request["args"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


# --- the runner's side -------------------------------------------------------------------------------------------


class Child:
    """A grading's pytest process forked by the server: its pid, and its exit status once it has ended."""

    def __init__(self, pid: int, kill):
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()
        self._kill = kill

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, or None if the process is still running after ``timeout`` seconds."""
        self._ended.wait(timeout)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the child's session (pytest and the kernel it started); the status follows. The server kills it,
        and only before it has reaped it: a pid that has been reaped may already be another process's."""
        if self.returncode is None:
            self._kill()

    def _end(self, status: int) -> None:
        self.returncode = status
        self._ended.set()


class Server:
    """The runner's handle on its warm server: :meth:`start` a grading's pytest process in it."""

    _lock = threading.Lock()
    _current: Server | None = None

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-c", PRELOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, start_new_session=True)
        self._write = threading.Lock()
        self._next = 0
        self._waiting: dict[int, list] = {}  # id -> [pid Event, Child or None]
        self._children: dict[int, Child] = {}
        self._reader = threading.Thread(target=self._read, name="attnlab-warm-replies", daemon=True)
        self._reader.start()

    @classmethod
    def get(cls, env: dict[str, str]) -> Server:
        """The runner's server, started on first use (and again if it stopped)."""
        with cls._lock:
            if cls._current is None or cls._current.proc.poll() is not None:
                cls._current = cls(env)
                atexit.register(cls._current.close)
            return cls._current

    def start(self, args: list[str], *, env: dict[str, str], cwd: str, log: str, memory: int,
              private_runtime: str = "") -> Child:
        """Fork a child that runs ``pytest.main(args)`` as described in the module docstring."""
        with self._write:
            self._next += 1
            ident = self._next
            slot = self._waiting[ident] = [threading.Event(), None]
        self._send({"id": ident, "args": args, "env": env, "cwd": cwd, "log": log, "memory": memory,
                    "private_runtime": private_runtime})
        slot[0].wait()
        if slot[1] is None:
            raise RuntimeError("the grader's warm process stopped before it started the grading")
        return slot[1]

    def _send(self, request: dict) -> None:
        with self._write:
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except OSError as exc:
                raise RuntimeError(f"the grader's warm process stopped: {exc}") from None

    def _read(self) -> None:
        for line in self.proc.stdout:
            message = json.loads(line)
            ident = message["id"]
            if "pid" in message:
                child = self._children[ident] = Child(message["pid"], functools.partial(self._send, {"kill": ident}))
                slot = self._waiting.pop(ident)
                slot[1] = child
                slot[0].set()
            else:
                self._children.pop(ident)._end(message["status"])
        # the server stopped: whatever waits is told so. A child it forked may still run (the server is never killed
        # but with its runner); its grading ends as a crash, and host.end() kills the kernel under the grading's uid
        for slot in list(self._waiting.values()):
            slot[0].set()
        for child in list(self._children.values()):
            child._end(-signal.SIGKILL)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
