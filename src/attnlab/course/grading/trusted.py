"""The trusted side of a check: the checker runs here, in the grader's process, and judges.

The learner's kernel (sandboxed) reaches this process only through one socket and only with plain data
(:mod:`attnlab.exercises._wire`). For each check cell the kernel's ``check`` connects and says which exercise it
checks; the checker then calls the learner's function through :class:`RemoteAnswer`, which sends the inputs, waits
for the result and replays on this side what the call printed, warned and changed in place. The verdict is decided
here; the kernel is only told what to print (with a per-grading token that nbval then compares) or what to raise.
"""

from __future__ import annotations

import ast
import builtins
import socket
import time
import warnings
from dataclasses import dataclass

import numpy as np

from ... import exercises
from ...exercises import ExerciseFailed, _wire
from ...exercises._agent import forbidden_message, mutated_message


@dataclass
class Verdict:
    """What the trusted side decided for one exercise: a status of runner.STATUSES and the learner's message."""

    exercise: str
    status: str
    message: str = ""


class DeadlineExceeded(BaseException):
    """The learner's function did not answer in time (a BaseException: no checker may catch it)."""


class KernelGone(BaseException):
    """The kernel closed the connection or sent something that is not plain data."""


class _LearnerRaised:
    """Marks exception classes made from the learner's exceptions."""


def _learner_exception(reply: dict) -> BaseException:
    """An exception of the same builtin kind as the learner's, so that a checker can catch and diagnose it."""
    name, message = str(reply.get("type", "Exception"))[:100], str(reply.get("message", ""))
    base = getattr(builtins, str(reply.get("base", "")), None)
    if not (isinstance(base, type) and issubclass(base, BaseException)) or base in (SystemExit, GeneratorExit):
        base = Exception
    if base is KeyboardInterrupt:
        base = Exception  # a learner's own KeyboardInterrupt is an error of theirs, never a deadline
    try:
        cls = type(name if name.isidentifier() else "LearnerError", (base, _LearnerRaised), {})
        exc = cls(message)
    except TypeError:  # a builtin whose constructor wants more (UnicodeDecodeError, ...)
        exc = type("LearnerError", (Exception, _LearnerRaised), {})(message)
    exc.attnlab_type, exc.attnlab_where = name, reply.get("where") or {}
    return exc


class RemoteAnswer:
    """The learner's function, called across the socket."""

    def __init__(self, conn, deadline: float):
        self.conn, self.deadline = conn, deadline
        self.printed: list[str] = []
        self.forbidden: list[str] = []
        self.mutated: list[int] = []  # positions of array arguments the learner's function changed in place

    def _recv(self) -> dict:
        if self.deadline - time.monotonic() <= 0:
            raise DeadlineExceeded
        try:
            return _wire.recv(self.conn, self.deadline)  # the whole message by the deadline: no slow drip
        except (socket.timeout, TimeoutError):
            raise DeadlineExceeded from None
        except (ConnectionError, OSError, _wire.WireError) as exc:
            raise KernelGone(str(exc)) from None

    def __call__(self, *args, **kwargs):
        callables: list = []
        try:
            message = {"op": "call", "args": _wire.encode(list(args), callables),
                       "kwargs": _wire.encode(kwargs, callables)}
            _wire.send(self.conn, message)
        except (ConnectionError, OSError) as exc:
            raise KernelGone(str(exc)) from None
        while True:
            reply = self._recv()
            if reply.get("op") != "callback":
                break
            self._serve_callback(reply, callables)
        self._replay(reply, args)
        op = reply.get("op")
        if op == "return":
            same = reply.get("same_as_arg")
            if isinstance(same, int) and not isinstance(same, bool) and 0 <= same < len(args):
                return args[same]
            try:
                return _wire.decode(reply.get("value"))
            except _wire.WireError as exc:
                raise KernelGone(f"the kernel sent a malformed result ({exc})") from None
        if op == "raise":
            raise _learner_exception(reply)
        if op == "unsupported":
            what = str(reply.get("what", "an object"))[:200]
            exercises.fail(f"your function returned {what}, which a check cannot read",
                           "numbers, strings, None, numpy arrays of a numeric or bool dtype, or tuples and lists of "
                           "them", what, "return plain numpy arrays (np.asarray(...)), not other kinds of objects")
        raise KernelGone(f"unexpected message {op!r} from the kernel")

    def _serve_callback(self, reply: dict, callables: list) -> None:
        n = reply.get("fn")
        if not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n < len(callables)):
            raise KernelGone("the kernel called back a function that does not exist")
        try:
            args = _wire.decode(reply.get("args"))
            kwargs = _wire.decode(reply.get("kwargs"))
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise _wire.WireError("bad arguments")
        except _wire.WireError as exc:
            raise KernelGone(f"the kernel sent malformed arguments ({exc})") from None
        try:
            answer = {"op": "return", "value": _wire.encode(callables[n](*args, **kwargs))}
        except Exception as exc:  # the checker's helper rejected the learner's arguments: the learner's mistake
            answer = {"op": "raise", "type": type(exc).__name__, "message": str(exc)}
        try:
            _wire.send(self.conn, answer)
        except (ConnectionError, OSError) as exc:
            raise KernelGone(str(exc)) from None

    def _replay(self, reply: dict, args) -> None:
        """Make this side see what the call did over there: prints, warnings, in-place edits, reference calls."""
        for key in ("out", "err"):
            if isinstance(reply.get(key), str) and reply[key]:
                self.printed.append(reply[key])
        for item in reply.get("warnings") or []:
            if isinstance(item, dict):
                category = getattr(builtins, str(item.get("category")), None)
                if not (isinstance(category, type) and issubclass(category, Warning)):
                    category = UserWarning
                warnings.warn(str(item.get("message", ""))[:1000], category, stacklevel=2)
        for name in reply.get("forbidden") or []:
            if isinstance(name, str) and name not in self.forbidden:
                self.forbidden.append(name)
        try:
            after = _wire.decode(reply.get("args_after")) if reply.get("args_after") is not None else None
        except _wire.WireError:
            after = None
        if isinstance(after, list) and len(after) == len(args):
            for i, (original, new) in enumerate(zip(args, after)):
                if (isinstance(original, np.ndarray) and isinstance(new, np.ndarray) and original.flags.writeable
                        and new.shape == original.shape and new.dtype == original.dtype):
                    if not np.array_equal(original, new, equal_nan=original.dtype.kind in "fc"):
                        self.mutated.append(i)
                        np.copyto(original, new)  # the checker sees the edit (and may name it itself)


# --- calls of the reference, seen in the source -------------------------------------------------------------------


def defined_names(sources) -> set[str]:
    """Names that the learner's exercise cells define (functions, classes, assignments, imports of other things)."""
    names = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Import):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] != "attnlab":
                names.update(a.asname or a.name for a in node.names)
    return names


def forbidden_in_source(source: str, forbids, own_names: set[str]) -> str | None:
    """The first forbidden reference function the cell's source uses by name, if any.

    ``attnlab.causal_mask`` counts as used in ``attnlab.causal_mask(...)``, ``A.masks.causal_mask`` (``A`` bound to
    attnlab in the cell), ``from attnlab.masks import causal_mask``, ``getattr(attnlab, "causal_mask")``, and a bare
    ``causal_mask`` that none of the learner's exercise cells defines (the notebook's own cells import it).
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    short = {dotted.rsplit(".", 1)[-1]: dotted for dotted in forbids}
    if not short:
        return None
    attnlab_names = {"attnlab"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "attnlab":
                    attnlab_names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "attnlab":
            for alias in node.names:
                if alias.name in short:
                    return short[alias.name]
                attnlab_names.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in short:
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in attnlab_names:
                return short[node.attr]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in short \
                and node.id not in own_names:
            return short[node.id]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in short):
            return short[node.args[1].value]
    return None


# --- one check ------------------------------------------------------------------------------------------------------


def _location(exc) -> str:
    where = getattr(exc, "attnlab_where", {}) or {}
    line, function = where.get("line"), where.get("function")
    if not isinstance(line, int):
        return ""
    if isinstance(function, str) and function.isidentifier() and function != "<module>":
        return f" (line {line} of your exercise cell, in {function})"
    return f" (line {line} of your exercise cell)"


def judge(exercise_id: str, conn, timeout: float, source: str = "", own_names: set[str] = frozenset()) -> Verdict:
    """Run the checker of ``exercise_id`` against the learner's function at the other end of ``conn``."""
    deadline = time.monotonic() + timeout
    answer = RemoteAnswer(conn, deadline)
    forbids = exercises.forbidden(exercise_id)
    named = forbidden_in_source(source, forbids, set(own_names))
    if named:
        return Verdict(exercise_id, "failed", forbidden_message(exercise_id, named))
    try:
        _wire.send(conn, {"op": "setup", "forbids": list(forbids)})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exercises.checker(exercise_id)(answer)
    except DeadlineExceeded:
        return Verdict(exercise_id, "timed out", f"your function did not return within {timeout:g} s: an infinite "
                                                 "loop, or far too much work?")
    except KernelGone as exc:
        return Verdict(exercise_id, "error", f"the check lost touch with your kernel ({exc}); did your code stop "
                                             "the kernel, close its files or use all the memory?")
    except NotImplementedError as exc:
        if isinstance(exc, _LearnerRaised):
            return Verdict(exercise_id, "not attempted")
        return Verdict(exercise_id, "error", f"NotImplementedError: {exc}")
    except ExerciseFailed as exc:
        if answer.forbidden:
            return Verdict(exercise_id, "failed", forbidden_message(exercise_id, answer.forbidden[0]))
        return Verdict(exercise_id, "failed", str(exc))
    except Exception as exc:
        if answer.forbidden:
            return Verdict(exercise_id, "failed", forbidden_message(exercise_id, answer.forbidden[0]))
        if isinstance(exc, _LearnerRaised):
            name, message = exc.attnlab_type, str(exc)
            return Verdict(exercise_id, "error", (f"{name}: {message}" if message else name) + _location(exc))
        return Verdict(exercise_id, "error", f"the check could not finish ({type(exc).__name__}: {exc})")
    if answer.forbidden:
        return Verdict(exercise_id, "failed", forbidden_message(exercise_id, answer.forbidden[0]))
    if answer.mutated:  # an edit reported from the kernel may only ever turn a pass into a failure
        return Verdict(exercise_id, "failed", mutated_message(answer.mutated[0]))
    noise = "".join(answer.printed) + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    if noise.strip():
        return Verdict(exercise_id, "failed", printed_message(exercise_id, noise))
    return Verdict(exercise_id, "passed")


def printed_message(exercise_id: str, printed: str, verdict: str = "the answer is right") -> str:
    """The failure of a check during which the learner's function printed or warned."""
    return (f"{verdict}, but your function printed or warned while it was checked; a check must print only "
            f"'Exercise {exercise_id}: passed'. It printed:\n{printed.strip()}")


def tell_kernel(conn, verdict: Verdict, token: str) -> None:
    """Send the kernel what to show: the passed line with the grading's token, or the failure."""
    if verdict.status == "passed":
        message = {"op": "verdict", "kind": "passed", "text": f"Exercise {verdict.exercise}: passed [{token}]"}
    elif verdict.status == "not attempted":
        message = {"op": "verdict", "kind": "not attempted", "text": f"Exercise {verdict.exercise}: not attempted yet"}
    elif verdict.status == "failed":
        message = {"op": "verdict", "kind": "failed", "text": verdict.message}
    else:
        message = {"op": "verdict", "kind": "error", "text": f"{verdict.status}: {verdict.message}"}
    try:
        conn.settimeout(2)
        _wire.send(conn, message)
    except (OSError, _wire.WireError):
        pass
