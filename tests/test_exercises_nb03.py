"""The checkers of notebook 03: reference solutions pass, each classic mistake fails with its diagnosis."""

import numpy as np
import pytest

from attnlab.exercises import check
from helpers import expect_failure


def passes(exercise_id, answer, capsys):
    check(exercise_id, answer)
    return capsys.readouterr().out == f"Exercise {exercise_id}: passed\n"




@pytest.mark.parametrize("exercise_id", ["3.1", "3.2", "3.3"])
def test_unattempted_stub_is_reported(exercise_id, capsys):
    def stub(*args):
        raise NotImplementedError

    check(exercise_id, stub)
    assert capsys.readouterr().out == f"Exercise {exercise_id}: not attempted yet\n"


# ------------------------------------------------------------------------------------------------------------ 3.1


def stats_reference(d_k, var_q, var_k, rho):
    s = np.sqrt(var_q * var_k)
    return d_k * rho * s, s * np.sqrt(d_k * (1 + rho**2))


def stats_as_array(d_k, var_q, var_k, rho):  # another correct form: an array of two numbers, variance route
    second_moment = var_q * var_k + 2 * (rho**2) * var_q * var_k  # E[q_i² k_i²]
    mean_one = rho * np.sqrt(var_q * var_k)
    return np.array([d_k * mean_one, np.sqrt(d_k * (second_moment - mean_one**2))])


def test_3_1_correct_solutions_pass(capsys):
    assert passes("3.1", stats_reference, capsys)
    assert passes("3.1", stats_as_array, capsys)


def test_3_1_reference_matches_a_simulation():
    rng = np.random.default_rng(0)
    d_k, var_q, var_k, rho, n = 50, 2.0, 0.5, 0.6, 200_000
    q = rng.standard_normal((n, d_k)) * np.sqrt(var_q)
    k = (rho * q / np.sqrt(var_q) + np.sqrt(1 - rho**2) * rng.standard_normal((n, d_k))) * np.sqrt(var_k)
    s = np.sum(q * k, axis=-1)
    mean, std = stats_reference(d_k, var_q, var_k, rho)
    assert abs(s.mean() - mean) < 0.02 * std and abs(s.std() / std - 1) < 0.01


def _with_std(std):
    return lambda d_k, var_q, var_k, rho: (stats_reference(d_k, var_q, var_k, rho)[0], std(d_k, var_q, var_k, rho))


def _with_mean(mean):
    return lambda d_k, var_q, var_k, rho: (mean(d_k, var_q, var_k, rho), stats_reference(d_k, var_q, var_k, rho)[1])


@pytest.mark.parametrize("wrong, phrases", [
    (_with_mean(lambda d, a, b, r: 0.0), ["mean of q·k", "not 0"]),
    (_with_mean(lambda d, a, b, r: d * r), ["left out σ_q σ_k"]),
    (_with_mean(lambda d, a, b, r: d * r * a * b), ["not the variances"]),
    (_with_mean(lambda d, a, b, r: r * np.sqrt(a * b)), ["mean of one product"]),
    (_with_mean(lambda d, a, b, r: np.sqrt(d) * r * np.sqrt(a * b)), ["means add"]),
    (_with_mean(lambda d, a, b, r: d * abs(r) * np.sqrt(a * b)), ["negative ρ", "|ρ|"]),
    (_with_std(lambda d, a, b, r: np.sqrt(d * a * b)), ["uncorrelated", "correlation adds variance"]),
    (_with_std(lambda d, a, b, r: np.sqrt(d * a * b * (1 + 2 * r**2))), ["subtract the squared mean"]),
    (_with_std(lambda d, a, b, r: np.sqrt(d * a * b * (1 - r**2))), ["sign of the ρ² term"]),
    (_with_std(lambda d, a, b, r: d * a * b * (1 + r**2)), ["that is the variance"]),
    (_with_std(lambda d, a, b, r: np.sqrt(d * (1 + r**2)) * a * b), ["not var_q·var_k"]),
    (_with_std(lambda d, a, b, r: d * np.sqrt(a * b * (1 + r**2))), ["variances do"]),
    (_with_std(lambda d, a, b, r: np.sqrt(a * b * (1 + r**2))), ["spread of one product"]),
    (_with_std(lambda d, a, b, r: np.sqrt(d * (1 + r**2))), ["variances var_q and var_k are missing"]),
    (_with_std(lambda d, a, b, r: 1.0), ["standard deviation of q·k is wrong", "E[q_i²k_i²]"]),
    (lambda d, a, b, r: stats_reference(d, a, b, r)[1], ["two numbers", "mean, std"]),
    (lambda d, a, b, r: None, ["return"]),
])
def test_3_1_classic_mistakes_are_diagnosed(wrong, phrases):
    expect_failure("3.1", wrong, *phrases)


def test_3_1_takes_only_plain_numbers():
    seen = []

    def spy(d_k, var_q, var_k, rho):
        seen.append((d_k, var_q, var_k, rho))
        return stats_reference(d_k, var_q, var_k, rho)

    check("3.1", spy)
    assert seen and all(type(d) is int and all(type(x) is float for x in rest) for d, *rest in seen)
    assert seen[0] == (64, 1.0, 1.0, 0.0)


# ------------------------------------------------------------------------------------------------------------ 3.2


def query_reference(q, K, V):
    c = 1 / np.sqrt(q.shape[-1])
    p = np.exp(c * K @ q - np.max(c * K @ q))
    p /= p.sum()  # (S,)
    dp_dq = (np.diag(p) - np.outer(p, p)) @ (c * K)  # (S, d_k)
    return dp_dq, V.T @ dp_dq  # (Dv, d_k)


def query_by_vjp(q, K, V):  # another correct route: one row of the Jacobian at a time, J never formed
    c = 1 / np.sqrt(q.shape[-1])
    s = c * K @ q
    p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    rows = [p[j] * ((np.arange(len(p)) == j) - p) @ (c * K) for j in range(len(p))]  # ∂p_j/∂q
    dp_dq = np.array(rows)
    return dp_dq, np.einsum("si,sa->ia", V, dp_dq)


def query_by_finite_differences(q, K, V, eps=1e-5):  # what a learner might check with: central differences
    def forward(x):
        s = K @ x / np.sqrt(x.size)
        p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        return p, V.T @ p
    cols = [[(a - b) / (2 * eps) for a, b in zip(forward(q + eps * e), forward(q - eps * e))] for e in np.eye(q.size)]
    return np.stack([c[0] for c in cols], axis=1), np.stack([c[1] for c in cols], axis=1)


def _query_mistake(scale=None, jac=None, ds_scale=None, transpose_dp=False, transpose_do=False, product=None):
    """query_reference with one classic mistake: the scale, J, the scale of ∂s/∂q, a transposed result."""
    def answer(q, K, V):
        d_k, S = q.shape[-1], K.shape[0]
        c = scale(q, K, V) if scale else 1 / np.sqrt(d_k)
        s = c * K @ q
        p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        J = jac(p) if jac else np.diag(p) - np.outer(p, p)
        dp_dq = J @ ((ds_scale if ds_scale is not None else c) * K)
        do_dq = product(V, dp_dq) if product else V.T @ dp_dq
        return (dp_dq.T if transpose_dp else dp_dq), (do_dq.T if transpose_do else do_dq)
    return answer


def test_3_2_correct_solutions_pass(capsys):
    assert passes("3.2", query_reference, capsys)
    assert passes("3.2", query_by_vjp, capsys)
    assert passes("3.2", lambda q, K, V: list(query_reference(q, K, V)), capsys)  # a list for the pair
    assert passes("3.2", lambda q, K, V: tuple(a.astype(np.float32) for a in query_reference(
        *(x.astype(np.float32) for x in (q, K, V)))), capsys)  # computed in float32


def test_3_2_reference_matches_finite_differences():
    rng = np.random.default_rng(5)
    q, K, V = rng.normal(size=7), rng.normal(size=(5, 7)), rng.normal(size=(5, 3))
    for want, got in zip(query_reference(q, K, V), query_by_finite_differences(q, K, V)):
        np.testing.assert_allclose(got, want, atol=1e-9)


@pytest.mark.parametrize("wrong, phrases", [
    (_query_mistake(ds_scale=1.0), ["you left the scale out of ∂s/∂q", "dp_dq is wrong"]),
    (_query_mistake(scale=lambda q, K, V: 1.0, ds_scale=1.0), ["you left out the scale 1/√d_k altogether"]),
    (_query_mistake(scale=lambda q, K, V: 1 / q.size), ["you divided by d_k instead of √d_k"]),
    (_query_mistake(scale=lambda q, K, V: 1 / np.sqrt(K.shape[0])), ["number of keys S"]),
    (_query_mistake(scale=lambda q, K, V: 1 / np.sqrt(V.shape[1])), ["the values' Dv"]),
    (_query_mistake(jac=np.diag), ["you used diag(p) for ∂p/∂s", "-p_i·p_j"]),
    (_query_mistake(jac=lambda p: np.diag(p * (1 - p))), ["only the diagonal p_i(1 - p_i)"]),
    (_query_mistake(jac=lambda p: np.outer(p, p) - np.diag(p)), ["flipped the sign of J"]),
    (_query_mistake(jac=lambda p: np.eye(p.size)), ["you skipped the softmax"]),
    (_query_mistake(transpose_dp=True), ["dp_dq has the wrong shape", "yours is its transpose"]),
    (_query_mistake(transpose_do=True), ["do_dq has the wrong shape", "V.T @ dp_dq", "yours is its transpose"]),
    (_query_mistake(product=lambda V, dp: V @ dp), ["raised ValueError", "follow the shapes"]),
    (_query_mistake(product=lambda V, dp: V.T @ (dp + 0.01)), ["do_dq is wrong", "chain rule"]),
    (lambda q, K, V: query_reference(q, K, V)[0], ["two arrays", "dp_dq, do_dq"]),
    (lambda q, K, V: None, ["return"]),
])
def test_3_2_classic_mistakes_are_diagnosed(wrong, phrases):
    expect_failure("3.2", wrong, *phrases)


def test_3_2_sizes_and_inputs_come_from_the_grading_seed(monkeypatch):
    from attnlab import exercises
    from attnlab.exercises import nb03

    seen = set()
    for secret in (None, 1, 2, 3, 4, 5):
        monkeypatch.setattr(exercises, "_SECRET", secret)
        (_, q, K, V), (what, q2, _, _) = nb03._query_cases()
        assert len({q.size, K.shape[0], V.shape[1]}) == 3, "d_k, S and Dv all differ"
        seen.add((q.size, K.shape[0], V.shape[1], float(q[0])))
        assert "its weight there is" in what
    assert len(seen) == 6


# ------------------------------------------------------------------------------------------------------------ 3.3


def heads_reference(q, k, H):
    D = q.shape[-1] // H
    return np.stack([q[..., h * D:(h + 1) * D] @ k[..., h * D:(h + 1) * D].swapaxes(-1, -2) for h in range(H)],
                    axis=-3) / np.sqrt(D)


def heads_by_reshape(q, k, H):  # the notebook-04 way: reshape, swap, one batched matmul
    D = q.shape[-1] // H
    qh = q.reshape(*q.shape[:-1], H, D).swapaxes(-2, -3)  # (..., H, T, D)
    kh = k.reshape(*k.shape[:-1], H, D).swapaxes(-2, -3)  # (..., H, S, D)
    return np.einsum("...htd,...hsd->...hts", qh, kh) / np.sqrt(D)


def test_3_3_correct_solutions_pass(capsys):
    assert passes("3.3", heads_reference, capsys)
    assert passes("3.3", heads_by_reshape, capsys)


def _scaled(factor):
    return lambda q, k, H: heads_reference(q, k, H) * np.sqrt(q.shape[-1] // H) * factor(q, k, H)


@pytest.mark.parametrize("wrong, phrases", [
    (_scaled(lambda q, k, H: 1.0), ["no scaling"]),
    (_scaled(lambda q, k, H: 1 / np.sqrt(q.shape[-1])), ["√d_model", "instead of √D"]),
    (_scaled(lambda q, k, H: 1 / (q.shape[-1] // H)), ["divided by D instead of √D"]),
    (_scaled(lambda q, k, H: 1 / q.shape[-1]), ["divided by d_model"]),
    (_scaled(lambda q, k, H: np.sqrt(q.shape[-1] // H)), ["multiplied"]),
    (_scaled(lambda q, k, H: 1 / np.sqrt(H)), ["the number of heads H"]),
    (_scaled(lambda q, k, H: 1 / np.sqrt(q.shape[-2])), ["the number of queries T"]),
    (_scaled(lambda q, k, H: 1 / np.sqrt(k.shape[-2])), ["the number of keys S"]),
    (lambda q, k, H: q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1] // H), ["one score matrix for all heads",
                                                                        "sum of the heads"]),
    (lambda q, k, H: heads_by_reshape(q.reshape(*q.shape[:-1], q.shape[-1] // H, H).swapaxes(-1, -2).reshape(q.shape),
                                      k.reshape(*k.shape[:-1], k.shape[-1] // H, H).swapaxes(-1, -2).reshape(k.shape),
                                      H), ["wrong columns", "contiguous block"]),
    (lambda q, k, H: np.moveaxis(heads_reference(q, k, H), -3, -2), ["before the query axis"]),
    (lambda q, k, H: heads_reference(q, k, H).swapaxes(-1, -2), ["wrong shape", "(T, S), not (S, T)"]),
    (lambda q, k, H: np.moveaxis(heads_reference(q, k, H), -3, 0), ["after the batch axes"]),
    (lambda q, k, H: np.stack([q[:, h::H] @ k[:, h::H].T for h in range(H)]) / np.sqrt(q.shape[-1] // H)
     if q.ndim == 2 else heads_reference(q, k, H), ["wrong columns"]),
    (lambda q, k, H: np.stack([q[..., h * (q.shape[-1] // H):(h + 1) * (q.shape[-1] // H)]
                               @ k[..., h * (q.shape[-1] // H):(h + 1) * (q.shape[-1] // H)].T for h in range(H)])
     / np.sqrt(q.shape[-1] // H), ["raised ValueError", "swapaxes"]),
    (lambda q, k, H: np.exp(heads_reference(q, k, H)) / np.exp(heads_reference(q, k, H)).sum(-1, keepdims=True),
     ["softmax weights"]),
    (lambda q, k, H: heads_reference(q, k, H) + 1.0, ["entry [..., 0, 0, 0]"]),
    (lambda q, k, H: None, ["return"]),
])
def test_3_3_classic_mistakes_are_diagnosed(wrong, phrases):
    expect_failure("3.3", wrong, *phrases)


def test_3_3_d_model_mistake_names_both_widths():
    message = expect_failure("3.3", _scaled(lambda q, k, H: 1 / np.sqrt(q.shape[-1])))
    assert "√12" in message and "√4" in message


def test_every_exercise_of_notebook_03_declares_what_it_forbids():
    from attnlab.exercises import _FORBIDS, forbidden

    forbidden("3.1")
    assert {"3.1", "3.2", "3.3"} <= set(_FORBIDS)
    assert "attnlab.split_heads" in forbidden("3.3")
