"""The one protocol between kernel and grader: every kind of message across a real socket pair, refusal of anything
else field by field, and the same verdict from a self-check and a grading for what crosses it (results, prints,
warnings, in-place edits, errors, a list where a pair is expected, exact fractions and longdouble).

That a self-check and a grading agree on every right answer, classic mistake and stub of every exercise is checked
by the exercise tests themselves (tests/test_exercises_nb*.py): conftest.py grades each of their ``check`` calls over
a socket pair too and compares the verdicts.
"""

from __future__ import annotations

import fractions
import socket
import warnings

import numpy as np
import pytest
from helpers import judge_over_a_socket_pair

from attnlab.exercises import _agent, _judge, _protocol, _wire
from attnlab.exercises._protocol import Verdict

EFFECTS = _protocol.Effects(out="debug\n", err="oops\n", warnings=[_protocol.WarningRecord("RuntimeWarning", "nan")],
                            args_after=_wire.encode([np.eye(2), None]), reference_calls=["attnlab.softmax"])
ONE_OF_EACH = [
    _protocol.Hello("k" * 64),
    _protocol.Begin("2.2"),
    _protocol.Setup(["attnlab.softmax", "attnlab.softmax.softmax_inplace"]),
    _protocol.Call(_wire.encode([np.arange(3.0), (1, "a")], []), _wire.encode({"axis": -1})),
    _protocol.Callback(0, _wire.encode([np.ones((2, 2))]), _wire.encode({})),
    _protocol.CallbackReturned(_wire.encode(np.zeros(2, dtype=np.float32))),
    _protocol.CallbackRaised("ValueError", "bad shape"),
    _protocol.Returned(_wire.encode((np.ones(2), [np.int8(3)])), None, EFFECTS),
    _protocol.Returned(None, 1, _protocol.Effects()),
    _protocol.Raised(_protocol.ErrorReport("ZeroDivisionError", "ArithmeticError", "division by zero",
                                           _protocol.Where(3, "f")), EFFECTS),
    _protocol.Unreadable("a generator", EFFECTS),
    _protocol.Decided(Verdict("2.2", "failed", "masked_attention is right, but it emitted a warning"), "TOKEN"),
]


def test_every_kind_of_message_is_covered_here():
    assert {type(m) for m in ONE_OF_EACH} == set(_protocol.MESSAGES.values())


@pytest.mark.parametrize("message", ONE_OF_EACH, ids=lambda m: type(m).__name__)
def test_every_kind_of_message_crosses_a_socket_pair_unchanged(message):
    a, b = socket.socketpair()
    with a, b:
        _protocol.send(a, message)
        back = _protocol.recv(b, expect=(type(message),))
    assert back == message and type(back) is type(message)
    if isinstance(message, _protocol.Returned) and message.effects.warnings:
        assert isinstance(back.effects.warnings[0], _protocol.WarningRecord)  # a record, never a bare string


@pytest.mark.parametrize("frame", [
    {"kind": "Returned", "value": 1, "same_as_arg": None,
     "effects": {"warnings": ["RuntimeWarning: invalid value"]}},  # a warning as a string: refused, not dropped
    {"kind": "Returned", "value": 1, "same_as_arg": True, "effects": {}},  # a bool is not an index
    {"kind": "Returned", "value": 1, "effects": {}},  # a field missing
    {"kind": "Begin", "exercise": "2.1", "extra": 1},  # a field the protocol does not have
    {"kind": "Decided", "verdict": {"exercise": "2.1", "status": "passed!"}},  # a status that does not exist
    {"kind": "Raised", "error": "ZeroDivisionError", "effects": {}},
    {"kind": "Pickle", "data": "..."}, {"op": "verdict"}, [], "Begin",
])
def test_anything_that_is_not_a_message_is_refused_field_by_field(frame):
    with pytest.raises(_wire.WireError):
        _protocol.from_frame(frame)


def test_a_verdict_round_trips_as_data_as_in_a_gradings_record():
    verdict = Verdict("6.2", "timed out", "your function did not return within 5 s")
    assert _protocol.part_from_data(Verdict, _protocol.part_to_data(verdict)) == verdict


# --- the same verdict in a self-check and a grading ----------------------------------------------------------------


def _self_check(exercise_id, answer) -> Verdict:
    watch = sorted(set(__import__("attnlab.exercises", fromlist=["x"]).answering_code(exercise_id).values()))
    try:
        return _judge.judge(exercise_id, _agent.LocalAnswer(exercise_id, answer, watch))[0]
    finally:
        warnings.resetwarnings()


def _both(exercise_id, answer) -> Verdict:
    local, graded = _self_check(exercise_id, answer), judge_over_a_socket_pair(exercise_id, answer)[0]
    assert local == graded, f"self-check: {local}\ngrading:    {graded}"
    return local


def _causal(T, S, start):
    return np.arange(S)[None, :] <= start + np.arange(T)[:, None]


def _masked(q, k, v, mask):
    scores = np.where(mask, q @ k.T / np.sqrt(q.shape[-1]), -np.inf)  # (T, S)
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return weights @ v, weights


def test_a_warning_fails_the_same_way_in_self_check_and_grading():
    def warns(T, S, start):
        warnings.warn("careful", UserWarning)
        return _causal(T, S, start)

    verdict = _both("2.1", warns)
    assert verdict.status == "failed" and "UserWarning: careful" in verdict.message

    def repaired_nan(q, k, v, mask):  # 2.2's classic mistake: NaN made, then repaired; the checker sees the warning
        scores = np.where(mask, q @ k.T / np.sqrt(q.shape[-1]), -np.inf)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
        return weights @ v, weights

    verdict = _both("2.2", repaired_nan)
    assert verdict.status == "failed" and "emitted a warning" in verdict.message


def test_prints_in_place_edits_and_errors_get_the_same_verdict():
    def prints(T, S, start):
        print("debug")
        return _causal(T, S, start)

    assert "debug" in _both("2.1", prints).message

    def scribbles(q, k, v, mask):
        out = _masked(q, k, v, mask)
        q[...] = 0.0
        return out

    assert "changed its argument number 1 in place" in _both("2.2", scribbles).message

    def divides(T, S, start):
        return 1 / 0

    verdict = _both("2.1", divides)
    assert verdict.status == "error" and verdict.message.startswith("ZeroDivisionError: division by zero (line")


def test_a_list_where_a_pair_is_expected_is_judged_the_same_way():
    assert _both("2.2", lambda *a: list(_masked(*a))).status == "passed"
    assert "must return a pair" in _both("2.2", lambda *a: [*_masked(*a), 0]).message


def test_exact_fractions_and_longdouble_cross_the_wire_and_are_judged_as_in_self_check():
    assert _wire.decode(_wire.encode(fractions.Fraction(1, 3))) == fractions.Fraction(1, 3)
    back = _wire.decode(_wire.encode(np.ones(3, dtype=np.longdouble) / 3))
    assert back.dtype == np.float64 and np.allclose(back, 1 / 3)

    def in_longdouble(q, k, v, mask):
        return _masked(*(x.astype(np.longdouble) for x in (q, k, v)), mask)

    assert _both("2.2", in_longdouble).status == "passed"
    for value in (fractions.Fraction(1, 3), np.longdouble(1) / 3):
        assert _both("3.1", lambda *a, v=value: (v, v)).status == "failed"  # wrong, but judged alike


def test_a_resource_warning_from_garbage_collection_is_not_the_learners():
    def collects(T, S, start):  # as when the kernel collects an event loop left by earlier code during this call
        warnings.warn("unclosed event loop", ResourceWarning)
        return _causal(T, S, start)

    assert _both("2.1", collects).status == "passed"
