"""Whether the learner wrote the exercise is decided on the judging side, from their cells' source, with the answering
code derived from the library's call graph: private helpers count, a kernel-side tripwire switched off changes
nothing, and a self-test line that calls the reference after the function is allowed."""

from __future__ import annotations

import contextlib
import socket
import threading

import nbformat
import numpy as np
import pytest

import attnlab
from attnlab_course.authoring import find_exercises
from attnlab_course.paths import solutions_dir
from attnlab_course.grading import trusted
from attnlab_course.grading import notebook as gradingnb
from attnlab.exercises import _agent, _provenance, answering_code, exercise_ids, forbidden


@pytest.mark.parametrize("exercise_id, dotted", [
    ("1.1", "attnlab.softmax.softmax_inplace"),
    ("1.2", "attnlab.softmax.softmax_inplace"),
    ("7.1", "attnlab.backward.softmax_backward_inplace"),
    ("6.1", "attnlab.tiled_attention"),  # in the module that implements online_softmax
    ("2.2", "attnlab.attention"),
    ("2.1", "attnlab._qkv.QKV"),  # a private helper that uses causal_mask
    ("2.1", "attnlab._qkv.prepare_qkv"),  # and one that uses it
    ("6.3", "attnlab.attention._attention_blocked"),  # a fast path
    ("7.1", "attnlab.backward._attention_backward_blocked"),
])
def test_the_answering_code_is_derived_and_covers_private_helpers(exercise_id, dotted):
    assert dotted in answering_code(exercise_id).values()


def test_every_declared_reference_is_part_of_its_answering_code_and_none_is_invented():
    for exercise_id in exercise_ids():
        code = answering_code(exercise_id)
        assert {d.rsplit(".", 1)[-1] for d in forbidden(exercise_id)} <= set(code), exercise_id
        for short, dotted in code.items():
            module, _, name = dotted.rpartition(".")
            assert name == short and callable(getattr(__import__(module, fromlist=["x"]), name)), dotted


def _judged_with_source(exercise_id, source, graded, *, tripwires_off=False):
    """Grade the function ``graded`` that ``source`` defines, as the grader does: the source goes to the trusted
    judge, the function is served by the kernel-side agent over a socket pair. ``tripwires_off`` switches the
    kernel's tripwires off first, as a learner's cell could."""
    namespace: dict = {"np": np, "attnlab": attnlab}
    exec(compile(source, "<exercise cell>", "exec"), namespace)
    a, b = socket.socketpair()
    session = _agent._Session(b, exercise_id, namespace[graded])

    def kernel():
        with contextlib.suppress(BaseException):
            session._wait()

    with contextlib.ExitStack() as stack:
        if tripwires_off:
            stack.enter_context(pytest.MonkeyPatch.context()).setattr(
                _agent.Tripwires, "watching", lambda self: contextlib.nullcontext())
        thread = threading.Thread(target=kernel, daemon=True)
        thread.start()
        with a, b:
            verdict = trusted.judge(exercise_id, a, 30.0, [source], graded)
            trusted.tell_kernel(a, verdict, "T")
            thread.join(5)
    return verdict


CHEATS = {
    "1.1": ("from attnlab.softmax import softmax_inplace\n"
            "def stable_softmax(x):\n    y = np.array(x, dtype=float)\n    softmax_inplace(y)\n    return y\n",
            "stable_softmax", "attnlab.softmax.softmax_inplace"),
    "1.2": ("import attnlab.softmax as S\n"
            "def cross_attention(q, k, v):\n    w = q @ k.T / np.sqrt(q.shape[-1])\n    S.softmax_inplace(w)\n"
            "    return w @ v\n", "cross_attention", "attnlab.softmax.softmax_inplace"),
    "7.1": ("def softmax_backward(weights, dweights):\n    P, dP = weights.copy(), dweights.copy()\n"
            "    attnlab.backward.softmax_backward_inplace(P, dP)\n    return P\n",
            "softmax_backward", "attnlab.backward.softmax_backward_inplace"),
    "6.1": ("def online_logsumexp(x, block_size):\n    return attnlab.tiled_attention\n",
            "online_logsumexp", "attnlab.tiled_attention"),
}


@pytest.mark.parametrize("exercise_id", sorted(CHEATS))
@pytest.mark.parametrize("tripwires_off", [False, True])
def test_private_and_unlisted_helpers_fail_even_with_the_tripwires_switched_off(exercise_id, tripwires_off):
    source, graded, dotted = CHEATS[exercise_id]
    verdict = _judged_with_source(exercise_id, source, graded, tripwires_off=tripwires_off)
    assert verdict.status == "failed" and f"{dotted} is the reference" in verdict.message, verdict


def test_a_cell_that_switches_the_tripwires_off_fails_and_so_does_a_reference_reached_by_a_computed_name(monkeypatch):
    monkeypatch.setattr(_agent.Tripwires, "watching", _agent.Tripwires.watching)  # restored after the cell's edit
    switch_off = ("import attnlab.exercises._agent as agent\nimport contextlib\n"
                  "agent.Tripwires.watching = lambda self: contextlib.nullcontext()\n"
                  "def my_causal_mask(T, S, start):\n"
                  "    return np.arange(S)[None, :] <= start + np.arange(T)[:, None]\n")
    verdict = _judged_with_source("2.1", switch_off, "my_causal_mask")
    assert verdict.status == "failed" and "reaches into the checks' own code" in verdict.message
    computed = ("def my_causal_mask(T, S, start):\n    f = getattr(attnlab, 'causal' + '_mask')\n"
                "    return f(T, S)\n")
    verdict = _judged_with_source("2.1", computed, "my_causal_mask", tripwires_off=True)
    assert verdict.status == "failed" and "cannot follow" in verdict.message
    hidden = ("table = []\ntable.append(attnlab.causal_mask)\n"
              "def my_causal_mask(T, S, start):\n    return table[0](T, S)\n")
    verdict = _judged_with_source("2.1", hidden, "my_causal_mask", tripwires_off=True)
    assert verdict.status == "failed" and "attnlab.causal_mask is the reference" in verdict.message


def test_a_self_test_line_that_calls_the_reference_after_the_function_passes():
    source = ("def masked_attention(q, k, v, mask):\n"
              "    scores = np.where(mask, q @ k.T / np.sqrt(q.shape[-1]), -np.inf)\n"
              "    top = scores.max(axis=-1, keepdims=True)\n"
              "    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))\n"
              "    total = e.sum(axis=-1, keepdims=True)\n"
              "    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)\n"
              "    return w @ v, w\n"
              "q = k = v = np.eye(3)\nmask = np.tril(np.ones((3, 3), dtype=bool))\n"
              "np.testing.assert_allclose(masked_attention(q, k, v, mask)[0], attnlab.attention(q, k, v, mask))\n"
              "expected = attnlab.attention(q, k, v, mask)\n"
              "assert np.allclose(masked_attention(q, k, v, mask)[0], expected)\n")
    assert _judged_with_source("2.2", source, "masked_attention").status == "passed"


def test_self_check_reads_the_cell_too(monkeypatch):
    """In a notebook the self-check reads the defining cell from IPython's cache and decides the same way."""
    import linecache

    from attnlab.exercises import ExerciseFailed, check

    source, graded, _ = CHEATS["7.1"]
    filename = "/tmp/ipykernel_0/123456.py"  # how IPython names a cell
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"np": np, "attnlab": attnlab}
    exec(compile(source, filename, "exec"), namespace)
    monkeypatch.setattr(_agent.Tripwires, "watching", lambda self: contextlib.nullcontext())
    try:
        with pytest.raises(ExerciseFailed, match="softmax_backward_inplace is the reference"):
            check("7.1", namespace[graded])
    finally:
        linecache.cache.pop(filename, None)


def test_no_solution_is_flagged():
    """The reference solutions' exercise cells, read as the grader reads a learner's, all write their exercise."""
    for path in sorted(solutions_dir().glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        sources = []
        for ex in find_exercises(nb, str(path)):
            sources.append(nb.cells[ex.exercise_cell].source)
            graded = gradingnb.graded_name(nb.cells[ex.check_cell].source, ex.id)
            assert graded, ex.id
            assert _provenance.scan(sources, graded, forbidden(ex.id)) is None, ex.id
