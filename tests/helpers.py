"""Input factories, hypothesis strategies, the plain float32 yardstick and the exercise-check helpers shared by the
unit tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from attnlab.exercises import ExerciseFailed, check

# where the browser tests leave screenshots and timings (git ignores it); ATTNLAB_ARTIFACTS names another folder
ARTIFACTS = Path(os.environ.get("ATTNLAB_ARTIFACTS", Path(__file__).resolve().parents[1] / "artifacts"))
EXPLORER_TIMINGS = ARTIFACTS / "explorer_timings.json"  # written by tests/browser/conftest.py, summed up by conftest.py


def make_qkv(*, batch=(), H=2, Hkv=None, T=5, S=None, D=4, Dv=None, seed=0, dtype=np.float64):
    """Random ``q (*batch, H, T, D)``, ``k (*batch, Hkv, S, D)``, ``v (*batch, Hkv, S, Dv)`` from a seeded generator."""
    Hkv = H if Hkv is None else Hkv
    S = T if S is None else S
    Dv = D if Dv is None else Dv
    g = np.random.default_rng(seed)
    q = g.standard_normal((*batch, H, T, D)).astype(dtype)
    k = g.standard_normal((*batch, Hkv, S, D)).astype(dtype)
    v = g.standard_normal((*batch, Hkv, S, Dv)).astype(dtype)
    return q, k, v


def plain_float32_attention(q, k, v, mask):
    """Textbook float32 attention, no tricks (MHA: H = Hkv): the float32 error attnlab is measured against."""
    q, k, v = (a.astype(np.float32) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.float32(np.sqrt(q.shape[-1]))  # (..., H, T, S)
    scores = np.where(mask, scores, np.float32(-np.inf))
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


seeds = st.integers(0, 2**32 - 1)
"""A seed for ``np.random.default_rng``: hypothesis picks shapes and a seed, numpy fills the arrays."""


@st.composite
def head_counts(draw, max_Hkv: int = 3, max_G: int = 3):
    """``(H, Hkv)`` with ``Hkv`` dividing ``H``: MHA (G = 1), GQA, and MQA (Hkv = 1) all appear."""
    Hkv = draw(st.integers(1, max_Hkv))
    G = draw(st.integers(1, max_G))
    return Hkv * G, Hkv


@st.composite
def lengths_and_S(draw, max_B: int = 3, max_S: int = 12):
    """A padded length ``S`` and one real length per sequence, each in ``[0, S]`` (0 = all padding)."""
    S = draw(st.integers(1, max_S))
    lengths = draw(st.lists(st.integers(0, S), min_size=1, max_size=max_B))
    return np.array(lengths), S


@st.composite
def segments(draw, max_docs: int = 4, max_len: int = 6):
    """Segment ids of several documents packed into one sequence, e.g. ``[0, 0, 0, 1, 2, 2]``."""
    sizes = draw(st.lists(st.integers(1, max_len), min_size=1, max_size=max_docs))
    return np.repeat(np.arange(len(sizes)), sizes)


def expect_failure(exercise_id, answer, *phrases, absent=()):
    """``check`` rejects ``answer`` in the house format (expected / got), naming every phrase and none of ``absent``."""
    with pytest.raises(ExerciseFailed) as info:
        check(exercise_id, answer)
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in:\n{message}"
    for phrase in absent:
        assert phrase not in message, f"{phrase!r} should not be in:\n{message}"
    assert "expected:" in message and "got:" in message
    return message


def not_attempted(*args, **kwargs):
    """The learner's stub: the body is still ``raise NotImplementedError``."""
    raise NotImplementedError


def judge_over_a_socket_pair(exercise_id, answer, timeout=120.0):
    """The trusted judge's verdict on ``answer``, served by the kernel-side agent over a socket pair, as
    ``attnlab-check`` grades it; and the :class:`~attnlab.exercises._protocol.Decided` message the kernel was told
    (None if it was told nothing)."""
    import socket
    import threading

    from attnlab_course.grading import trusted
    from attnlab.exercises import _agent

    a, b = socket.socketpair()
    session = _agent._Session(b, exercise_id, answer)
    outcome = {}

    def kernel():
        try:
            session._wait()
        except _agent._Verdict as verdict:
            outcome["told"] = verdict.message
        except BaseException:  # anything else ends the session too; the judge's verdict says what happened
            pass

    thread = threading.Thread(target=kernel, daemon=True)
    thread.start()
    with a, b:
        verdict = trusted.judge(exercise_id, a, timeout)
        trusted.tell_kernel(a, verdict, "TOKEN")
        thread.join(10)
    return verdict, outcome.get("told")


def processes_marked(mark: bytes) -> list[str]:
    """The pids of the processes whose command line holds ``mark``: what a hostile submission left running."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "cmdline").read_bytes():
                found.append(proc.name)
        except OSError:
            pass
    return found


def finite_differences(f, x, h=1e-6):
    """Central differences ``(f(x + h e_i) - f(x - h e_i)) / 2h`` of a scalar function, one element at a time."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        grad[i] = (f(xp) - f(xm)) / (2 * h)
    return grad
