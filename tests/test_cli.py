"""``torchgcc demo`` and ``torchgcc reproduce ...`` end to end through ``torchgcc.cli.main`` (``--quick`` sizes)."""

from __future__ import annotations

import math

import pytest
import torch

from torchgcc import cli
from torchgcc.experiments import training
from torchgcc.experiments.results import read_results

SCHEMA = ("scheme", "N", "K", "mse", "mse_ci")


@pytest.fixture(autouse=True)
def experiments_only(monkeypatch, tmp_path):
    """Only the experiment subcommands (other modules test their own), and a private model cache."""
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", ("torchgcc.experiments.demo", "torchgcc.experiments.reproduce"))
    monkeypatch.setenv("TORCHGCC_CACHE", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the commands set --threads for the whole process


def run(*argv: str) -> dict:
    out = argv[argv.index("--out") + 1]
    assert cli.main([*argv, "--no-progress"]) == 0
    return read_results(out)


def check_records(results: dict, *, schemes: set[str], classification: bool) -> None:
    records = results["records"]
    assert records and {r["scheme"] for r in records} == schemes
    for record in records:
        assert all(key in record for key in SCHEMA) and ("S" in record or "p" in record)
        assert math.isfinite(record["mse"]) and record["mse"] >= 0 and math.isfinite(record["mse_ci"])
        if classification:
            assert 0 <= record["agreement"] <= 1 and math.isfinite(record["agreement_ci"])


def test_demo_quick_writes_results_and_reuses_the_cached_model(tmp_path, monkeypatch, capsys):
    results = run("demo", "--quick", "--out", str(tmp_path / "demo"))
    for name in ("results.json", "results.csv", "table.md", "stragglers.png"):
        assert (tmp_path / "demo" / name).stat().st_size > 0
    check_records(results, schemes={"gcc", "natural", "bacc"}, classification=True)
    config = results["config"]
    assert config["seed"] == 0 and not config["model_from_cache"] and config["test_accuracy"] > 0.9
    assert sorted({r["S"] for r in results["records"]}) == [0, 8, 16]
    by = {(r["scheme"], r["S"]): r for r in results["records"]}
    assert by["gcc", 16]["mse"] > by["gcc", 0]["mse"]  # more stragglers, larger error
    assert "agreement" in capsys.readouterr().out

    def fail(*args, **kwargs):
        raise AssertionError("the second run must load the cached model")

    monkeypatch.setattr(training, "train_classifier", fail)
    again = run("demo", "--quick", "--out", str(tmp_path / "again"))
    assert again["config"]["model_from_cache"] and again["config"]["model_cache"] == config["model_cache"]
    assert again["records"] == results["records"]  # same seed, same model, same masks


@pytest.mark.parametrize("model", ["lenet5", "vit"])
def test_reproduce_stragglers_quick(tmp_path, monkeypatch, model):
    fast = training.TrainConfig(epochs=1)  # the full training is not what is under test here
    monkeypatch.setattr(training, "default_train_config", lambda name: fast)
    results = run("reproduce", "stragglers", "--quick", "--model", model, "--seed", "1", "--lambda-dec", "1e-6",
                  "--stragglers", "0,5", "--out", str(tmp_path))
    assert (tmp_path / "stragglers.png").stat().st_size > 0
    check_records(results, schemes={"gcc", "natural", "bacc"}, classification=True)
    config = results["config"]
    assert config["model"] == model and config["seed"] == 1 and config["stragglers"] == [0, 5]
    assert sorted({r["S"] for r in results["records"]}) == [0, 5]
    assert config["gcc"] == {"lambda_dec": 1e-6} and config["gcc_lambda_dec"] == 1e-6


def test_reproduce_polynomial_quick_lcc_exact_then_unstable(tmp_path):
    results = run("reproduce", "polynomial", "--quick", "--out", str(tmp_path))
    assert (tmp_path / "polynomial.png").stat().st_size > 0
    check_records(results, schemes={"gcc", "lcc"}, classification=False)
    limit = results["config"]["threshold_stragglers"]
    by = {(r["scheme"], r["S"]): r["mse"] for r in results["records"]}
    stragglers = sorted({s for _, s in by})
    assert limit in stragglers and max(stragglers) > limit
    assert all(by["lcc", s] < 1e-10 for s in stragglers if s <= limit)
    assert all(by["gcc", s] < by["lcc", s] for s in stragglers if s > limit)


def test_reproduce_rates_quick_reports_slopes(tmp_path):
    results = run("reproduce", "rates", "--quick", "--out", str(tmp_path))
    assert (tmp_path / "rates.png").stat().st_size > 0
    check_records(results, schemes={"gcc", "bacc"}, classification=False)
    slopes = results["slopes"]
    assert set(slopes) == {"gcc", "bacc"} | {f"gcc_p{p:g}" for p in results["config"]["probabilities"]}
    assert slopes["gcc"] <= -2.5 and slopes["bacc"] > slopes["gcc"]


@pytest.mark.parametrize("argv", [["demo"], ["reproduce"], ["reproduce", "stragglers"], ["reproduce", "polynomial"],
                                  ["reproduce", "rates"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "--quick" in capsys.readouterr().out or argv == ["reproduce"]


@pytest.mark.parametrize("argv", [["demo", "--lambda-dec", "-1"], ["demo", "--lambda-enc", "gcv"],
                                  ["reproduce", "stragglers", "--model", "resnet"], ["reproduce"]])
def test_bad_arguments_exit_with_usage(argv):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2


def test_stragglers_sweep_is_validated_before_any_work(tmp_path):
    with pytest.raises(SystemExit, match="must lie in"):
        cli.main(["reproduce", "stragglers", "--stragglers", "0,31", "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
