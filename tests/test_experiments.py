"""Building blocks of the experiments: models, data, training cache, evaluation, results, tables, slopes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import torchgcc
from torchgcc import metrics
from torchgcc.app import model_cache
from torchgcc.app.cli import UsageError
from torchgcc.app.data import load_dataset
from torchgcc.app.evaluate import evaluate_coded, evaluate_sweep
from torchgcc.app.experiments import rates_study
from torchgcc.app.experiments.polynomial_study import QuadraticMap
from torchgcc.app.models import build_model
from torchgcc.app.options import parse_lambda
from torchgcc.app.results import read_results, write_results
from torchgcc.app.tables import WIDTH, make_console, markdown_table, pivot, publish_rows
from torchgcc.stragglers import FixedStragglers


@pytest.mark.parametrize("name", ["lenet5", "vit"])
@pytest.mark.parametrize("channels, size", [(1, 8), (1, 28), (3, 32)])
def test_models_map_images_to_logits(name, channels, size):
    model = build_model(name, in_channels=channels, image_size=size, num_classes=7)
    assert model(torch.randn(3, channels, size, size)).shape == (3, 7)


def test_unknown_model_and_dataset_are_rejected():
    with pytest.raises(ValueError, match="unknown model"):
        build_model("resnet", in_channels=1, image_size=8, num_classes=10)
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("imagenet")
    with pytest.raises(UsageError, match="--data mnist needs --data-dir"):
        load_dataset("mnist")
    with pytest.raises(UsageError, match="--data-dir /nope does not exist.*add --download"):
        load_dataset("mnist", data_dir="/nope")


def test_digits_split_is_standardised_disjoint_and_seeded():
    split = load_dataset("digits", seed=3)
    assert split.train_x.shape == (1438, 1, 8, 8) and split.test_x.shape == (359, 1, 8, 8)
    assert split.train_x.dtype == torch.float32 and split.num_classes == 10
    assert abs(split.train_x.mean().item()) < 1e-5 and abs(split.train_x.std().item() - 1) < 1e-3
    train_rows = {tuple(row.tolist()) for row in split.train_x.flatten(1)}
    test_rows = [tuple(row.tolist()) for row in split.test_x.flatten(1)]
    # digits holds a few exact duplicate images, so allow a handful of coincidences but not a shared split
    assert sum(row in train_rows for row in test_rows) < 10
    assert torch.equal(load_dataset("digits", seed=3).test_y, split.test_y)
    assert not torch.equal(load_dataset("digits", seed=4).test_y, split.test_y)


def _write_idx(path: Path, array: np.ndarray) -> None:
    """An MNIST idx file (big-endian header: magic 0x08 = uint8 with the number of dimensions, then the sizes)."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_reads_a_torchvision_folder_without_download(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", 12), ("t10k", 5)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (count, 28, 28)))
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(count) % 10)
    split = load_dataset("mnist", data_dir=tmp_path)
    assert split.train_x.shape == (12, 1, 28, 28) and split.test_x.shape == (5, 1, 28, 28)
    assert split.test_y.tolist() == [0, 1, 2, 3, 4] and split.num_classes == 10 and split.image_size == 28
    assert abs(split.train_x.mean().item()) < 1e-5 and abs(split.train_x.std().item() - 1) < 1e-3


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHGCC_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache.cache_dir() == tmp_path / "xdg" / "torchgcc"
    monkeypatch.setenv("TORCHGCC_CACHE", str(tmp_path / "own"))
    assert model_cache.cache_dir() == tmp_path / "own"
    monkeypatch.delenv("TORCHGCC_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert model_cache.cache_dir() == tmp_path / "home" / ".cache" / "torchgcc"


def test_load_or_train_caches_weights_per_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHGCC_CACHE", str(tmp_path))
    split = load_dataset("digits")
    config = model_cache.TrainConfig(epochs=2)
    first = model_cache.load_or_train("lenet5", split, seed=1, config=config, progress=False)
    assert not first.from_cache and first.path.parent == tmp_path and first.test_accuracy > 0.2  # chance is 0.1

    def fail(*args, **kwargs):
        raise AssertionError("must load from the cache")

    monkeypatch.setattr(model_cache, "train_classifier", fail)
    second = model_cache.load_or_train("lenet5", split, seed=1, config=config, progress=False)
    assert second.from_cache and second.path == first.path
    for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(AssertionError, match="cache"):  # another seed is another model: retrain
        model_cache.load_or_train("lenet5", split, seed=2, config=config, progress=False)


@pytest.fixture
def classifier():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 5), nn.Tanh(), nn.Linear(5, 4)).eval()


def test_evaluate_coded_matches_coded_module(classifier):
    inputs = torch.randn(21, 1, 4, 4)  # 21 = 5 groups of 4 + 1: exercises the padded last group
    code = torchgcc.make_code("bacc", num_inputs=4, num_workers=10)
    masks = FixedStragglers(num_stragglers=3, seed=0).sample(2 * 6, 10).view(2, 6, 10)
    stats = evaluate_coded(classifier, code, inputs, masks)

    with torch.no_grad():
        reference = classifier(inputs)
        coded = torchgcc.CodedModule(classifier, code)
        decoded = [coded(inputs, mask=mask) for mask in masks]
    assert stats["mse"] == pytest.approx(np.mean([metrics.mse(d, reference).item() for d in decoded]), rel=1e-6)
    agreement = torch.cat([d.argmax(-1) == reference.argmax(-1) for d in decoded]).double().mean().item()
    assert stats["agreement"] == pytest.approx(agreement)
    per_group = [metrics.mse(d[i : i + 4], reference[i : i + 4]).item() for d in decoded for i in range(0, 21, 4)]
    assert stats["groups"] == 12
    assert stats["mse_ci"] == pytest.approx(1.959963984540054 * np.std(per_group, ddof=1) / np.sqrt(12), rel=1e-6)


def test_evaluate_coded_is_exact_for_lcc_on_a_linear_map():
    torch.manual_seed(0)
    linear = nn.Linear(3, 2).double()
    inputs = torch.randn(10, 3, dtype=torch.float64)
    code = torchgcc.make_code("lcc", num_inputs=3, num_workers=8, degree=1)
    masks = FixedStragglers(num_stragglers=5, seed=1).sample(4 * 4, 8).view(4, 4, 8)  # 3 arrive = threshold
    stats = evaluate_coded(linear, code, inputs, masks, classification=False)
    assert stats["mse"] < 1e-20 and "agreement" not in stats


def test_evaluate_sweep_gives_every_code_the_same_masks(classifier):
    inputs = torch.randn(24, 1, 4, 4)
    codes = {
        "natural": torchgcc.make_code("natural", num_inputs=4, num_workers=12),
        "gcc": torchgcc.make_code("gcc", num_inputs=4, num_workers=12, lambda_enc=0.0, lambda_dec=0.0),
        "bacc": torchgcc.make_code("bacc", num_inputs=4, num_workers=12),
    }
    settings = [({"S": s}, FixedStragglers(num_stragglers=s, seed=s)) for s in (0, 5)]
    records = evaluate_sweep(classifier, inputs, codes=codes, settings=settings, repeats=3, progress=False)
    assert [(r["scheme"], r["S"]) for r in records] == [(c, s) for s in (0, 5) for c in codes]
    by = {(r["scheme"], r["S"]): r for r in records}
    for s in (0, 5):  # identical codes on identical masks give identical numbers
        assert by["natural", s]["mse"] == by["gcc", s]["mse"]
        assert by["natural", s]["agreement_ci"] == by["gcc", s]["agreement_ci"]
    assert by["gcc", 5]["mse"] > by["gcc", 0]["mse"]
    assert all(r["N"] == 12 and r["K"] == 4 and r["repeats"] == 3 for r in records)
    with pytest.raises(ValueError, match="share"):
        evaluate_sweep(
            classifier,
            inputs,
            codes={"a": codes["bacc"], "b": torchgcc.make_code("bacc", num_inputs=4, num_workers=9)},
            settings=settings,
            repeats=1,
            progress=False,
        )


def test_quadratic_map_has_degree_two():
    f = QuadraticMap(dim=3, seed=0)
    x, d = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    third_difference = f(x + 3 * d) - 3 * f(x + 2 * d) + 3 * f(x + d) - f(x)
    second_difference = f(x + 2 * d) - 2 * f(x + d) + f(x)
    assert third_difference.abs().max() < 1e-12 and second_difference.abs().min() > 1e-6


def test_fit_slopes_recovers_power_laws_per_seed():
    config = rates_study.Config(workers=(32, 64, 128), stragglers=(2,), stragglers_at=(), seeds=(0, 1))
    per_seed = {("gcc", "oracle", n, "S", 2): {0: 5.0 * n**-3.0, 1: 7.0 * n**-3.0} for n in (32, 64, 128)}
    per_seed |= {("gcc", "bernoulli", n, "p", 0.1): {0: 2.0 * n**-1.5, 1: n**-1.5} for n in (32, 64, 128)}
    slopes = rates_study.fit_slopes(per_seed, config)
    assert slopes["gcc oracle S=2 vs N"]["slope"] == pytest.approx(-3.0)
    assert slopes["gcc oracle S=2 vs N"]["ci"] == pytest.approx(0.0, abs=1e-9)
    assert slopes["gcc bernoulli p=0.1 vs N"]["by_seed"] == pytest.approx([-1.5, -1.5])
    bound = np.polyfit(np.log([32, 64, 128]), np.log([(np.log(n) / np.log(10)) ** 3 / n**3 for n in (32, 64, 128)]), 1)
    assert slopes["gcc bernoulli p=0.1 vs N"]["bound_slope"] == pytest.approx(bound[0])


def test_results_round_trip(tmp_path):
    records = [
        {"scheme": "gcc", "N": 8, "K": 4, "S": 1, "mse": torch.tensor(0.5), "mse_ci": float("nan")},
        {"scheme": "bacc", "N": 8, "K": 4, "S": 1, "mse": 0.75, "mse_ci": 0.1, "agreement": 0.9},
    ]
    paths = write_results(tmp_path, config={"seed": 3, "out": tmp_path}, records=records, slopes={"gcc": -3.0})
    data = read_results(tmp_path)
    assert data["config"] == {"seed": 3, "out": str(tmp_path)} and data["slopes"] == {"gcc": -3.0}
    assert data["records"][0]["mse"] == 0.5 and data["records"][0]["mse_ci"] is None
    lines = paths["csv"].read_text().splitlines()
    assert lines[0] == "scheme,N,K,S,mse,mse_ci,agreement" and lines[1] == "gcc,8,4,1,0.5,,"
    json.loads(paths["json"].read_text())  # strict JSON (no NaN)
    with pytest.raises(ValueError, match="lacks"):
        write_results(tmp_path, config={}, records=[{"scheme": "gcc", "N": 8, "S": 1}])
    with pytest.raises(ValueError, match="neither"):
        write_results(tmp_path, config={}, records=[{"scheme": "gcc", "N": 8, "K": 4, "mse": 1, "mse_ci": 0}])


def test_pivot_tables_put_settings_down_and_schemes_across():
    records = [
        {"scheme": s, "S": n, "mse": m, "mse_ci": 0.01, "agreement": 0.98, "agreement_ci": 0.004}
        for n, (s, m) in enumerate([("gcc", 0.5), ("bacc", 1.5)])
    ]
    header, rows = pivot(records, setting="S")
    assert header == ["S", "GCC MSE", "BACC MSE", "GCC agreement %", "BACC agreement %"]
    assert rows == [["0", "0.5 ± 0.01", "-", "98.0 ± 0.4", "-"], ["1", "-", "1.5 ± 0.01", "-", "98.0 ± 0.4"]]
    assert markdown_table(records, setting="S").splitlines()[1] == "|---:|---:|---:|---:|---:|"


def test_parse_lambda():
    assert parse_lambda("gcv") == "gcv" and parse_lambda("1e-3") == 1e-3 and parse_lambda("0") == 0.0
    for bad in ("-1", "abc", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_lambda(bad)


def test_tables_fit_the_console_without_cutting_cells(tmp_path, monkeypatch):
    import io

    from torchgcc.app.experiments import adaptive_wait_study

    monkeypatch.delenv("COLUMNS", raising=False)
    stream = io.StringIO()
    console = make_console(file=stream)
    assert console.width == WIDTH  # not a terminal: rich alone would use 80 columns
    data = json.loads((Path(__file__).resolve().parents[1] / "docs/results/adaptive-wait.json").read_text())
    publish_rows(
        tmp_path, config={}, records=data["records"], columns=adaptive_wait_study.COLUMNS, title="t", console=console
    )
    lines = stream.getvalue().splitlines()
    assert max(len(line) for line in lines) <= WIDTH and "…" not in stream.getvalue()
    rows = [line for line in lines if line.startswith("│") and line.split("│")[1].strip()]  # a row's first line
    assert [row.split("│")[1].strip() for row in rows] == [r["scheme"] for r in data["records"]]  # folded, not cut
    assert (tmp_path / "table.md").read_text() == "t\n\n" + adaptive_wait_study.docs_table(data)


def test_serve_bench_calibrates_the_default_on_its_calibration_groups_before_it_serves():
    """GCC's default chooses its smoothing from results; serve-bench calibrates it before the timed run on
    ``calibration_groups`` groups of training images (seeded), so the choice does not come from the first served
    batch (one or two groups); 0 leaves it to that batch, and codes that do not calibrate are left alone."""
    from dataclasses import replace

    from torchgcc.app.code_names import named_code
    from torchgcc.app.experiments import serving_study

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5)).eval()
    images = torch.randn(200, 6)
    config = replace(serving_study.DEFAULT, num_workers=8, num_inputs=4)

    def named(name):
        return named_code(name, num_inputs=4, num_workers=8, num_stragglers=0, timeout_s=60.0)

    ratios = []
    for _ in range(2):
        gcc = named("gcc:S=4")
        assert not gcc.code.decoder.calibrated
        serving_study.calibrate_before_serving(gcc, model, images, config, seed=5)
        assert gcc.code.decoder.calibrated and bool(torch.isfinite(gcc.code.decoder.ratio))
        ratios.append(gcc.code.decoder.ratio.item())
    assert ratios[0] == ratios[1]  # seeded
    untouched = named("gcc:S=4")
    serving_study.calibrate_before_serving(untouched, model, images, replace(config, calibration_groups=0), seed=5)
    assert not untouched.code.decoder.calibrated
    for other in ("natural:S=4", "bacc:S=2"):
        serving_study.calibrate_before_serving(named(other), model, images, config, seed=5)  # nothing to calibrate
    with pytest.raises(UsageError, match="--calibration-groups must be at least 0"):
        parser = argparse.ArgumentParser()
        serving_study.add_arguments(parser)
        parser.add_argument("--quick", action="store_true")
        parser.add_argument("--seed", type=int, default=0)
        serving_study.configure(parser.parse_args(["--calibration-groups", "-1"]))


def test_serve_bench_validates_its_calibration_on_the_images_uncoded_outputs():
    """With ``validate_calibration`` (the default) serve-bench's calibration equals the decoder's own calibration
    with the calibration images' uncoded outputs as ``reference``; without it, GCV's choice alone. The case is one
    where the two differ, so a calibration that dropped the reference would fail."""
    from dataclasses import replace

    from torchgcc.app.code_names import named_code
    from torchgcc.app.experiments import serving_study
    from torchgcc.stragglers import FixedStragglers

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5)).eval()
    images = torch.randn(200, 6)
    config = replace(serving_study.DEFAULT, num_workers=8, num_inputs=4)

    def calibrated(validate):
        named = named_code("gcc:S=2", num_inputs=4, num_workers=8, num_stragglers=0, timeout_s=60.0)
        serving_study.calibrate_before_serving(named, model, images, replace(config, validate_calibration=validate), 5)
        return named.code.decoder.ratio.item()

    picked = torch.randperm(200, generator=torch.Generator().manual_seed(5))[: config.calibration_groups * 4]
    groups = images[picked].reshape(-1, 4, 6)
    code = torchgcc.GCC(4, 8)
    with torch.no_grad():
        results, outputs = model(code.encoder(groups)), model(groups)
    masks = FixedStragglers(2, seed=5).sample(len(groups), 8)
    expected = code.decoder.calibrate(results, masks, reference=outputs).item()
    unvalidated = torchgcc.GCC(4, 8).decoder.calibrate(results, masks).item()
    assert expected != unvalidated
    assert calibrated(True) == expected
    assert calibrated(False) == unvalidated
