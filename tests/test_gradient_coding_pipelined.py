"""Pipelined gradient coding: the staleness schedule, PGC-FR's exact stale gradient, PGC-CR's unbiased decoder."""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest
import torch

from torchgcc.gradient_coding import (
    CyclicRepetitionCode,
    FractionalRepetitionCode,
    PartitionedData,
    PipelinedGradientCode,
    Simulation,
    UncodedCode,
    make_gradient_code,
    staleness,
    weighted_gradient,
)


@pytest.mark.parametrize("slots", [1, 2, 3, 4])
def test_staleness_is_the_age_of_each_slots_last_computation(slots):
    """Replay the schedule (warm-up computes every slot at step 0, then slot t mod (s+1)) and compare."""
    code = PipelinedGradientCode(FractionalRepetitionCode(4 * slots, slots - 1))
    last = [None] * slots
    for step in range(40):
        for slot in code.slots_computed(step):
            last[slot] = step
        assert code.staleness(step).tolist() == [step - t for t in last]
        assert staleness(step, slots).max() <= slots - 1
        assert code.compute_load(step) == (slots if step == 0 else 1)


def _tiny_problem(n: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    x = torch.randn(n * 20, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (n * 20,))
    return model, PartitionedData(x, y, num_partitions=n, batch_size=4, seed=1)


@pytest.mark.parametrize("s", [1, 2, 3])
def test_pgc_fr_decodes_the_full_gradient_with_the_scheduled_staleness(s):
    """PGC-FR's update at step t equals sum_p grad loss_p(w_{t - tau_p}) on partition p's mini-batch of step
    t - tau_p, computed independently from the recorded weight history (float64)."""
    n, lr = 12, 0.3
    model, data = _tiny_problem(n)
    reference = copy.deepcopy(model)
    code = PipelinedGradientCode(FractionalRepetitionCode(n, s))
    simulation = Simulation(code, model, data, lr=lr, delays=None)
    history = [copy.deepcopy(reference)]
    generator = torch.Generator().manual_seed(s)
    for step in range(3 * (s + 1) + 2):
        arrived = torch.randperm(n, generator=generator)[: n - s].tolist()
        record = simulation.step(step, arrived)
        tau = code.staleness(step)
        total = 0
        for p in range(n):
            age = int(tau[p % (s + 1)])  # FR slot k of a group = its k-th partition
            total = total + weighted_gradient(history[step - age], [data.batch(p, step - age)], [1.0])
        updated = copy.deepcopy(history[-1])
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(
                torch.nn.utils.parameters_to_vector(updated.parameters()) - lr * total / n, updated.parameters()
            )
        history.append(updated)
        assert record.staleness == [n // (s + 1) * tau.tolist().count(t) for t in range(s + 1)]
        for mine, theirs in zip(model.parameters(), updated.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("s", [1, 2, 3])
def test_pgc_cr_uniform_decoder_is_unbiased_over_random_straggler_sets(s):
    """mu sum_{i in F} f_i averaged over every F of size n - s equals sum_j g_j exactly (fresh gradients)."""
    n = 12
    code = PipelinedGradientCode(CyclicRepetitionCode(n, s, seed=0))
    assert code.decoder == "uniform" and not code.exact
    g = torch.randn(n, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    f = code.B @ g
    sets = list(itertools.combinations(range(n), n - s))
    mean = sum(code.decode(list(F)) @ f for F in sets) / len(sets)
    torch.testing.assert_close(mean, g.sum(0), rtol=1e-12, atol=1e-12)
    assert code.decode(list(range(n - s)))[0].item() == pytest.approx(n / ((n - s) * (s + 1)))


@pytest.mark.parametrize("s", [1, 2, 3])
def test_pgc_cr_least_squares_decodes_exactly_for_every_straggler_set_at_n8(s):
    """``pgc-cr-ls`` at n = 8: for every straggler set of size <= s, ``a`` is numpy's minimum-norm least-squares
    solution of ``B_F^T a = 1`` and the decoded sum of fresh partition gradients is their exact sum; the authors'
    uniform decoder (``pgc-cr``) weights every partition off 1 by more than 0.1 at exactly s stragglers."""
    n = 8
    exact = make_gradient_code("pgc-cr-ls", num_workers=n, num_stragglers=s)
    uniform = make_gradient_code("pgc-cr", num_workers=n, num_stragglers=s)
    assert exact.exact and exact.decoder == "lstsq" and not uniform.exact
    g = torch.randn(n, 40, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
    B = exact.B.numpy()
    sets = [F for size in range(n - s, n + 1) for F in itertools.combinations(range(n), size)]
    assert len(sets) == sum(math.comb(n, k) for k in range(s + 1))
    for F in sets:
        a = exact.decode(list(F))
        reference, *_ = np.linalg.lstsq(B[list(F)].T, np.ones(n), rcond=None)
        conditioning = np.linalg.cond(B[list(F)])
        tolerance = 100 * n * np.finfo(np.float64).eps * conditioning
        np.testing.assert_allclose(a[list(F)].numpy(), reference, rtol=0, atol=tolerance * np.abs(reference).max())
        decoded = a @ (exact.B @ g)
        torch.testing.assert_close(decoded, g.sum(0), rtol=0, atol=tolerance * float(g.abs().sum(0).max()))
        if len(F) == n - s:
            weights = uniform.decode(list(F)) @ uniform.B
            assert (weights - 1).abs().min() > 0.1  # weights n c / ((n - s)(s + 1)), c holders arrived


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()


def _decoded_by_the_runtime(simulation: Simulation, step: int, arrived: list[int], lr: float) -> torch.Tensor:
    """The gradient sum ``simulation`` applies at ``step`` for ``arrived`` (from its SGD update); the model is then
    put back, so that the same step can be replayed for another arrived set (replayed, every worker computes its
    slot at the same weights, so the caches are the same whatever the set)."""
    before = _flat(simulation.model)
    simulation.step(step, arrived)
    decoded = (before - _flat(simulation.model)) * simulation.code.num_partitions / lr
    torch.nn.utils.vector_to_parameters(before, simulation.model.parameters())
    return decoded


def _gain(code: PipelinedGradientCode, arrived: list[int]) -> float:
    """``max_j sum_i |a_i B_ij|``: how much the decoded sum can amplify differences between a partition's copies."""
    return float((code.decode(arrived).unsqueeze(-1) * code.B).abs().sum(0).max())


@pytest.mark.parametrize("s", [1, 2, 3])
def test_pgc_cr_least_squares_in_the_runtime_recovers_the_full_gradient_when_the_copies_agree(s):
    """Inside the pipelined runtime (``Simulation``, caches, slots, every step's update), n = 8: with a loss linear
    in the weights and mini-batches of whole shards, every cached copy of a partition's gradient equals the fresh
    one, and for every straggler set of size <= s, at the warm-up step and after two slot cycles, the decoded sum
    equals the full-batch gradient sum computed by brute force (sum over partitions of the mean over the shard of
    ``y x^T``), to rounding amplified by the decoder's gain."""
    n, lr = 8, 0.5
    generator = torch.Generator().manual_seed(s)
    x = torch.randn(n * 5, 6, dtype=torch.float64, generator=generator)
    y = torch.randn(n * 5, 3, dtype=torch.float64, generator=generator)
    data = PartitionedData(x, y, num_partitions=n, batch_size=5, seed=1)
    full = sum(y[shard].T @ x[shard] / len(shard) for shard in data.shards).flatten()  # d/dW of mean(y . W x)
    model = torch.nn.Linear(6, 3, bias=False).double()
    code = make_gradient_code("pgc-cr-ls", num_workers=n, num_stragglers=s)
    simulation = Simulation(code, model, data, lr=lr, delays=None, loss_fn=lambda out, target: (out * target).sum(-1))
    sets = [
        [i for i in range(n) if i not in dropped]
        for size in range(s + 1)
        for dropped in itertools.combinations(range(n), size)
    ]
    eps = torch.finfo(torch.float64).eps
    last = 2 * (s + 1)  # the warm-up step and the step after two slot cycles, every set; the others replay one
    for step in range(last + 1):
        for arrived in sets if step in (0, last) else []:
            decoded = _decoded_by_the_runtime(simulation, step, arrived, lr)
            tolerance = (
                100 * n * eps * _gain(code, arrived) * (float(full.abs().max()) + float(_flat(model).abs().max()))
            )
            torch.testing.assert_close(decoded, full, rtol=0, atol=tolerance)
        simulation.step(step, sets[step % len(sets)])  # on to the next step


@pytest.mark.parametrize("s", [1, 2, 3])
def test_pgc_cr_least_squares_in_the_runtime_amplifies_the_differences_between_cached_copies(s):
    """Why ``pgc-cr-ls`` diverges in training (n = 8, tanh MLP, lr 0.3, the step after two slot cycles): for every
    straggler set of size <= s the runtime's decoded sum is exactly ``sum_i a_i sum_k B[i, pi_i(k)] g_k``, each
    ``g_k`` the cached gradient of worker i's slot k, computed by brute force from the recorded weights at step
    ``t - tau_k`` on that step's mini-batch (so the bookkeeping is right). A partition's copies differ (other steps,
    weights and mini-batches), and the least-squares coefficients (signs mixed, ``sum_i |a_i B_ij|`` up to hundreds)
    multiply those differences: its largest distance from the full-batch gradient at the step's weights exceeds
    twice the authors' uniform decoder's (coefficients ``n / (|F| (s + 1)) > 0``) on the same caches."""
    n, lr = 8, 0.3
    worst = {}
    for decoder in ("lstsq", "uniform"):
        model, data = _tiny_problem(n)
        history = [copy.deepcopy(model)]
        code = PipelinedGradientCode(CyclicRepetitionCode(n, s, seed=0), decoder=decoder)
        simulation = Simulation(code, model, data, lr=lr, delays=None)
        generator = torch.Generator().manual_seed(s)
        steps = 2 * (s + 1)
        for step in range(steps):
            simulation.step(step, torch.randperm(n, generator=generator)[: n - s].tolist())
            history.append(copy.deepcopy(model))
        tau = code.staleness(steps).tolist()
        cached = {
            (i, k): weighted_gradient(history[steps - tau[k]], [data.batch(p, steps - tau[k])], [1.0])
            for i in range(n)
            for k, p in enumerate(code.partitions(i))
        }
        everything = PartitionedData(data.x, data.y, num_partitions=n, batch_size=len(data.shards[0]), seed=1)
        full = sum(weighted_gradient(model, [everything.batch(p, 0)], [1.0]) for p in range(n))
        errors = []
        for size in range(s + 1):
            for dropped in itertools.combinations(range(n), size):
                arrived = [i for i in range(n) if i not in dropped]
                decoded = _decoded_by_the_runtime(simulation, steps, arrived, lr)
                a = code.decode(arrived)
                reference = sum(
                    float(a[i] * code.B[i, p]) * cached[i, k] for i in arrived for k, p in enumerate(code.partitions(i))
                )
                scale = _gain(code, arrived) * max(float(g.abs().max()) for g in cached.values())
                torch.testing.assert_close(decoded, reference, rtol=0, atol=1e3 * n * 2.2e-16 * scale)
                errors.append(float((decoded - full).norm() / full.norm()))
        worst[decoder] = max(errors)
    assert worst["lstsq"] > 2 * worst["uniform"]


def test_pipelined_code_rejects_other_codes_and_decoders():
    with pytest.raises(TypeError, match="FractionalRepetitionCode or CyclicRepetitionCode"):
        PipelinedGradientCode(UncodedCode(4))
    with pytest.raises(ValueError, match="decoder must be one of"):
        PipelinedGradientCode(FractionalRepetitionCode(4, 1), decoder="uniform")


def test_exact_codes_follow_the_uncoded_trajectory():
    """GC-FR and GC-CR decode the full fresh gradient, so they train like DGD (float64, 6 steps)."""
    n = 6
    final = {}
    for name in ("dgd", "gc-fr", "gc-cr"):
        model, data = _tiny_problem(n)
        code = make_gradient_code(name, num_workers=n, num_stragglers=1)
        simulation = Simulation(code, model, data, lr=0.5, delays=None)
        for step in range(6):
            simulation.step(step, list(range(n)) if name == "dgd" else [i for i in range(n) if i != step % n])
        final[name] = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    torch.testing.assert_close(final["gc-fr"], final["dgd"], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(final["gc-cr"], final["dgd"], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(
    ("step", "slots", "error", "name"),
    [
        (2.5, 3, ValueError, "step"),
        ("2", 3, TypeError, "step"),
        (2, 1.5, ValueError, "num_slots"),
    ],
)
def test_staleness_takes_integer_steps_only(step, slots, error, name):
    with pytest.raises(error, match=name):
        staleness(step, slots)
    # numpy integers are integers: the closed form min(step, (step - k) mod slots)
    assert staleness(np.int64(5), np.int64(3)).tolist() == [min(5, (5 - k) % 3) for k in range(3)]
