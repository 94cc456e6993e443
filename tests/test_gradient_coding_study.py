"""``torchgcc reproduce training`` end to end at tiny sizes: files, records, curves and their invariants."""

from __future__ import annotations

import json

import pytest
import torch

from torchgcc.app import cli


def _run(argv: list[str]) -> None:
    """Run the CLI and restore the torch thread count it sets."""
    threads = torch.get_num_threads()
    try:
        assert cli.main(argv) == 0
    finally:
        torch.set_num_threads(threads)


def _tiny(out, *extra: str) -> dict:
    argv = [
        "reproduce",
        "training",
        "--quick",
        "--steps",
        "10",
        "--eval-every",
        "5",
        "--stragglers",
        "1,2",
        "--schemes",
        "dgd,is-sgd,gc-fr,pgc-fr,pgc-cr,pgc-cr-ls",
        "--reference-models",
        "none",
        "--target-loss",
        "2.0",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]
    _run(argv)
    return json.loads((out / "results.json").read_text())


def test_reproduce_training_writes_consistent_results_on_both_clocks(tmp_path):
    """Without carry-over the old identities hold (GC = IS-SGD + s t_c per step; m = 2 doubles the delay part); with
    it no step is shorter and the schemes that drop stragglers pay for their late work; DGD (no stragglers) and FR's
    exact trajectory are the same on both clocks."""
    carried = _tiny(tmp_path / "carry")
    abandoned = _tiny(tmp_path / "abandon", "--no-carry-over")
    assert carried["config"]["carry_over"] and not abandoned["config"]["carry_over"]
    for payload in (carried, abandoned):
        assert {"results.json", "results.csv", "table.md", "training-mlp.png"} <= {
            p.name for p in (tmp_path / ("carry" if payload is carried else "abandon")).iterdir()
        }
    records = {
        name: {(r["scheme"], r["s"], r["m"]): r for r in payload["records"]}
        for name, payload in (("carry", carried), ("abandon", abandoned))
    }
    assert {(r["s"], r["m"], r["clock"]) for r in carried["records"]} == {
        (s, m, "measured") for s in (1, 2) for m in (1.0, 2.0)
    }
    t_c = abandoned["config"]["compute_times"]["mlp"]["measured"]
    by, carry = records["abandon"], records["carry"]
    for s in (1, 2):
        # one partition per worker per step for PGC after the warm-up, s + 1 for GC
        assert by[("pgc-fr", s, 1.0)]["load"] == 1 and by[("gc-fr", s, 1.0)]["load"] == s + 1
        assert by[("pgc-fr", s, 1.0)]["max_staleness"] == s and by[("gc-fr", s, 1.0)]["max_staleness"] == 0
        # the abandoning clock: IS-SGD and PGC wait for the same order statistic, GC adds s * t_c per step
        assert by[("gc-fr", s, 1.0)]["step_time"] == pytest.approx(by[("is-sgd", s, 1.0)]["step_time"] + s * t_c)
        delay_part = [by[("is-sgd", s, m)]["step_time"] - t_c for m in (1.0, 2.0)]
        assert delay_part[1] == pytest.approx(2 * delay_part[0])
        for scheme in ("is-sgd", "gc-fr", "pgc-fr", "pgc-cr"):
            assert carry[(scheme, s, 1.0)]["step_time"] > by[(scheme, s, 1.0)]["step_time"]
        for clock in (by, carry):  # FR is exact: DGD's trajectory (float32 sums in a different order)
            assert clock[("gc-fr", s, 1.0)]["final_loss"] == pytest.approx(
                clock[("dgd", s, 1.0)]["final_loss"], rel=1e-4
            )
    carry_t_c = carried["config"]["compute_times"]["mlp"]["measured"]  # measured in each run
    dgd_delays = carry[("dgd", 1, 1.0)]["step_time"] - carry_t_c, by[("dgd", 1, 1.0)]["step_time"] - t_c
    assert dgd_delays[0] == pytest.approx(dgd_delays[1])  # DGD waits for all: nothing carries over
    assert by[("dgd", 1, 1.0)]["step_time"] > by[("is-sgd", 1, 1.0)]["step_time"]
    curves = {(c["scheme"], c["s"], c["m"]): c for c in carried["curves"]}
    assert curves[("dgd", 0, 1.0)]["steps"] == [5, 10] and len(curves[("pgc-cr", 2, 2.0)]["train_loss"]) == 2
    for s in (1, 2):  # the decoders' partition weights (a^T B)_j against 1, from the arrived sets of the runs
        mu = 12 / ((12 - s) * (s + 1))  # the uniform decoder's weights are mu * (holders arrived), 1 <= that <= s + 1
        worst = max(abs(mu * c - 1) for c in range(1, s + 2))
        assert 0.1 < carry[("pgc-cr", s, 1.0)]["weight_error"] <= carry[("pgc-cr", s, 1.0)]["weight_error_max"] <= worst
        assert carry[("pgc-cr-ls", s, 1.0)]["weight_error_max"] < 1e-9
        assert carry[("gc-fr", s, 1.0)]["weight_error_max"] == carry[("pgc-fr", s, 1.0)]["weight_error_max"] == 0
    verdict = {(v["pgc"], v["rival"], v["s"], v["m"]) for v in carried["verdicts"]}
    assert ("pgc-fr", "gc-fr", 1, 1.0) in verdict and ("pgc-cr", "dgd", 2, 2.0) in verdict


def test_imagenet32_loader_reads_the_official_npz_layout(tmp_path):
    """Two tiny synthetic batches in the downsampled-ImageNet format: channel-major rows, labels 1..1000."""
    import numpy as np

    from torchgcc.app.cli import UsageError
    from torchgcc.app.data import load_dataset

    rng = np.random.default_rng(0)
    for name, count in (("train_data_batch_1.npz", 6), ("train_data_batch_2.npz", 4), ("val_data.npz", 3)):
        np.savez(
            tmp_path / name,
            data=rng.integers(0, 256, (count, 3072), dtype=np.uint8),
            labels=rng.integers(1, 1001, count),
        )
    split = load_dataset("imagenet32", data_dir=tmp_path)
    assert split.train_x.shape == (10, 3, 32, 32) and split.test_x.shape == (3, 3, 32, 32)
    assert split.num_classes == 1000 and 0 <= int(split.train_y.min()) and int(split.train_y.max()) < 1000
    raw = np.load(tmp_path / "train_data_batch_1.npz")
    assert int(split.train_y[0]) == int(raw["labels"][0]) - 1
    # channel-major: the standardised first pixel of channel 1 comes from column 1024 of the raw row
    column = (
        np.concatenate(
            [np.load(tmp_path / f)["data"][:, 1024] for f in ("train_data_batch_1.npz", "train_data_batch_2.npz")]
        ).astype(np.float64)
        / 255
    )
    assert torch.corrcoef(torch.stack([split.train_x[:, 1, 0, 0].double(), torch.from_numpy(column)]))[0, 1] > 0.99
    with pytest.raises(UsageError, match="needs --data-dir"):  # a command-line mistake: one line, exit status 2
        load_dataset("imagenet32")


def test_reproduce_training_adaptive_wait_rows(tmp_path):
    """``is-sgd:adaptive`` beside ``is-sgd``: S in 0..s chosen per step, the same choices on every clock."""
    out = tmp_path / "training"
    argv = [
        "reproduce",
        "training",
        "--quick",
        "--steps",
        "24",
        "--eval-every",
        "8",
        "--stragglers",
        "2",
        "--schemes",
        "is-sgd,is-sgd:adaptive",
        "--reference-models",
        "none",
        "--wait-deadline",
        "3",
        "--wait-budget",
        "0.2",
        "--out",
        str(out),
        "--no-progress",
    ]
    _run(argv)
    payload = json.loads((out / "results.json").read_text())
    by = {(r["scheme"], r["m"]): r for r in payload["records"]}
    run = next(r for r in payload["runs"] if r["scheme"] == "is-sgd:adaptive")
    chosen = run["S_by_step"]
    assert (
        len(chosen) == 24 and set(chosen) <= {0, 1, 2} and chosen[:10] == [2] * 10 and min(chosen) < 2
    )  # warm-up at the fallback, then more
    assert run["wait_policy"]["controller"]["steps"] == 24
    assert run["mean_S"] == pytest.approx(sum(chosen) / 24)
    t_c = payload["config"]["compute_times"]["mlp"]["measured"]
    for m in (1.0, 2.0):  # waiting for n - S >= n - s workers of the same delays is never faster
        assert by[("is-sgd:adaptive", m)]["step_time"] >= by[("is-sgd", m)]["step_time"] - 1e-12
    delay_part = [by[("is-sgd:adaptive", m)]["step_time"] - t_c for m in (1.0, 2.0)]
    assert delay_part[1] == pytest.approx(2 * delay_part[0])  # the choices do not depend on the clock
