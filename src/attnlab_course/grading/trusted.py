"""The trusted side of a check: the checker and the judge run here, in the grader's process, and decide.

The learner's kernel (sandboxed) reaches this process only through one socket and only with the messages of
:mod:`attnlab.exercises._protocol`. For each check cell the kernel's ``check`` connects and says which exercise it
checks; this side first reads the learner's exercise cells to decide whether the learner wrote the exercise
(:mod:`attnlab.exercises._provenance`: nothing in the kernel takes part), then runs the checker, which calls the
learner's function through :class:`RemoteAnswer`, and the one judge (:mod:`attnlab.exercises._judge`, the same code a
self-check runs) decides the :class:`Verdict`. The kernel is only told what to show (with a per-grading token that
nbval then compares).

The final verdict of an exercise is settled here too, from the judge's and from what nbval saw of the exercise's two
cells (:func:`exercise_cell_verdict`, :func:`check_cell_verdict`), or from a kernel that stopped
(:func:`kernel_stopped_verdict`); :mod:`.nbval_hooks` calls these and writes the verdicts down for the runner.
"""

from __future__ import annotations

import re
import socket
import time

from attnlab import exercises
from attnlab.exercises import _judge, _protocol, _provenance, _wire
from attnlab.exercises._judge import printed_message
from attnlab.exercises._protocol import Verdict

__all__ = ["DeadlineExceeded", "KernelGone", "RemoteAnswer", "Verdict", "check_cell_verdict", "exercise_cell_verdict",
           "judge", "kernel_stopped_verdict", "own_cell_failed_note", "printed_message", "tell_kernel"]


class DeadlineExceeded(BaseException):
    """The learner's function did not answer in time (a BaseException: no checker may catch it)."""


class KernelGone(BaseException):
    """The kernel closed the connection or sent something that is not a message of the protocol."""


class RemoteAnswer(_judge.Answer):
    """The learner's function, called across the socket."""

    def __init__(self, conn, deadline: float):
        super().__init__()
        self.conn, self.deadline = conn, deadline

    def _recv(self):
        if self.deadline - time.monotonic() <= 0:
            raise DeadlineExceeded
        try:
            return _protocol.recv(self.conn, self.deadline)  # the whole message by the deadline: no slow drip
        except (socket.timeout, TimeoutError):
            raise DeadlineExceeded from None
        except (ConnectionError, OSError, _wire.WireError) as exc:
            raise KernelGone(str(exc)) from None

    def _send(self, message) -> None:
        try:
            _protocol.send(self.conn, message)
        except (ConnectionError, OSError) as exc:
            raise KernelGone(str(exc)) from None

    def malformed(self, what: str) -> BaseException:
        return KernelGone(what)

    def __call__(self, *args, **kwargs):
        callables: list = []
        self._send(_protocol.Call(_wire.encode(list(args), callables), _wire.encode(kwargs, callables)))
        while True:
            reply = self._recv()
            if not isinstance(reply, _protocol.Callback):
                break
            self._serve_callback(reply, callables)
        if not isinstance(reply, (_protocol.Returned, _protocol.Raised, _protocol.Unreadable)):
            raise KernelGone(f"unexpected message {type(reply).__name__} from the kernel")
        return self.settle(reply, args)

    def _serve_callback(self, reply: _protocol.Callback, callables: list) -> None:
        n = reply.fn
        if not 0 <= n < len(callables):
            raise KernelGone("the kernel called back a function that does not exist")
        try:
            args = _wire.decode(reply.args)
            kwargs = _wire.decode(reply.kwargs)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise _wire.WireError("bad arguments")
        except _wire.WireError as exc:
            raise KernelGone(f"the kernel sent malformed arguments ({exc})") from None
        try:
            answer = _protocol.CallbackReturned(_wire.encode(callables[n](*args, **kwargs)))
        except Exception as exc:  # the checker's helper rejected the learner's arguments: the learner's mistake
            answer = _protocol.CallbackRaised(type(exc).__name__, str(exc)[:_protocol.MAX_TEXT])
        self._send(answer)


def judge(exercise_id: str, conn, timeout: float, sources=(), graded: str | None = None) -> Verdict:
    """Decide ``exercise_id`` for the learner's function at the other end of ``conn``.

    ``sources`` are the learner's exercise cells up to this exercise's, in notebook order, and ``graded`` the name
    the check cell passes to ``check``: whether the learner wrote the exercise is read there, on this side.
    """
    deadline = time.monotonic() + timeout
    forbids = exercises.forbidden(exercise_id)
    finding = _provenance.scan(list(sources), graded, forbids)
    if finding is not None:
        return Verdict(exercise_id, "failed", _provenance.message(exercise_id, finding))
    answer = RemoteAnswer(conn, deadline)
    try:
        answer._send(_protocol.Setup(sorted(set(exercises.answering_code(exercise_id).values()))))
        verdict, _ = _judge.judge(exercise_id, answer)
    except DeadlineExceeded:
        return Verdict(exercise_id, "timed out", f"your function did not return within {timeout:g} s: an infinite "
                                                 "loop, or far too much work?")
    except KernelGone as exc:
        return Verdict(exercise_id, "error", f"the check lost touch with your kernel ({exc}); did your code stop "
                                             "the kernel, close its files or use all the memory?")
    return verdict


def tell_kernel(conn, verdict: Verdict, token: str) -> None:
    """Send the kernel what to show: the passed line with the grading's token, or the failure."""
    try:
        conn.settimeout(2)
        _protocol.send(conn, _protocol.Decided(verdict, token))
    except (OSError, _wire.WireError):
        pass


# --- the final verdict of an exercise, from its two cells and its kernel ---------------------------------------------
#
# nbval ran the cells; what it tells of one (``cell``, made by :mod:`.nbval_hooks`) is whether the cell passed
# (``ok``: it ran without error and, for a check cell, printed what was expected), whether nbval's deadline fired
# during it (``timed_out``), whether the kernel is still alive after it (``kernel_alive``: nbval stops a kernel it
# cannot interrupt), and its outputs, the learner's exception among them.

_CELL_FRAME = re.compile(r"Cell In\[\d+\], line (\d+)(?:, in (\w+))?")
NO_VERDICT = ("the check never reached the grader: did your code redefine `check`, change attnlab.exercises, or run "
              "the check somewhere else?")
OWN_CELL_STOPPED = "the kernel stopped in a cell that is not an exercise; the exercises after it were not graded"


def _cell_location(error: dict) -> str:
    """Where in the learner's cell an exception was raised, from nbval's traceback (empty when unknown)."""
    frames = _CELL_FRAME.findall("\n".join(error.get("traceback", [])))
    if not frames:
        return ""
    line, function = frames[-1]
    return f" (line {line} of your exercise cell" + (f", in {function})" if function else ")")


def _errors(cell: dict) -> list[dict]:
    return [o for o in cell["outputs"] if o["output_type"] == "error"]


def exercise_cell_verdict(exercise_id: str, cell: dict, timeout: float) -> Verdict | None:
    """The verdict when the learner's exercise cell itself failed, else None."""
    if cell["ok"]:
        return None
    if cell["timed_out"]:  # only a deadline that fired: a raised KeyboardInterrupt is an error
        why = ": an infinite loop, or far too much work?"
        if not cell["kernel_alive"]:
            why = " and could not be interrupted (does it catch KeyboardInterrupt, or did it stop the kernel?)"
        return Verdict(exercise_id, "timed out", f"your exercise cell did not finish within {timeout:g} s{why}")
    errors = _errors(cell)
    if errors:
        ename, evalue = errors[-1]["ename"], errors[-1]["evalue"]
        return Verdict(exercise_id, "error", (f"{ename}: {evalue}" if evalue else ename) + _cell_location(errors[-1]))
    message = cell["message"].strip()
    return Verdict(exercise_id, "error", message.splitlines()[0] if message else "failed")


def check_cell_verdict(exercise_id: str, judged: Verdict | None, cell: dict, timeout: float) -> Verdict:
    """The final verdict of an exercise whose check cell ran: the judge's, and a pass also needs nbval's comparison
    of the check cell (the kernel printed the token and nothing else)."""
    if judged is None:  # the kernel's check never asked the judge
        errors = _errors(cell)
        if cell["timed_out"]:
            return Verdict(exercise_id, "timed out", f"your function did not return within {timeout:g} s")
        if errors and errors[-1]["ename"] != "ExerciseFailed":  # it failed before it reached the grader
            ename, evalue = errors[-1]["ename"], errors[-1]["evalue"]
            message = f"{ename}: {evalue}" if evalue else ename
            if ename == "NameError":
                message += " (did you rename the function, or does your exercise cell stop with an error?)"
            where = _cell_location(errors[-1])
            return Verdict(exercise_id, "error", message + (where if ", in " in where else ""))
        return Verdict(exercise_id, "failed", NO_VERDICT)  # whatever the kernel printed, nobody judged it
    if judged.status != "passed" or cell["ok"]:
        return judged
    if cell["timed_out"]:
        return Verdict(exercise_id, "timed out", f"your function did not return within {timeout:g} s")
    streams = [o for o in cell["outputs"] if o["output_type"] == "stream"]
    extra = "\n".join(line for line in "".join(o["text"] for o in streams).splitlines()
                      if not line.startswith(f"Exercise {exercise_id}: passed [")).strip()
    return Verdict(exercise_id, "failed", printed_message(exercise_id, extra))


def kernel_stopped_verdict(exercise_id: str, culprit: bool) -> Verdict:
    """The verdict of an exercise the kernel stopped during (``culprit``), or before."""
    if culprit:
        return Verdict(exercise_id, "error", "the kernel died while running your code (did it call exit(), or use "
                                             "all the memory?)")
    return Verdict(exercise_id, "error", "not graded: the kernel stopped before this exercise")


def own_cell_failed_note(source: str, cell: dict) -> str:
    """The note for a cell of the notebook's own (not an exercise) that failed: an exercise cell may be to blame."""
    errors = _errors(cell)
    what = f"{errors[-1]['ename']}: {errors[-1]['evalue']}" if errors else cell["message"].strip()
    first_line = source.strip().split("\n")[0][:80]
    return (f"a cell of the notebook that is not an exercise failed ({first_line!r}): "
            f"{what.splitlines()[0] if what else 'failed'}; does an exercise cell change a shared name?")
