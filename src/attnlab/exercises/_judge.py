"""The one judge: runs an exercise's checker against the learner's function and decides one :class:`Verdict`.

The same code judges a self-check (the learner's function called in this process, :class:`._agent.LocalAnswer`) and
a grading (called across a socket, :class:`attnlab_course.grading.trusted.RemoteAnswer`). Both answers are an
:class:`Answer`: a call produces a reply of the protocol (:mod:`._protocol`), and :meth:`Answer.settle` makes this
side see what the call did (what it printed and warned, in-place edits, calls of reference functions) and returns
its result or raises its exception. So a self-check and a grading of the same function give the same verdict.
"""

from __future__ import annotations

import builtins
import warnings

import numpy as np

from . import ExerciseFailed, _protocol, _wire, checker, fail
from ._protocol import Raised, Returned, Unreadable, Verdict


def forbidden_message(exercise_id: str, dotted: str) -> str:
    return (f"exercise {exercise_id} asks you to write this yourself; {dotted} is the reference for (part of) what "
            f"it asks, so your function may not call it. Write it with numpy (you may look at what {dotted} does, then "
            "close it).")


def mutated_message(position: int) -> str:
    return (f"your function changed its argument number {position + 1} in place; code that calls it would find its "
            "own arrays changed. Work on a copy (x = x.copy()) or build new arrays.")


def printed_message(exercise_id: str, printed: str, verdict: str = "the answer is right") -> str:
    """The failure of a check during which the learner's function printed or warned."""
    return (f"{verdict}, but your function printed or warned while it was checked; a check must print only "
            f"'Exercise {exercise_id}: passed'. It printed:\n{printed.strip()}")


# Warnings that garbage collection emits wherever it happens to run (an unclosed file or event loop of earlier code,
# the kernel's own included): they never count against the function being checked.
NOT_THE_LEARNERS = ResourceWarning


class LearnerRaised:
    """Marks exception classes made from the learner's exceptions (a grading rebuilds them from an ErrorReport)."""


def learner_exception(error: _protocol.ErrorReport) -> BaseException:
    """An exception of the same builtin kind as the learner's, so that a checker can catch and diagnose it."""
    name, message = error.type[:100], error.message
    base = getattr(builtins, error.base, None)
    if not (isinstance(base, type) and issubclass(base, BaseException)) or base in (SystemExit, GeneratorExit):
        base = Exception
    if base is KeyboardInterrupt:
        base = Exception  # a learner's own KeyboardInterrupt is an error of theirs, never a deadline
    try:
        cls = type(name if name.isidentifier() else "LearnerError", (base, LearnerRaised), {})
        exc = cls(message)
    except TypeError:  # a builtin whose constructor wants more (UnicodeDecodeError, ...)
        exc = type("LearnerError", (Exception, LearnerRaised), {})(message)
    return exc


class Answer:
    """The learner's function as a checker sees it. Subclasses make the call and return a reply of the protocol."""

    def __init__(self):
        self.printed: list[str] = []
        self.reference_calls: list[str] = []
        self.mutated: list[int] = []  # positions of array arguments the learner's function changed in place
        self.raised: dict[int, tuple[_protocol.ErrorReport, BaseException]] = {}  # id(exception) -> report, original

    def settle(self, reply, args):
        """Replay the reply's effects here, then return the result or raise the learner's exception."""
        self._replay(reply.effects, args)
        if isinstance(reply, Returned):
            same = reply.same_as_arg
            if same is not None and 0 <= same < len(args):
                return args[same]
            try:
                return _wire.decode(reply.value)
            except _wire.WireError as exc:
                raise self.malformed(f"the kernel sent a malformed result ({exc})") from None
        if isinstance(reply, Raised):
            exc = self.rebuild(reply.error)
            self.raised[id(exc)] = (reply.error, exc)
            raise exc
        if isinstance(reply, Unreadable):
            what = reply.what[:200]
            fail(f"your function returned {what}, which a check cannot read",
                 "numbers, strings, None, numpy arrays of a numeric or bool dtype, or tuples and lists of them", what,
                 "return plain numpy arrays (np.asarray(...)), not other kinds of objects")
        raise self.malformed(f"unexpected message {type(reply).__name__} from the kernel")

    def rebuild(self, error: _protocol.ErrorReport) -> BaseException:
        return learner_exception(error)

    def malformed(self, what: str) -> BaseException:
        return RuntimeError(what)

    def _replay(self, effects: _protocol.Effects, args) -> None:
        """Make this side see what the call did: prints, warnings, in-place edits, reference calls."""
        for text in (effects.out, effects.err):
            if text:
                self.printed.append(text)
        for item in effects.warnings[:50]:
            category = getattr(builtins, item.category, None)
            if not (isinstance(category, type) and issubclass(category, Warning)):
                category = UserWarning
            warnings.warn(item.message[:1000], category, stacklevel=3)
        for name in effects.reference_calls:
            if name not in self.reference_calls:
                self.reference_calls.append(name)
        try:
            after = _wire.decode(effects.args_after) if effects.args_after is not None else None
        except _wire.WireError:
            after = None
        if isinstance(after, list) and len(after) == len(args):
            for i, (original, new) in enumerate(zip(args, after)):
                if (isinstance(original, np.ndarray) and isinstance(new, np.ndarray) and original.flags.writeable
                        and new.shape == original.shape and new.dtype == original.dtype):
                    if not np.array_equal(original, new, equal_nan=original.dtype.kind in "fc"):
                        if i not in self.mutated:
                            self.mutated.append(i)
                        np.copyto(original, new)  # the checker sees the edit (and may name it itself)

    def learner_error(self, exc: BaseException):
        """The report of ``exc`` when it is the learner's exception (or one a checker re-raised as is), else None."""
        found = self.raised.get(id(exc))
        return found[0] if found is not None and found[1] is exc else None


def _location(where: _protocol.Where | None) -> str:
    if where is None:
        return ""
    if where.function.isidentifier() and where.function != "<module>":
        return f" (line {where.line} of your exercise cell, in {where.function})"
    return f" (line {where.line} of your exercise cell)"


def judge(exercise_id: str, answer: Answer) -> tuple[Verdict, BaseException | None]:
    """Run the checker of ``exercise_id`` against ``answer``: the verdict, and the learner's exception behind an
    "error" verdict (a self-check shows it with its traceback).

    BaseExceptions that are not Exceptions (a grading's deadline, a lost kernel) are left to the caller.
    """
    def verdict(status, message=""):
        return Verdict(exercise_id, status, message), None

    def referenced():
        return verdict("failed", forbidden_message(exercise_id, answer.reference_calls[0]))

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            checker(exercise_id)(answer)
    except NotImplementedError as exc:
        if answer.learner_error(exc) is not None:
            return verdict("not attempted")
        return verdict("error", f"NotImplementedError: {exc}")
    except ExerciseFailed as exc:
        if answer.reference_calls:
            return referenced()
        return verdict("failed", str(exc))
    except Exception as exc:
        if answer.reference_calls:
            return referenced()
        error = answer.learner_error(exc)
        if error is not None:
            text = f"{error.type}: {error.message}" if error.message else error.type
            return Verdict(exercise_id, "error", text + _location(error.where)), exc
        return verdict("error", f"the check could not finish ({type(exc).__name__}: {exc})")
    if answer.reference_calls:
        return referenced()
    if answer.mutated:  # an edit reported from the kernel may only ever turn a pass into a failure
        return verdict("failed", mutated_message(answer.mutated[0]))
    noise = "".join(answer.printed) + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught
                                              if not issubclass(w.category, NOT_THE_LEARNERS))
    if noise.strip():
        return verdict("failed", printed_message(exercise_id, noise))
    return verdict("passed")
