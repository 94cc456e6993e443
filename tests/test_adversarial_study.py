"""``reproduce adversarial``: the seed's smoothing decoder under the oracle attack search, the slopes against
(6/5)(a - 1), and the numbers the docs cite, in the JSON."""

import math

import pytest

from torchgcc.app.experiments import EXPERIMENTS, adversarial_study
from torchgcc.oracles.attacks import FAMILIES

TINY = adversarial_study.Config(
    exponents=(0.5,),
    xsinx_workers=(64, 144),
    lenet_workers=(),
    lenet_case=None,
    shift_fractions=(1.0, 0.1, 0.01),
    max_starts=16,
    draws=2,
    schemes=tuple(s for s in adversarial_study.SCHEMES if s != "gcc"),  # the adaptive GCV decoder costs 20 s here
)


def test_the_seed_decoder_is_searched_and_every_cited_number_is_written():
    assert "adversarial" in EXPERIMENTS
    result = adversarial_study.run(TINY, progress=False)
    records = {(r["scheme"], r["N"]): r for r in result.records}
    assert {scheme for scheme, _ in records} == set(TINY.schemes) and "smoothing" in TINY.schemes
    for (scheme, n), record in records.items():
        assert record["q"] == round(n**0.5) and set(record["family_mse"]) == set(FAMILIES)
        assert record["mse"] == pytest.approx(max(record["family_mse"].values()))  # one group: the worst family
        assert record["theory"] == pytest.approx((record["q"] / n) ** 1.2)
        assert ("detection" in record) == (scheme in adversarial_study.LOCATING)
    smoothing = records["smoothing", 144]
    assert "detection" not in smoothing and len(smoothing["shift_mse"]) == 3
    slope = result.extra["slopes"]["xsinx a=0.5 smoothing"]
    expected = math.log(records["smoothing", 144]["mse"] / records["smoothing", 64]["mse"]) / math.log(144 / 64)
    assert slope["slope"] == pytest.approx(expected) and slope["theory"] == pytest.approx(-0.6)
    assert slope["q_over_n"] == pytest.approx(slope["slope"] / -0.5)
    for scheme in adversarial_study.LOCATING:  # their failure mode: a moderate shift passes unflagged
        record = records[scheme, 144]
        assert record["shift_detection"][0] == 1.0 and record["evading_shift"]["size"] < 100
    config = result.config
    assert config["torch_threads"] >= 1 and len(config["load_average"]) == 3 and config["wall_s"] > 0
