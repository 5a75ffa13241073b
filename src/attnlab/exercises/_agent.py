"""The learner's side of a check: run the learner's function when asked, and report what happened.

Two modes, chosen by :func:`attnlab.exercises.check`:

* **self-check** (a learner running a check cell): the checker and the judge (:mod:`._judge`) run here, in the
  learner's kernel, and call the learner's function through :class:`LocalAnswer`;
* **grading** (``$ATTNLAB_CHECK_SOCKET`` set by ``attnlab-check``): the checker and the judge run in the grader's own
  process, out of reach of this kernel. :func:`serve` connects to it, then runs the learner's function on the inputs
  it sends and sends back the result as plain data, with what the call printed, warned and changed in place, in the
  messages of :mod:`._protocol`. The grader judges and sends back the verdict to show.

Both modes make each call with :func:`execute_call`, so that a self-check sees exactly what a grading sees. Nothing
here decides a verdict: it only reports. What it reports can turn a pass into a failure (a print, a call of a
reference function), never a failure into a pass.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import socket
import traceback
import types
import warnings

import numpy as np

from . import _judge, _protocol, _wire, plain

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
    except (ImportError, AttributeError, ValueError):
        return None


# --- one call of the learner's function, in either mode -------------------------------------------------------------


def _error_report(exc: BaseException, answer) -> _protocol.ErrorReport:
    """An exception of the learner's code as data: its type, the builtin it derives from, its message, and where."""
    base = next((c.__name__ for c in type(exc).__mro__
                 if c.__module__ == "builtins" and c not in (BaseException, Exception, object)), "Exception")
    where = None
    filename = getattr(getattr(answer, "__code__", None), "co_filename", None)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if filename and frame.filename == filename:
            where = _protocol.Where(frame.lineno or 0, frame.name or "")
            break
    return _protocol.ErrorReport(type(exc).__name__[:100], base, str(exc)[:MAX_TEXT], where)


def execute_call(answer, args, kwargs, tripwires: "Tripwires", *, catch_interrupts: bool = True):
    """Call ``answer(*args, **kwargs)`` and describe what happened as a reply of the protocol.

    Returns ``(reply, exception)``: the learner's exception, if any, is also returned as is (a self-check raises it
    with its traceback). ``catch_interrupts=False`` lets KeyboardInterrupt and SystemExit through (a learner pressing
    stop in a self-check).
    """
    ids = [id(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    raised = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), tripwires.watching():
                result = answer(*args, **kwargs)
        except _Verdict:
            raise
        except BaseException as exc:  # the learner's exception, KeyboardInterrupt and SystemExit included
            if not catch_interrupts and not isinstance(exc, Exception):
                raise
            raised = exc
    try:
        after = _wire.encode([a if isinstance(a, np.ndarray) else None for a in args])
    except _wire.Unsupported:
        after = None
    effects = _protocol.Effects(
        out=out.getvalue()[:MAX_TEXT], err=err.getvalue()[:MAX_TEXT],
        warnings=[_protocol.WarningRecord(w.category.__name__[:100], str(w.message)[:1000])
                  for w in caught if not issubclass(w.category, ResourceWarning)][:50],  # see _judge.NOT_THE_LEARNERS
        args_after=after, reference_calls=list(tripwires.hits))
    tripwires.hits.clear()
    if raised is not None:
        return _protocol.Raised(_error_report(raised, answer), effects), raised
    result = plain(result)  # Fraction, Decimal, longdouble, ... read as float64, as in self-check
    same = next((i for i, ident in enumerate(ids) if ident == id(result)), None)
    try:
        value = None if same is not None else _wire.encode(result)
    except _wire.Unsupported as exc:
        return _protocol.Unreadable(str(exc)[:200], effects), None
    return _protocol.Returned(value, same, effects), None


# --- self-check -------------------------------------------------------------------------------------------------


class LocalAnswer(_judge.Answer):
    """The learner's function as a checker sees it in self-check mode: called in this process by
    :func:`execute_call`, on copies of the checker's arrays, as a grading calls it in the kernel; its reply goes
    through the protocol's encoding and :meth:`_judge.Answer.settle`, as a grading's does."""

    def __init__(self, exercise_id: str, answer, watch):
        super().__init__()
        self.exercise_id, self.answer = exercise_id, answer
        self.tripwires = Tripwires(watch)

    def __call__(self, *args, **kwargs):
        def unwatched(f):
            def call(*a, **k):
                with self.tripwires.paused():
                    try:
                        return f(*a, **k)
                    except Exception as exc:  # as a grading tells it: the checker's helper rejected the arguments
                        raise RuntimeError(f"the checker's helper raised {type(exc).__name__}: {exc}") from None
            return call

        def copied(a):
            if isinstance(a, np.ndarray):
                return a.copy()
            if callable(a):
                return unwatched(a)
            return a

        reply, exc = execute_call(self.answer, tuple(copied(a) for a in args),
                                  {k: copied(v) for k, v in kwargs.items()}, self.tripwires, catch_interrupts=False)
        reply = _protocol.from_frame(json.loads(json.dumps(_protocol.to_frame(reply))))  # what crosses the wire
        if isinstance(reply, _protocol.Raised):
            self.raised[id(exc)] = (reply.error, exc)
            self._replay(reply.effects, args)
            raise exc
        return self.settle(reply, args)


# --- grading ----------------------------------------------------------------------------------------------------


class _Session:
    def __init__(self, sock, exercise_id: str, answer):
        self.sock, self.exercise_id, self.answer = sock, exercise_id, answer
        self.tripwires = Tripwires([])

    def _callback(self, n: int):
        def remote(*args, **kwargs):
            _protocol.send(self.sock, _protocol.Callback(n, _wire.encode(list(args)), _wire.encode(kwargs)))
            return self._wait()
        return remote

    def _wait(self):
        """Serve the grader until it answers a callback or ends the check (:class:`_protocol.Decided`)."""
        while True:
            message = _protocol.recv(self.sock)
            if isinstance(message, _protocol.Call):
                self._run(message)
            elif isinstance(message, _protocol.Setup):
                self.tripwires = Tripwires(message.watch)
            elif isinstance(message, _protocol.CallbackReturned):
                return _wire.decode(message.value)
            elif isinstance(message, _protocol.CallbackRaised):
                raise RuntimeError(f"the checker's helper raised {message.type}: {message.message}")
            elif isinstance(message, _protocol.Decided):
                raise _Verdict(message)
            else:
                raise _wire.WireError(f"unexpected message {type(message).__name__}")

    def _run(self, message: _protocol.Call) -> None:
        try:
            args = _wire.decode(message.args, self._callback)
            kwargs = _wire.decode(message.kwargs, self._callback)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise _wire.WireError("bad arguments")
        except _wire.WireError as exc:
            error = _protocol.ErrorReport("WireError", "ValueError", str(exc))
            _protocol.send(self.sock, _protocol.Raised(error, _protocol.Effects()))
            return
        reply, _ = execute_call(self.answer, args, kwargs, self.tripwires)
        _protocol.send(self.sock, reply)


class _Verdict(Exception):
    def __init__(self, message: _protocol.Decided):
        super().__init__(message.verdict.message)
        self.message = message


def serve(exercise_id: str, answer, address: str) -> None:
    """Grading mode: let the grader at ``address`` check ``answer``; print or raise what it decides."""
    family = socket.AF_UNIX if not address.startswith("tcp:") else socket.AF_INET
    target = address if family == socket.AF_UNIX else ("127.0.0.1", int(address.split(":")[1]))
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(target)
        except OSError as exc:
            raise RuntimeError(f"cannot reach the grader ({exc.strerror})") from None
        session = _Session(sock, exercise_id, answer)
        _protocol.send(sock, _protocol.Hello(os.environ.get("ATTNLAB_CHECK_KEY", "")))  # the grading's secret
        _protocol.send(sock, _protocol.Begin(exercise_id))
        try:
            session._wait()
        except _Verdict as decided:
            _protocol.show(decided.message.verdict, decided.message.token)
        except (ConnectionError, _wire.WireError) as exc:
            raise RuntimeError(f"the grader ended the check: {exc}") from None


def grading_address() -> str | None:
    """Where the grader listens, when this kernel is being graded."""
    return os.environ.get("ATTNLAB_CHECK_SOCKET") or None


__all__ = ["LocalAnswer", "Tripwires", "execute_call", "grading_address", "serve"]
