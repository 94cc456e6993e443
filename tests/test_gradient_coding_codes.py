"""Gradient codes: the recovery condition by brute force, exact decoding in float64, clear errors, baselines."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from torchgcc.gradient_coding import (
    CyclicRepetitionCode,
    FractionalRepetitionCode,
    IgnoreStragglersCode,
    IgnoreStragglersGCCode,
    UncodedCode,
    UndecodableError,
    apply_update,
    combine,
    list_gradient_codes,
    make_gradient_code,
    weighted_gradient,
)


def _arrived_sets(n: int, max_stragglers: int):
    for size in range(max_stragglers + 1):
        for stragglers in itertools.combinations(range(n), size):
            yield [i for i in range(n) if i not in stragglers]


def _codes(n: int, s: int):
    yield CyclicRepetitionCode(n, s, seed=n * 10 + s)
    if n % (s + 1) == 0:
        yield FractionalRepetitionCode(n, s)


EPS = float(np.finfo(np.float64).eps)


def _residual_bound(BF: np.ndarray, a: np.ndarray) -> float:
    """Rounding bound of ``max |a^T B_F - 1|`` for a backward-stable least-squares solve of the consistent system
    ``B_F^T a = 1``: ``c * max(k, |F|) * eps * (||B_F||_2 ||a||_2 + sqrt(k))`` with ``c = 10``."""
    return 10 * max(BF.shape) * EPS * (np.linalg.norm(BF, 2) * np.linalg.norm(a) + np.sqrt(BF.shape[1]))


@pytest.mark.parametrize(("n", "s"), [(n, s) for n in range(3, 13) for s in range(1, 5) if s < n])
def test_every_straggler_set_of_size_at_most_s_satisfies_the_recovery_condition(n, s):
    """Condition 1 (brute force): 1 lies in the row span of B_F, checked with numpy's own least squares, and the
    decoder's a solves a^T B_F = 1 with zeros outside F, both within the rounding bound of their conditioning."""
    for code in _codes(n, s):
        B = code.B.numpy()
        assert ((B != 0).sum(axis=1) == s + 1).all()  # load s + 1: the lower bound, met with equality
        assert ((B != 0).sum(axis=0) == s + 1).all()  # every partition on s + 1 workers
        for F in _arrived_sets(n, s):
            x, *_ = np.linalg.lstsq(B[F].T, np.ones(n), rcond=None)
            assert np.abs(x @ B[F] - 1).max() <= _residual_bound(B[F], x), (code, F)
            a = code.decode(F).numpy()
            assert np.abs(a @ B - 1).max() <= _residual_bound(B[F], a[F]), (code, F)
            assert (a[[i for i in range(n) if i not in F]] == 0).all()


@pytest.mark.parametrize("s", [1, 2, 3])
@pytest.mark.parametrize("kind", ["fr", "cr"])
def test_decoding_reproduces_the_gradient_sum_in_float64(kind, s):
    """sum_i a_i f_i with f = B g equals sum_j g_j for every straggler set (n = 12), to the rounding bound of the
    decode's conditioning kappa = ||a||_2 ||B_F||_2 (up to 1.35e6 for CR at s = 3):
    ||decoded - sum|| / ||sum|| <= c * n * eps * kappa * ||g||_F / ||sum||, with c = 1 (measured: at most 0.06)."""
    n = 12
    code = FractionalRepetitionCode(n, s) if kind == "fr" else CyclicRepetitionCode(n, s, seed=0)
    g = torch.randn(n, 1000, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
    f = code.B @ g
    total = g.sum(0)
    scale = float(g.norm() / total.norm())
    for stragglers in itertools.combinations(range(n), s):
        F = [i for i in range(n) if i not in stragglers]
        a = code.decode(F)
        kappa = float(a.norm() * torch.linalg.matrix_norm(code.B[F], ord=2))
        error = float((a @ f - total).norm() / total.norm())
        assert error <= n * EPS * kappa * scale, (F, error, kappa)


def test_fr_takes_the_first_arrival_of_every_group():
    code = FractionalRepetitionCode(6, 2)  # groups {0,1,2}, {3,4,5}
    a = code.decode([5, 1, 3, 0])
    assert a.tolist() == [0, 1, 0, 0, 0, 1]
    with pytest.raises(UndecodableError, match=r"group\(s\) \[1\]"):
        code.decode([0, 1, 2])
    with pytest.raises(ValueError, match="divide"):
        FractionalRepetitionCode(7, 2)


def test_cr_raises_a_clear_error_instead_of_a_wrong_gradient():
    code = CyclicRepetitionCode(12, 3, seed=0)
    with pytest.raises(UndecodableError, match="cannot recover the gradient sum.*needs at least n - s = 9 workers, 8"):
        code.decode(list(range(8)))
    with pytest.raises(ValueError, match="distinct workers"):
        code.decode([0, 0, 1])
    with pytest.raises(UndecodableError, match="no worker"):
        code.decode([])


def test_cr_tolerance_follows_the_conditioning_at_n32_s6():
    """The issue's case: at n = 32, s = 6 (cond(B_F) up to ~3e8) a fixed atol of 1e-8 refused decodable sets. Every
    sampled set of n - s = 26 workers (1,200 random ones and the 32 cyclic blocks) decodes to a^T B_F = 1 within its
    rounding bound, and every sampled set of 25 is refused, its message counting the workers that arrived."""
    n, s = 32, 6
    code = CyclicRepetitionCode(n, s, seed=0)
    generator = torch.Generator().manual_seed(0)
    decodable = [torch.randperm(n, generator=generator)[: n - s].tolist() for _ in range(1200)]
    decodable += [[(start + s + j) % n for j in range(n - s)] for start in range(n)]
    for F in decodable:
        a = code.decode(F).numpy()
        assert np.abs(a @ code.B.numpy() - 1).max() <= _residual_bound(code.B.numpy()[sorted(F)], a[sorted(F)])
    for _ in range(100):
        F = torch.randperm(n, generator=generator)[: n - s - 1].tolist()
        with pytest.raises(UndecodableError, match="needs at least n - s = 26 workers, 25 arrived"):
            code.decode(F)


def test_worker_indices_must_be_integers():
    """FractionalRepetitionCode(4, 1).decode([0.5, 3]) used to read 0.5 as worker 0."""
    code = FractionalRepetitionCode(4, 1)
    for bad in ([0.5, 3], [True, 3], [1.0, 3], [torch.tensor(0.0), 3]):
        with pytest.raises(TypeError, match="worker indices must be integers"):
            code.decode(bad)
    expected = code.decode([0, 3]).tolist()
    assert code.decode([np.int64(0), torch.tensor(3)]).tolist() == expected == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(TypeError, match="worker indices must be integers"):
        CyclicRepetitionCode(6, 1).decode([0, 1, 2, 3, 4.0])


def test_cr_construction_is_seeded_and_in_the_null_space():
    a, b = CyclicRepetitionCode(10, 3, seed=4), CyclicRepetitionCode(10, 3, seed=4)
    assert torch.equal(a.B, b.B)
    assert not torch.equal(a.B, CyclicRepetitionCode(10, 3, seed=5).B)
    assert a.partitions(8) == [8, 9, 0, 1] and torch.equal(a.B.diagonal(), torch.ones(10, dtype=torch.float64))


def test_uncoded_and_ignore_stragglers():
    assert UncodedCode(4).decode([3, 1, 0, 2]).tolist() == [1, 1, 1, 1]
    with pytest.raises(UndecodableError, match="missing \\[2\\]"):
        UncodedCode(4).decode([0, 1, 3])
    code = IgnoreStragglersCode(12, 3)
    a = code.decode([0, 2, 4, 5, 6, 7, 8, 9, 10])
    assert a.sum().item() == pytest.approx(12) and a[1] == 0 and a[0] == pytest.approx(12 / 9)
    assert code.wait_for == 9 and code.compute_load(0) == 1


def _largest_disjoint(code: IgnoreStragglersGCCode, arrived: list[int]) -> int:
    supports = {i: set(code.partitions(i)) for i in arrived}
    for size in range(len(arrived), 0, -1):
        for subset in itertools.combinations(arrived, size):
            if sum(len(supports[i]) for i in subset) == len(set().union(*(supports[i] for i in subset))):
                return size
    return 0


@pytest.mark.parametrize("layout", ["cr", "fr"])
def test_is_gc_keeps_a_largest_disjoint_set(layout):
    """Against brute force over every subset (n = 8, c = 2, all arrived sets of 5 and 6 workers)."""
    code = IgnoreStragglersGCCode(8, 3, partitions_per_worker=2, layout=layout)
    for size in (5, 6):
        for arrived in itertools.combinations(range(8), size):
            chosen = code.disjoint_workers(list(arrived))
            partitions = [p for i in chosen for p in code.partitions(i)]
            assert len(partitions) == len(set(partitions))
            assert len(chosen) == _largest_disjoint(code, list(arrived)), arrived
            a = code.decode(list(arrived))
            assert (a @ code.B).sum().item() == pytest.approx(8)  # normalised to the sum over n partitions


def test_gradient_codes_registry():
    assert set(list_gradient_codes()) >= {"dgd", "is-sgd", "gc-fr", "gc-cr", "is-gc", "pgc-fr", "pgc-cr"}
    with pytest.raises(ValueError, match="unknown gradient code"):
        make_gradient_code("nope", num_workers=4, num_stragglers=1)


def test_one_backward_pass_equals_the_weighted_sum_of_partition_gradients():
    """weighted_gradient's single backward pass on sum_j B_ij loss_j against one backward pass per partition."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    batches = [(torch.randn(4, 5, dtype=torch.float64), torch.randint(0, 3, (4,))) for _ in range(3)]
    weights = [0.5, -2.0, 1.25]
    reference = 0
    for (x, y), w in zip(batches, weights):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        reference = reference + w * torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    one_pass = weighted_gradient(model, batches, torch.tensor(weights, dtype=torch.float64))
    torch.testing.assert_close(one_pass, reference, rtol=1e-10, atol=1e-12)


def _linear_batches(sizes):
    torch.manual_seed(1)
    model = torch.nn.Linear(2, 3).double()
    return model, [(torch.randn(m, 2, dtype=torch.float64), torch.randint(0, 3, (m,))) for m in sizes]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda model, batches: weighted_gradient(model, batches, [1.0, 1.0, 5.0]), "weights"),
        (lambda model, batches: weighted_gradient(model, batches, [1.0]), "weights"),
        (lambda model, batches: weighted_gradient(model, [], []), "batches"),
        (
            lambda model, batches: weighted_gradient(
                model, [batches[0], (batches[1][0][:0], batches[1][1][:0])], [1.0, 1.0]
            ),
            "batches",
        ),
        (lambda model, batches: apply_update(model, torch.ones(10), lr=0.1, num_partitions=1), "gradient_sum"),
        (lambda model, batches: apply_update(model, torch.ones(5), lr=0.1, num_partitions=1), "gradient_sum"),
        (lambda model, batches: apply_update(model, torch.ones(9), lr=0.1, num_partitions=0), "num_partitions"),
        (lambda model, batches: apply_update(model, torch.ones(9), lr=0.1, num_partitions=2.5), "num_partitions"),
        (lambda model, batches: combine({0: torch.ones(3)}, torch.zeros(2, dtype=torch.float64)), "a"),
    ],
)
def test_gradient_helpers_refuse_entries_they_would_drop(call, name):
    model, batches = _linear_batches([2, 2])
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call(model, batches)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # nothing applied


def test_apply_update_is_sgd_on_the_partition_mean():
    model, _ = _linear_batches([1])
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    step = torch.arange(9, dtype=torch.float64)
    apply_update(model, step, lr=0.3, num_partitions=np.int64(3))
    torch.testing.assert_close(torch.cat([p.detach().reshape(-1) for p in model.parameters()]), flat - 0.1 * step)


@pytest.mark.parametrize(("seed", "error"), [("a", TypeError), (1.5, ValueError), (2**70, ValueError)])
def test_cr_seed_must_be_an_integer(seed, error):
    with pytest.raises(error, match="seed"):
        CyclicRepetitionCode(4, 1, seed=seed)
    assert torch.equal(CyclicRepetitionCode(4, 1, seed=np.int64(3)).B, CyclicRepetitionCode(4, 1, seed=3).B)
