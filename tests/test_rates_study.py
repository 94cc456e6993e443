"""``reproduce rates``: its worst-case MSE against our own brute force over every block position, which shares no code
with the oracle: scipy's natural spline for natural-spline GCC, one decoder call per block and group for the others."""

import math

import numpy as np
import pytest
import torch
from references import natural_spline_reference

from torchgcc.app.experiments import rates_study

TINY = rates_study.Config(
    workers=(32, 48),
    stragglers=(4,),
    stragglers_at=(),
    stragglers_sweep=(),
    probabilities=(),
    samples=16,
    seeds=(11,),
    brute_force_up_to=0,
    gcc={"lambda_dec": "spacing"},  # the linear rule: seconds (the adaptive one is checked in test_oracle_stragglers)
)


def _brute_force(scheme: str, n: int, s: int, seed: int) -> float:
    """Mean over groups of the largest MSE over the N - S + 1 blocks, written from scratch."""
    f, inputs = rates_study.workload(TINY, seed)
    code = rates_study.make_code(TINY, scheme, n)
    k = code.num_inputs
    groups = [inputs[i : i + k] for i in range(0, len(inputs), k)]
    worst = []
    for x in groups:
        with torch.no_grad():
            results, exact = f(code.encoder.matrix.to(x) @ x), f(x)
        errors = []
        for start in range(n - s + 1):
            arrived = [i for i in range(n) if not start <= i < start + s]
            if scheme == "natural":
                decoded = (
                    natural_spline_reference(code.beta.numpy()[arrived], code.alpha.numpy(), 0.0)
                    @ results[arrived].numpy()
                )
            else:
                mask = torch.zeros(1, n, dtype=torch.bool)
                mask[0, arrived] = True
                decoded = code.decoder(results.unsqueeze(0), mask)[0].numpy()
            errors.append(float(((decoded - exact.numpy()) ** 2).mean()))
        worst.append(max(errors))
    return float(np.mean(worst))


def test_the_written_worst_case_agrees_with_a_brute_force_over_blocks_to_one_percent():
    """For the spline codes (GCC and natural) the worst set is a block: the written MSE is the brute force's to 1%.
    For BACC non-contiguous sets can do a few % worse than every block, so only the inequality holds."""
    result = rates_study.run(TINY, progress=False)
    oracle = [r for r in result.records if r["adversary"] == "oracle"]
    assert len(oracle) == 3 * 2  # schemes x N
    for record in oracle:
        (written,) = record["mse_by_seed"]
        brute = _brute_force(record["scheme"], record["N"], record["S"], TINY.seeds[0])
        assert written >= brute * (1 - 1e-9)  # the oracle also tries non-contiguous sets
        if record["scheme"] != "bacc":
            assert written == pytest.approx(brute, rel=0.01), record
    assert result.config["exhaustive_limit"] == 200_000
    assert all(r["exact"] for r in oracle if math.comb(r["N"], r["S"]) <= 200_000)


def test_bacc_wins_lists_every_setting_of_either_sweep_where_bacc_is_below_gcc():
    """From records written by hand: the S = 16 setting of the S sweep counts as much as the N sweep's."""

    def record(scheme, n, s, mse, ci=0.01, adversary="oracle"):
        return {"scheme": scheme, "adversary": adversary, "N": n, "S": s, "mse": mse, "mse_ci": ci}

    data = {
        "records": [
            record("gcc", 32, 8, 0.5),
            record("bacc", 32, 8, 0.4),
            record("gcc", 64, 16, 0.554, 0.2),
            record("bacc", 64, 16, 0.33, 0.1),
            record("gcc", 64, 4, 0.01),
            record("bacc", 64, 4, 0.02),
            record("gcc", 64, 8, 0.5, adversary="widest_gap"),
            record("bacc", 64, 8, 0.1, adversary="widest_gap"),
        ]
    }
    wins = rates_study.bacc_wins(data)
    assert [(w["N"], w["S"], w["overlap"]) for w in wins] == [(32, 8, False), (64, 16, True)]
    table = rates_study.docs_table(data, table="bacc_wins")
    assert table.count("\n") == 3 and "| 64 | 16 |" in table
