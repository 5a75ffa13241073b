"""The grader's parts that need no kernel: the plain-data wire, the reference tripwires and source scan, the trusted
judge over a socket pair, the report's cleaning, and the sandbox's command line."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

import attnlab
import helpers
from attnlab_course import paths
from attnlab_course.grading import report, sandbox
from attnlab.exercises import ExerciseFailed, _agent, _protocol, _provenance, _wire, check


@pytest.mark.parametrize("value", [
    None, True, 3, -2**70, 1.5, float("inf"), "text", [1, "a", None], (1, (2.0, [3])), {"a": (1, 2)},
    np.arange(6, dtype=np.int16).reshape(2, 3), np.ones((2, 0, 3), dtype=bool), np.float32(2.5),
    np.array([np.nan, -np.inf], dtype=np.float16), np.array(3 + 4j),
])
def test_plain_data_crosses_the_wire_unchanged(value):
    back = _wire.decode(_wire.encode(value))
    assert type(back) is type(value)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape
        np.testing.assert_array_equal(back, value)
    elif isinstance(value, float) and value != value:
        assert back != back
    else:
        assert repr(back) == repr(value)


@pytest.mark.parametrize("value", [object(), np.array([object()]), np.array(["a"]), {1: 2}, iter([1]),
                                   [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])
def test_anything_else_is_refused_before_it_is_sent(value):
    with pytest.raises(_wire.Unsupported):
        _wire.encode(value)


@pytest.mark.parametrize("data", [
    {"__array__": "AAAA", "dtype": "object", "shape": [1]},  # no object arrays, so no pickles
    {"__array__": "AAAA", "dtype": "float64", "shape": [5]},  # wrong number of bytes
    {"__array__": "AAAA", "dtype": "float64", "shape": [-1]},
    {"__float__": "__import__('os')"}, {"__class__": "os.system"}, {}, {"__callable__": 0},
])
def test_malformed_or_hostile_data_is_refused(data):
    with pytest.raises(_wire.WireError):
        _wire.decode(data)


def test_frames_are_length_prefixed_json_and_oversized_ones_refused():
    a, b = socket.socketpair()
    with a, b:
        _wire.send(a, {"op": "x", "v": _wire.encode(np.eye(2))})
        np.testing.assert_array_equal(_wire.decode(_wire.recv(b)["v"]), np.eye(2))
        a.sendall((_wire.MAX_FRAME + 1).to_bytes(4, "big"))
        with pytest.raises(_wire.WireError):
            _wire.recv(b)


def test_tripwires_see_calls_of_the_reference_even_through_a_saved_alias():
    alias = attnlab.causal_mask
    wires = _agent.Tripwires(["attnlab.causal_mask"])
    with wires.watching():
        np.testing.assert_array_equal(alias(2, 2), np.tril(np.ones((2, 2), dtype=bool)))
        with wires.paused():
            attnlab.causal_mask(3, 3)
    assert wires.hits == ["attnlab.causal_mask"]
    attnlab.causal_mask(2, 2)
    assert wires.hits == ["attnlab.causal_mask"] and attnlab.causal_mask.__code__.co_name == "causal_mask"


def test_self_check_fails_an_answer_that_calls_the_reference(capsys):
    def my_causal_mask(T, S, start):
        return attnlab.causal_mask(T, S)

    with pytest.raises(ExerciseFailed, match="asks you to write this yourself; attnlab.causal_mask is the reference"):
        check("2.1", my_causal_mask)


@pytest.mark.parametrize("source, found", [
    ("def f(T, S):\n    return attnlab.causal_mask(T, S)", "attnlab.causal_mask"),
    ("import attnlab as A\ndef f(T, S):\n    return A.masks.causal_mask(T, S)", "attnlab.causal_mask"),
    ("from attnlab.masks import causal_mask as cm\ndef f(T, S):\n    return cm(T, S)", "attnlab.causal_mask"),
    ("def f(T, S):\n    return getattr(attnlab, 'causal_mask')(T, S)", "attnlab.causal_mask"),
    ("def f(T, S):\n    return causal_mask(T, S)", "attnlab.causal_mask"),
    ("def f(T, S):\n    return attnlab.masks._positions(T, S)", "attnlab.masks._positions"),
    ("def causal_mask(T, S):\n    return 1\ndef f(T, S):\n    return causal_mask(T, S)", None),
    ("from scipy.special import causal_mask\ndef f(T, S):\n    return causal_mask(T, S)", None),
    ("def f(T, S, other):\n    other.causal_mask(T, S)", None),
    ("def f(T, S):\n    masks.causal_mask(T, S)", "attnlab.causal_mask"),  # a module the notebook imported
    ("def f(:", None),
])
def test_the_source_scan_finds_the_reference_by_name(source, found):
    finding = _provenance.scan([source], "f", ("attnlab.causal_mask",))
    assert (finding[1] if finding else None) == found


def _judge_against(answer, exercise_id="2.1", timeout=10.0):
    return helpers.judge_over_a_socket_pair(exercise_id, answer, timeout)


def test_the_judge_passes_a_right_answer_and_tells_the_kernel_the_token():
    verdict, told = _judge_against(lambda T, S, start: np.arange(S)[None, :] <= start + np.arange(T)[:, None])
    assert verdict.status == "passed" and told == _protocol.Decided(_protocol.Verdict("2.1", "passed"), "TOKEN")


def test_the_judge_names_the_mistake_and_sees_prints_and_reference_calls():
    verdict, _ = _judge_against(lambda T, S, start: np.arange(S)[None, :] > start + np.arange(T)[:, None])
    assert verdict.status == "failed" and "inverted" in verdict.message

    def noisy(T, S, start):
        print("debug")
        return np.arange(S)[None, :] <= start + np.arange(T)[:, None]

    verdict, _ = _judge_against(noisy)
    assert verdict.status == "failed" and "printed or warned" in verdict.message and "debug" in verdict.message
    verdict, _ = _judge_against(lambda T, S, start: attnlab.causal_mask(T, S))
    assert verdict.status == "failed" and "attnlab.causal_mask is the reference" in verdict.message


def test_the_judge_reports_exceptions_not_attempted_and_deadlines():
    def stub(T, S, start):
        raise NotImplementedError

    assert _judge_against(stub)[0].status == "not attempted"

    def broken(T, S, start):
        raise KeyboardInterrupt

    verdict, _ = _judge_against(broken)
    assert verdict.status == "error" and verdict.message.startswith("KeyboardInterrupt")

    def slow(T, S, start):
        import time
        time.sleep(3)

    verdict, _ = _judge_against(slow, timeout=0.5)
    assert verdict.status == "timed out" and "did not return within 0.5 s" in verdict.message


def test_the_judge_refuses_objects_a_learner_returns():
    verdict, _ = _judge_against(lambda T, S, start: object())
    assert verdict.status == "failed" and "which a check cannot read" in verdict.message


def test_learner_text_has_its_control_characters_escaped_and_csv_cells_are_never_formulas():
    assert report.clean("a\x1b[2K\rb\x08\x07\tc\nd\u202e") == "a\\x1b[2K\\rb\\x08\\x07\\tc\nd\\u202e"
    assert [report.csv_cell(v) for v in ("=1+1", "+x", "-2", "@SUM", "ok", 3)] == ["'=1+1", "'+x", "'-2", "'@SUM",
                                                                                   "ok", "3"]


def test_the_sandbox_command_isolates_and_never_shows_the_course_tooling(tmp_path):
    read_only = sandbox.python_paths()
    config = sandbox.Config(runtime=str(tmp_path), read_only=read_only, hidden=sandbox.hidden_paths(read_only),
                            env={"X": "1"})
    args = sandbox.bwrap_args(config)
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--proc", "--dev"):
        assert flag in args
    assert args[args.index("--uid") + 1] == "1000"
    assert "/work" not in args and "/root" not in args, "only the folders the kernel needs are bound"
    assert all(not path.endswith("notebooks/solutions") for path in args)
    bound = [Path(args[i + 1]).resolve() for i, a in enumerate(args) if a == "--ro-bind"]
    assert not any(paths.PACKAGE.is_relative_to(b) for b in bound) or str(paths.PACKAGE) in config.hidden, \
        "attnlab_course is neither bound nor, where a bound folder holds it, left visible"


def test_installed_beside_attnlab_the_course_tooling_is_hidden_from_the_kernel(tmp_path):
    """After ``pip install attnlab-course`` it sits in site-packages, which the kernel sees: it is an empty folder."""
    site_packages = str(paths.PACKAGE.parent)  # stands for site-packages: the folder that holds the package
    assert sandbox.hidden_paths([site_packages]) == [str(paths.PACKAGE)]
    assert sandbox.hidden_paths([str(tmp_path)]) == []
    config = sandbox.Config(runtime=str(tmp_path), read_only=[site_packages],
                            hidden=sandbox.hidden_paths([site_packages]))
    args = sandbox.bwrap_args(config)
    where = args.index(str(paths.PACKAGE))
    assert args[where - 1] == "--tmpfs" and args[where + 1: where + 3] == ["--remount-ro", str(paths.PACKAGE)]
    assert where > args.index(site_packages), "hidden after the folder that holds it is bound"


def _masked_attention(q, k, v, mask, *, scribble=False):
    scores = np.where(mask, q @ k.T / np.sqrt(q.shape[-1]), -np.inf)  # (T, S)
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    if scribble:
        q[...] = 0.0
    return weights @ v, weights


def test_an_edit_of_the_inputs_reported_from_the_kernel_only_ever_fails_a_pass():
    assert _judge_against(_masked_attention, "2.2")[0].status == "passed"
    verdict, _ = _judge_against(lambda *a: _masked_attention(*a, scribble=True), "2.2")
    assert verdict.status == "failed" and "changed its argument number 1 in place" in verdict.message


def test_a_message_dripped_byte_by_byte_cannot_outlast_the_deadline():
    import time

    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"\x00\x00")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            _wire.recv(b, deadline=time.monotonic() + 0.3)
        assert time.monotonic() - start < 1.0
