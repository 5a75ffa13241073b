"""The one protocol between a learner's kernel and the grader, and the one :class:`Verdict` type.

Both sides import this module: the kernel side (:mod:`._agent`) and the trusted side
(:mod:`attnlab_course.grading.trusted`), and so does a self-check, which runs the same calls and the same judge in
one process. Every message is a frozen dataclass below; :func:`to_frame` and :func:`from_frame` are generated from
the dataclasses' fields (their types), never written per message, so a field cannot be sent in one shape and read in
another. :func:`from_frame` checks every field against its type and raises :class:`_wire.WireError` for anything
else: a hostile kernel can send only these messages, with only these fields.

One check, as messages (kernel = K, grader = G)::

    K -> G  Hello(key)                            the grading's secret: any other first message is closed unserved
    K -> G  Begin(exercise)
    G -> K  Setup(watch)                          the reference functions whose calls K reports
    G -> K  Call(args, kwargs)                    run the learner's function (repeated)
    K -> G    Callback(fn, args, kwargs)          the learner's function calls a function G passed
    G -> K    CallbackReturned(value) | CallbackRaised(type, message)
    K -> G  Returned(value, same_as_arg, effects) | Raised(error, effects) | Unreadable(what, effects)
    G -> K  Decided(verdict, token)               what the check cell shows

``effects`` (:class:`Effects`) is what the call did besides its result: what it printed, warned
(:class:`WarningRecord`), which of its array arguments it changed in place (their values after the call), and which
watched reference functions it called.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field

from . import _wire

STATUSES = ("passed", "failed", "not attempted", "error", "timed out", "missing")


class Value:
    """Marks a field that carries plain data (:mod:`._wire`): arrays, numbers, tuples, callables by reference."""


# --- the parts of messages ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """A line of the learner's exercise cell, and the function it is in."""

    line: int
    function: str = ""


@dataclass(frozen=True)
class ErrorReport:
    """An exception of the learner's code as data: its type, the builtin it derives from, its message, and where."""

    type: str
    base: str
    message: str
    where: Where | None = None


@dataclass(frozen=True)
class WarningRecord:
    """One warning the learner's function emitted."""

    category: str
    message: str


@dataclass(frozen=True)
class Effects:
    """What one call of the learner's function did besides its result."""

    out: str = ""
    err: str = ""
    warnings: list[WarningRecord] = field(default_factory=list)
    args_after: Value | None = None  # a list, one entry per argument: the array after the call, or None
    reference_calls: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    """What the judge decided for one exercise: a status of :data:`STATUSES` and the learner's message."""

    exercise: str
    status: str
    message: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise _wire.WireError(f"unknown status {self.status[:40]!r}")


# --- the messages -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    key: str


@dataclass(frozen=True)
class Begin:
    exercise: str


@dataclass(frozen=True)
class Setup:
    watch: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Call:
    args: Value
    kwargs: Value


@dataclass(frozen=True)
class Callback:
    fn: int
    args: Value
    kwargs: Value


@dataclass(frozen=True)
class CallbackReturned:
    value: Value


@dataclass(frozen=True)
class CallbackRaised:
    type: str
    message: str


@dataclass(frozen=True)
class Returned:
    value: Value | None
    same_as_arg: int | None
    effects: Effects


@dataclass(frozen=True)
class Raised:
    error: ErrorReport
    effects: Effects


@dataclass(frozen=True)
class Unreadable:
    what: str
    effects: Effects


@dataclass(frozen=True)
class Decided:
    verdict: Verdict
    token: str = ""


MESSAGES: dict[str, type] = {cls.__name__: cls for cls in (
    Hello, Begin, Setup, Call, Callback, CallbackReturned, CallbackRaised, Returned, Raised, Unreadable, Decided)}
PARTS = (Where, ErrorReport, WarningRecord, Effects, Verdict)
MAX_TEXT = 20_000  # characters in any one text field
MAX_ITEMS = 1_000  # entries in any one list field


# --- generated encoding -------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return typing.get_type_hints(cls, globalns=globals())


def _encode_field(value, hint):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _encode_field(value, inner)
    if hint is Value:
        return value  # already plain data (made with _wire.encode, which needs the caller's list of callables)
    if origin is list:
        return [_encode_field(v, args[0]) for v in value]
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            raise TypeError(f"expected a {hint.__name__}, got {type(value).__name__}")
        return {f.name: _encode_field(getattr(value, f.name), h) for f, h in zip(
            dataclasses.fields(hint), _hints(hint).values())}
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise TypeError(f"expected {hint.__name__}, got {type(value).__name__}")
    return value


def _decode_field(data, hint, where: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if data is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _decode_field(data, inner, where)
    if hint is Value:
        return data  # checked when it is decoded with _wire.decode
    if origin is list:
        if not isinstance(data, list) or len(data) > MAX_ITEMS:
            raise _wire.WireError(f"{where}: expected a list")
        return [_decode_field(v, args[0], where) for v in data]
    if dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise _wire.WireError(f"{where}: expected a {hint.__name__}")
        return _decode_object(hint, data, where)
    if hint is int and (not isinstance(data, int) or isinstance(data, bool)):
        raise _wire.WireError(f"{where}: expected an integer")
    if not isinstance(data, hint):
        raise _wire.WireError(f"{where}: expected {hint.__name__}")
    return data[:MAX_TEXT] if hint is str else data


def _decode_object(cls, data: dict, where: str):
    hints = _hints(cls)
    unknown = set(data) - set(hints) - {"kind"}
    if unknown:
        raise _wire.WireError(f"{where}: unknown field {sorted(unknown)[0][:40]!r}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _decode_field(data[f.name], hints[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _wire.WireError(f"{where}: missing field {f.name!r}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise _wire.WireError(f"{where}: {exc}") from None


def to_frame(message) -> dict:
    """``message`` (one of :data:`MESSAGES`) as JSON-ready data: ``{"kind": "Call", ...its fields}``."""
    cls = type(message)
    if MESSAGES.get(cls.__name__) is not cls:
        raise TypeError(f"not a message of the protocol: {cls.__name__}")
    return {"kind": cls.__name__, **_encode_field(message, cls)}


def from_frame(data) -> object:
    """The message :func:`to_frame` made; :class:`_wire.WireError` for anything that is not one, field by field."""
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or data["kind"] not in MESSAGES:
        raise _wire.WireError("not a message of the protocol")
    return _decode_object(MESSAGES[data["kind"]], data, data["kind"])


def part_to_data(part) -> dict:
    """One of :data:`PARTS` (a :class:`Verdict` in a grading's record file, say) as JSON-ready data."""
    if type(part) not in PARTS:
        raise TypeError(f"not a part of the protocol: {type(part).__name__}")
    return _encode_field(part, type(part))


def part_from_data(cls, data):
    """The part :func:`part_to_data` made, checked field by field (WireError otherwise)."""
    if cls not in PARTS or not isinstance(data, dict):
        raise _wire.WireError(f"not a {getattr(cls, '__name__', cls)}")
    return _decode_object(cls, {k: v for k, v in data.items() if k != "kind"}, cls.__name__)


def send(sock, message) -> None:
    """Send one message of the protocol."""
    _wire.send(sock, to_frame(message))


def recv(sock, deadline: float | None = None, expect: tuple = ()) -> object:
    """Receive one message of the protocol (of one of the classes ``expect``, when given, else WireError)."""
    message = from_frame(_wire.recv(sock, deadline))
    if expect and not isinstance(message, expect):
        raise _wire.WireError(f"unexpected message {type(message).__name__}")
    return message


# --- what a check cell shows ------------------------------------------------------------------------------------------


def passed_text(exercise_id: str, token: str = "") -> str:
    return f"Exercise {exercise_id}: passed" + (f" [{token}]" if token else "")


def not_attempted_text(exercise_id: str) -> str:
    return f"Exercise {exercise_id}: not attempted yet"


def show(verdict: Verdict, token: str = "", learner_exception: BaseException | None = None) -> None:
    """Show ``verdict`` in the check cell: print the passed or not-attempted line, or raise the failure.

    A self-check re-raises the learner's own exception (``learner_exception``), with its traceback.
    """
    from . import ExerciseFailed

    if verdict.status == "passed":
        print(passed_text(verdict.exercise, token))
    elif verdict.status == "not attempted":
        print(not_attempted_text(verdict.exercise))
    elif verdict.status == "failed":
        raise ExerciseFailed(verdict.message)
    elif learner_exception is not None:
        raise learner_exception
    else:
        raise RuntimeError(f"{verdict.status}: {verdict.message}")
