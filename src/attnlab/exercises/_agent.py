"""The learner's side of a check: run the learner's function when asked, and report what happened.

Two modes, chosen by :func:`attnlab.exercises.check`:

* **self-check** (a learner running a check cell): the checker runs here, in the learner's kernel, and calls the
  learner's function through :class:`LocalAnswer`;
* **grading** (``$ATTNLAB_CHECK_SOCKET`` set by ``attnlab-check``): the checker runs in the grader's own process, out of
  reach of this kernel. :func:`serve` connects to it, then runs the learner's function on the inputs it sends and
  sends back the result as plain data (:mod:`._wire`), with what the call printed, warned and changed in place. The
  grader judges and sends back the line to print or the failure to raise.

Nothing here decides a verdict: it only reports. What it reports can turn a pass into a failure (a print, a call of
a reference function), never a failure into a pass.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import socket
import traceback
import types
import warnings

import numpy as np

from . import _wire

MAX_TEXT = 20_000  # characters of printed output reported per call


# --- calls of reference functions ---------------------------------------------------------------------------------


class Tripwires:
    """Record calls of the named ``attnlab`` functions while armed (their code is swapped for a recording stub)."""

    def __init__(self, dotted_names):
        self.hits: list[str] = []
        self.armed = False
        self._swapped = []  # (function, its code, the stub's code)
        self._originals = {}  # dotted name -> a copy of the function that is never swapped
        for dotted in dotted_names:
            fn = _resolve(dotted)
            if not isinstance(fn, types.FunctionType) or fn.__closure__ or any(fn is f for f, _, _ in self._swapped):
                continue
            original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
            original.__kwdefaults__ = fn.__kwdefaults__
            namespace: dict = {}
            exec(compile(f"def _stub(*args, **kwargs):\n    return __attnlab_tripwire__({dotted!r}, args, kwargs)\n",
                         "<attnlab tripwire>", "exec"), namespace)
            self._swapped.append((fn, fn.__code__, namespace["_stub"].__code__))
            self._originals[dotted] = original

    def _hit(self, dotted, args, kwargs):
        if self.armed and dotted not in self.hits:
            self.hits.append(dotted)
        return self._originals[dotted](*args, **kwargs)

    @contextlib.contextmanager
    def watching(self):
        """Arm the tripwires for the duration of the block."""
        for fn, _, stub in self._swapped:
            fn.__globals__["__attnlab_tripwire__"] = self._hit
            fn.__code__ = stub
        self.armed = True
        try:
            yield
        finally:
            self.armed = False
            for fn, code, _ in self._swapped:
                fn.__code__ = code

    @contextlib.contextmanager
    def paused(self):
        """Disarm inside the block (a checker's own callback, which may use the reference freely)."""
        armed, self.armed = self.armed, False
        try:
            yield
        finally:
            self.armed = armed


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def forbidden_message(exercise_id: str, dotted: str) -> str:
    return (f"exercise {exercise_id} asks you to write this yourself; {dotted} is the reference, which the check "
            f"compares your function with. Write it with numpy (you may look at what {dotted} does, then close it).")


def mutated_message(position: int) -> str:
    return (f"your function changed its argument number {position + 1} in place; code that calls it would find its "
            "own arrays changed. Work on a copy (x = x.copy()) or build new arrays.")


# --- self-check -------------------------------------------------------------------------------------------------


class LocalAnswer:
    """The learner's function as a checker sees it in self-check mode: called in this process, with the reference
    functions of the exercise watched, and any callable argument (the checker's own code) left unwatched."""

    def __init__(self, exercise_id: str, answer, forbids):
        self.exercise_id, self.answer = exercise_id, answer
        self.tripwires = Tripwires(forbids)
        self.mutated: list[int] = []

    def __call__(self, *args, **kwargs):
        from . import ExerciseFailed

        def unwatched(f):
            def call(*a, **k):
                with self.tripwires.paused():
                    return f(*a, **k)
            return call

        args = tuple(unwatched(a) if callable(a) and not isinstance(a, np.ndarray) else a for a in args)
        before = [a.copy() if isinstance(a, np.ndarray) else None for a in args]
        with self.tripwires.watching():
            result = self.answer(*args, **kwargs)
        if self.tripwires.hits:
            raise ExerciseFailed(forbidden_message(self.exercise_id, self.tripwires.hits[0]))
        for i, (old, new) in enumerate(zip(before, args)):
            if old is not None and (old.shape != new.shape or not np.array_equal(
                    old, new, equal_nan=old.dtype.kind in "fc")) and i not in self.mutated:
                self.mutated.append(i)
        return result


# --- grading ----------------------------------------------------------------------------------------------------


def _exception_report(exc: BaseException, answer) -> dict:
    """An exception of the learner's code as data: its type, the builtin it derives from, its message, and where."""
    base = next((c.__name__ for c in type(exc).__mro__
                 if c.__module__ == "builtins" and c not in (BaseException, Exception, object)), "Exception")
    where = {}
    filename = getattr(getattr(answer, "__code__", None), "co_filename", None)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if filename and frame.filename == filename:
            where = {"line": frame.lineno, "function": frame.name}
            break
    message = str(exc)
    return {"type": type(exc).__name__[:100], "base": base, "message": message[:MAX_TEXT], "where": where}


class _Session:
    def __init__(self, sock, exercise_id: str, answer):
        self.sock, self.exercise_id, self.answer = sock, exercise_id, answer
        self.tripwires = Tripwires([])

    def _callback(self, n: int):
        def remote(*args, **kwargs):
            _wire.send(self.sock, {"op": "callback", "fn": n, "args": _wire.encode(list(args)),
                                   "kwargs": _wire.encode(kwargs)})
            return self._wait()
        return remote

    def _wait(self):
        """Serve the grader until it answers a callback ("return"/"raise") or ends the check ("verdict")."""
        while True:
            message = _wire.recv(self.sock)
            op = message.get("op")
            if op == "call":
                self._run(message)
            elif op == "setup":
                self.tripwires = Tripwires([str(n) for n in message.get("forbids", [])])
            elif op == "return":
                return _wire.decode(message.get("value"))
            elif op == "raise":
                raise RuntimeError(f"the checker's helper raised {message.get('type')}: {message.get('message')}")
            elif op == "verdict":
                raise _Verdict(message)

    def _run(self, message: dict) -> None:
        try:
            args = _wire.decode(message.get("args"), self._callback)
            kwargs = _wire.decode(message.get("kwargs"), self._callback)
        except _wire.WireError as exc:
            _wire.send(self.sock, {"op": "raise", "type": "WireError", "base": "ValueError", "message": str(exc)})
            return
        before = [id(a) for a in args]
        out, err = io.StringIO(), io.StringIO()
        reply: dict
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), self.tripwires.watching():
                    result = self.answer(*args, **kwargs)
                same = next((i for i, ident in enumerate(before) if ident == id(result)), None)
                try:
                    reply = {"op": "return", "value": None if same is not None else _wire.encode(result),
                             "same_as_arg": same}
                except _wire.Unsupported as exc:
                    reply = {"op": "unsupported", "what": str(exc)}
            except _Verdict:
                raise
            except BaseException as exc:  # the learner's exception, KeyboardInterrupt and SystemExit included
                reply = {"op": "raise", **_exception_report(exc, self.answer)}
        try:
            after = _wire.encode([a if isinstance(a, np.ndarray) else None for a in args])
        except _wire.Unsupported:
            after = None
        reply.update(args_after=after, out=out.getvalue()[:MAX_TEXT], err=err.getvalue()[:MAX_TEXT],
                     warnings=[f"{w.category.__name__}: {w.message}"[:1000] for w in caught[:50]],
                     warning_categories=[w.category.__name__ for w in caught[:50]],
                     forbidden=list(self.tripwires.hits))
        self.tripwires.hits.clear()
        _wire.send(self.sock, reply)


class _Verdict(Exception):
    def __init__(self, message: dict):
        super().__init__(message.get("text", ""))
        self.message = message


def serve(exercise_id: str, answer, address: str) -> None:
    """Grading mode: let the grader at ``address`` check ``answer``; print or raise what it decides."""
    from . import ExerciseFailed

    family = socket.AF_UNIX if not address.startswith("tcp:") else socket.AF_INET
    target = address if family == socket.AF_UNIX else ("127.0.0.1", int(address.split(":")[1]))
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(target)
        except OSError as exc:
            raise RuntimeError(f"cannot reach the grader ({exc.strerror})") from None
        session = _Session(sock, exercise_id, answer)
        _wire.send(sock, {"op": "hello", "key": os.environ.get("ATTNLAB_CHECK_KEY", "")})  # the grading's secret
        _wire.send(sock, {"op": "begin", "exercise": exercise_id})
        try:
            session._wait()
        except _Verdict as verdict:
            kind, text = verdict.message.get("kind"), str(verdict.message.get("text", ""))
            if kind in ("passed", "not attempted"):
                print(text)
                return
            if kind == "failed":
                raise ExerciseFailed(text) from None
            raise RuntimeError(text) from None
        except (ConnectionError, _wire.WireError) as exc:
            raise RuntimeError(f"the grader ended the check: {exc}") from None


def grading_address() -> str | None:
    """Where the grader listens, when this kernel is being graded."""
    return os.environ.get("ATTNLAB_CHECK_SOCKET") or None


__all__ = ["LocalAnswer", "Tripwires", "forbidden_message", "grading_address", "mutated_message", "serve"]
