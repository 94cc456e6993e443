"""The engine layer on a virtual clock: the wait rule of every code (fastest N - S, a deadline, decodable, simulated
masks, an adaptive S), and CodedModule on workers equal to CodedModule in process given the round's mask."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

import torchgcc
from torchgcc.app.coded_job import InjectedDelays
from torchgcc.attacks import ConstantAttack
from torchgcc.coded_module import group_samples
from torchgcc.noise import GaussianNoise
from torchgcc.workers import Task, TooFewWorkersError, VirtualWorkers, WaitPolicy, run_round, stack_results

SERVICE = 0.01  # virtual seconds of every task's model


def _mlp() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5)).eval()


def _engine(model, delays: list[float]) -> InjectedDelays:
    """N = len(delays) virtual workers; worker n answers ``SERVICE + delays[n]`` after it is sent work."""
    engine = InjectedDelays(VirtualWorkers(model, len(delays), service_s=SERVICE), torch.zeros(len(delays)))
    engine.delays = torch.tensor(delays, dtype=torch.float64)
    return engine


DELAYS = [0.05, 0.01, 0.30, 0.02, 0.20, 0.04, 0.03, 0.10]  # worker n's delay; the order 1, 3, 6, 5, 0, 7, 4, 2


def _fastest(count: int) -> list[int]:
    return sorted(sorted(range(len(DELAYS)), key=DELAYS.__getitem__)[:count])


@pytest.mark.parametrize("stragglers", [0, 2, 5])
def test_a_code_waits_for_exactly_the_fastest_n_minus_s(stragglers):
    model, code = _mlp(), torchgcc.GCC(4, 8)
    coded = torch.randn(3, 8, 6)
    done = run_round(_engine(model, DELAYS), coded, code=code, wait=WaitPolicy(stragglers))
    expected = _fastest(8 - stragglers)
    assert done.mask.any(0).nonzero().flatten().tolist() == expected and bool((done.mask == done.mask[:1]).all())
    assert done.waited_s == pytest.approx(SERVICE + sorted(DELAYS)[7 - stragglers])
    arrival = torch.full((8,), math.inf, dtype=torch.float64)
    arrival[expected] = SERVICE + torch.tensor(DELAYS, dtype=torch.float64)[expected]
    torch.testing.assert_close(done.arrival_s, arrival)
    with torch.no_grad():
        reference = model(coded.flatten(0, 1)).unflatten(0, (3, 8))
    torch.testing.assert_close(done.results[:, expected], reference[:, expected], rtol=0, atol=1e-6)
    assert bool((done.results[:, [n for n in range(8) if n not in expected]] == 0).all())  # zeros: never arrived


def test_a_deadline_decodes_what_arrived_once_it_is_decodable():
    code = torchgcc.GCC(4, 8)  # decodes from min_arrived results
    done = run_round(_engine(_mlp(), DELAYS), torch.randn(2, 8, 6), code=code, wait=WaitPolicy(0, deadline_s=0.045))
    assert done.mask[0].nonzero().flatten().tolist() == _fastest(3)  # delays 0.01 .. 0.03 land by 0.045
    assert done.waited_s == pytest.approx(0.045)


@pytest.mark.parametrize(("name", "num_inputs", "delay"), [("replication", 4, 0.04), ("uncoded", 8, 0.30)])
def test_the_baselines_wait_until_they_can_decode(name, num_inputs, delay):
    """Replication (pairs 0-1, 2-3, 4-5, 6-7) ends when every pair has a copy: at the slowest pair's fastest copy
    (pair 0-1: 0.01, 2-3: 0.02, 4-5: 0.04, 6-7: 0.03); uncoded at the slowest worker (0.30)."""
    code = torchgcc.make_code(name, num_inputs=num_inputs, num_workers=8)
    done = run_round(_engine(_mlp(), DELAYS), torch.randn(2, 8, 6), code=code, wait=WaitPolicy(None))
    assert done.waited_s == pytest.approx(SERVICE + delay)
    assert bool(code.decodable(done.mask).all()) and done.num_stragglers is None


def test_a_required_mask_is_waited_for_and_topped_up_where_its_workers_never_come():
    """Simulated stragglers: the round waits for the drawn workers (until the deadline) and decodes from them; a
    group whose drawn workers did not all arrive, and which can then not be decoded, uses every arrived result."""
    model, code = _mlp(), torchgcc.make_code("lcc", num_inputs=2, num_workers=4, degree=1)  # needs 2 results
    delays = [0.0, 0.0, 0.0, 9.0]  # worker 3 never arrives in time
    required = torch.tensor([[True, True, False, False], [False, False, True, True], [True, False, True, True]])
    wait = WaitPolicy(1, deadline_s=0.5)
    done = run_round(_engine(model, delays), torch.randn(3, 4, 6), code=code, wait=wait)
    assert done.waited_s == pytest.approx(SERVICE)  # nothing required: the fastest N - S = 3 ...
    done = run_round(_engine(model, delays), torch.randn(3, 4, 6), code=code, wait=wait, required=required)
    assert done.waited_s == pytest.approx(0.5)  # ... required: worker 3 is waited for until the deadline
    expected = torch.tensor([[True, True, False, False], [True, True, True, False], [True, False, True, False]])
    assert torch.equal(done.mask, expected)  # group 1 had only worker 2: topped up with every arrived result


def test_too_few_results_by_the_timeout_is_a_clear_error():
    code = torchgcc.make_code("lcc", num_inputs=3, num_workers=4, degree=1)  # needs 3
    with pytest.raises(TooFewWorkersError, match=r"2 of 4 results after 1.0 s cannot be decoded"):
        run_round(_engine(_mlp(), [0.0, 0.0, 5.0, 5.0]), torch.randn(1, 4, 6), code=code, wait=WaitPolicy(timeout_s=1))


class FixedController:
    """A stand-in wait-count controller: chooses the S it is given, records what it observes."""

    def __init__(self, stragglers: int) -> None:
        self.stragglers, self.observed = stragglers, []

    def choose(self) -> int:
        return self.stragglers

    def observe(self, arrival_s, num_stragglers, watched_until) -> None:
        self.observed.append((arrival_s.clone(), num_stragglers, watched_until))


def test_an_adaptive_s_is_chosen_per_round_and_late_arrivals_are_watched():
    controller = FixedController(3)
    wait = WaitPolicy(adaptive=controller, watch_s=0.12)
    done = run_round(_engine(_mlp(), DELAYS), torch.randn(2, 8, 6), code=torchgcc.GCC(4, 8), wait=wait)
    assert done.num_stragglers == 3 and done.mask[0].nonzero().flatten().tolist() == _fastest(5)
    ((arrival, stragglers, watched),) = controller.observed
    assert stragglers == 3 and watched == pytest.approx(0.12) and done.watched_s == watched
    seen = [n for n in range(8) if SERVICE + DELAYS[n] <= 0.12]  # every worker faster than the watch was seen
    assert seen == sorted([*_fastest(5), 7])  # worker 7 (0.11) came after the decode, within the watch
    assert torch.isfinite(arrival).nonzero().flatten().tolist() == seen


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _mlp()

    def forward(self, x):
        logits = self.body(x)
        return {"logits": logits, "features": logits.tanh()[:, :2]}


@pytest.mark.parametrize("grouping", [False, True])
def test_coded_module_on_workers_equals_coded_module_in_process_with_the_rounds_mask(grouping):
    """Dict outputs, noise, an attack on a fixed worker and a grouping: one shared path after the results arrive."""
    model, code = TwoHeads(), torchgcc.GCC(4, 8, lambda_dec="spacing")
    x = torch.randn(10, 6)
    options = {"grouping": (lambda v: torch.argsort(v[:, 0])) if grouping else None}

    def extras():
        return {"noise": GaussianNoise(0.05, seed=1), "attack": ConstantAttack(value=3.0, workers=[1]), **options}

    on_workers = torchgcc.CodedModule(model, code, workers=_engine(model, DELAYS), wait=WaitPolicy(2), **extras())
    got = on_workers(x)
    assert on_workers.last_mask[0].nonzero().flatten().tolist() == _fastest(6)
    expected = torchgcc.CodedModule(model, code, **extras())(x, mask=on_workers.last_mask)
    assert list(got) == ["logits", "features"]
    for key in got:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-6)


def test_coded_module_on_workers_checks_its_arguments():
    model = _mlp()
    with pytest.raises(ValueError, match="N = code.num_workers = 8"):
        torchgcc.CodedModule(model, torchgcc.GCC(4, 8), workers=VirtualWorkers(model, 6))
    with pytest.raises(ValueError, match="wait applies to rounds on workers"):
        torchgcc.CodedModule(model, torchgcc.GCC(4, 8), wait=WaitPolicy(2))
    with pytest.raises(ValueError, match="num_stragglers"):
        WaitPolicy(-1)


class Rewritten:
    """An engine whose completions from ``worker`` are rewritten by ``change(output)`` (scripted faults)."""

    def __init__(self, engine, worker: int, change) -> None:
        self.engine, self.worker, self.change = engine, worker, change
        self.num_workers, self.workers_per_process = engine.num_workers, 1

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def wait(self, until_s):
        return [
            dataclasses.replace(done, output=self.change(done.output)) if done.worker == self.worker else done
            for done in self.engine.wait(until_s)
        ]


@pytest.mark.parametrize(
    "change",
    [lambda out: out[:, :2], lambda out: out.double(), lambda out: out.to("meta")],
    ids=["trailing shape", "dtype", "device"],
)
def test_a_malformed_result_is_a_worker_fault_the_round_decodes_without(change, caplog):
    """Worker 1 (the fastest) returns a result of another trailing shape, dtype or device than the others: with
    S = 1 the round leaves it out (logged, naming the worker and both shapes), waits for the 7 others, and equals the
    in-process CodedModule with the mask it reports."""
    model, code = _mlp(), torchgcc.GCC(4, 8, lambda_dec="spacing")
    x = torch.randn(10, 6)
    on_workers = torchgcc.CodedModule(
        model, code, workers=Rewritten(_engine(model, DELAYS), 1, change), wait=WaitPolicy(1)
    )
    with caplog.at_level("WARNING", logger="torchgcc.workers"):
        got = on_workers(x)
    assert on_workers.last_mask[0].nonzero().flatten().tolist() == [0, 2, 3, 4, 5, 6, 7]  # N - S = 7 without 1
    torch.testing.assert_close(got, torchgcc.CodedModule(model, code)(x, mask=on_workers.last_mask), rtol=0, atol=1e-6)
    assert on_workers.last_round.arrival_s[1] == math.inf
    assert "worker 1" in caplog.text and "(5,)" in caplog.text, caplog.text


def test_results_that_cannot_agree_are_a_clear_error():
    """Two workers, replication of one input: each returns another shape, no majority: a ValueError naming both."""
    model = _mlp()
    code = torchgcc.make_code("replication", num_inputs=1, num_workers=2)
    engine = Rewritten(_engine(model, [0.0, 0.01]), 1, lambda out: out[:, :2])
    with pytest.raises(ValueError, match=r"worker 0 .*\(5,\).*worker 1 .*\(2,\)"):
        run_round(engine, torch.randn(3, 2, 6), code=code, wait=WaitPolicy(0))


def test_stack_results_names_the_workers_whose_shapes_differ():
    with pytest.raises(ValueError, match=r"workers 0, 1 returned \(2,\) float32 on cpu; worker 2 returned \(3,\)"):
        stack_results({0: torch.zeros(4, 2), 1: torch.zeros(4, 2), 2: torch.zeros(4, 3)}, 4, 3)


def test_a_model_returning_none_on_a_worker_is_the_model_output_error_at_once():
    """As in process (flatten_output's TypeError), naming the worker, not a timeout blaming slowness."""
    model, code = _mlp(), torchgcc.GCC(4, 8)
    engine = Rewritten(_engine(model, DELAYS), 3, lambda out: None)
    with pytest.raises(TypeError, match=r"worker 3.*got NoneType"):
        run_round(engine, torch.randn(2, 8, 6), code=code, wait=WaitPolicy(0, timeout_s=1000.0))
    assert engine.now() < 1.0  # at once, on the virtual clock


def test_run_round_checks_required():
    model, code = _mlp(), torchgcc.GCC(4, 8, lambda_dec="spacing")
    coded = torch.randn(2, 8, 6)
    with pytest.raises(TypeError, match="required"):
        run_round(_engine(model, DELAYS), coded, code=code, wait=WaitPolicy(0), required=torch.ones(2, 8))
    with pytest.raises(TypeError, match="required"):
        run_round(_engine(model, DELAYS), coded, code=code, wait=WaitPolicy(0), required=[[True] * 8] * 2)
    short = torch.ones(2, 8, dtype=torch.bool)
    short[1] = False
    short[1, 3] = True
    engine = _engine(model, DELAYS)
    with pytest.raises(ValueError, match=r"group 1 has 1 arrived results but this decoder needs at least 2"):
        run_round(engine, coded, code=code, wait=WaitPolicy(0), required=short)
    assert engine.now() == 0.0  # before any work was sent
    with pytest.raises(ValueError, match=r"group 1 has 1 arrived results but this decoder needs at least 2"):
        torchgcc.CodedModule(model, code)(torch.randn(8, 6), mask=short)  # the in-process error it mirrors


def test_every_result_due_at_one_virtual_instant_comes_in_one_wait():
    """Every worker finishes at t = 1 s, after a 0.5 s deadline: one wait hands over all 8 (as ProcessWorkers drains
    every ready pipe), so the deadline's decode uses all of them, equal to the uncoded model like a round without a
    deadline (it used to end after the first min_arrived: replication with 6 of 8 inputs NaN)."""
    model = _mlp()
    x = torch.randn(4, 6)
    for code in (
        torchgcc.make_code("replication", num_inputs=4, num_workers=8),
        torchgcc.GCC(4, 8, lambda_dec="spacing"),
    ):
        engine = VirtualWorkers(model, 8, service_s=1.0)
        coded = torchgcc.CodedModule(model, code, workers=engine, wait=WaitPolicy(0, deadline_s=0.5))
        got = coded(x)
        assert bool(coded.last_mask.all()) and coded.last_round.arrival_s.tolist() == [1.0] * 8
        torch.testing.assert_close(got, torchgcc.CodedModule(model, code)(x, mask=coded.last_mask), rtol=0, atol=1e-6)
    engine = VirtualWorkers(model, 3, service_s=1.0)
    engine.submit([Task(n, n, x) for n in range(3)])
    assert sorted(done.key for done in engine.wait(math.inf)) == [0, 1, 2] and engine.now() == 1.0


@pytest.mark.parametrize(
    ("arguments", "error"),
    [((2.5,), ValueError), ((0,), ValueError), ((-2,), ValueError), (("8",), TypeError), ((8, "1"), TypeError)],
)
def test_virtual_workers_check_their_arguments(arguments, error):
    num_workers, *service = arguments
    with pytest.raises(error, match="service_s" if service else "num_workers"):
        VirtualWorkers(_mlp(), num_workers, **({"service_s": service[0]} if service else {}))


@pytest.mark.parametrize(
    ("options", "error", "name"),
    [
        ({"timeout_s": "5"}, TypeError, "timeout_s"),
        ({"timeout_s": 0}, ValueError, "timeout_s"),
        ({"deadline_s": "1"}, TypeError, "deadline_s"),
        ({"deadline_s": math.nan}, ValueError, "deadline_s"),
        ({"watch_s": -1}, ValueError, "watch_s"),
        ({"num_stragglers": 1.5}, ValueError, "num_stragglers"),
        ({"num_stragglers": "2"}, TypeError, "num_stragglers"),
    ],
)
def test_wait_policy_names_a_bad_argument(options, error, name):
    with pytest.raises(error, match=name):
        WaitPolicy(**options)


def test_wait_policy_takes_an_infinite_timeout_and_numpy_numbers():
    import numpy as np

    wait = WaitPolicy(np.int64(2), deadline_s=np.float64(0.5), timeout_s=math.inf)
    assert wait.num_stragglers == 2 and wait.deadline_s == 0.5 and wait.timeout_s == math.inf


class _NanOnWorkerOne(nn.Module):
    """``_mlp()``, NaN on the coded inputs of worker 1 (``poisoned``: ``(B, *in)``)."""

    def __init__(self, poisoned: torch.Tensor) -> None:
        super().__init__()
        self.body, self.poisoned = _mlp(), poisoned

    def forward(self, z):
        hit = (z.unsqueeze(1) == self.poisoned.unsqueeze(0)).all(-1).any(1, keepdim=True)
        return torch.where(hit, math.nan, self.body(z))


def test_nonfinite_straggle_on_workers_reports_the_results_the_decoder_used():
    """A worker whose result is NaN arrived, but with ``nonfinite="straggle"`` the decoder drops it: ``last_mask`` and
    ``last_round.mask`` say so (docs: "the results that arrived and were used"), and the in-process module with clean
    results under that mask gives the same outputs (the reference); its arrival time is still reported."""
    code = torchgcc.GCC(4, 8, lambda_dec="spacing", nonfinite="straggle")
    x = torch.randn(10, 6)
    poisoned = code.encoder(group_samples(x, 4))[:, 1]
    model = _NanOnWorkerOne(poisoned)
    coded = torchgcc.CodedModule(model, code, workers=_engine(model, DELAYS), wait=WaitPolicy(2))
    with torch.no_grad():
        out = coded(x)
    expected = torch.zeros(3, 8, dtype=torch.bool)
    expected[:, [n for n in _fastest(6) if n != 1]] = True
    assert torch.equal(coded.last_mask, expected) and torch.equal(coded.last_round.mask, expected)
    assert math.isfinite(coded.last_round.arrival_s[1])
    with torch.no_grad():
        reference = torchgcc.CodedModule(_mlp(), code)(x, mask=coded.last_mask)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-6)
