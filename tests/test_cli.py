"""``torchgcc demo`` and ``torchgcc reproduce ...`` end to end through ``torchgcc.app.cli.main`` (``--quick`` sizes),
and what the command line promises: a fast ``--help`` that imports no torch, ``--version``, one-line user errors, a
core that imports no optional dependency."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from torchgcc.app import cli, model_cache
from torchgcc.app.experiments import polynomial_study, straggler_study
from torchgcc.app.results import read_results

SCHEMA = ("scheme", "N", "K", "mse", "mse_ci")


@pytest.fixture(autouse=True)
def private_cache(monkeypatch, tmp_path):
    """A private model cache (tests/conftest.py restores torch's threads, which the commands set)."""
    monkeypatch.setenv("TORCHGCC_CACHE", str(tmp_path / "cache"))


def run(*argv: str, out: str | None = None) -> dict:
    """Run the command and read its results from ``--out`` (or from ``out``, the folder it was expected to pick)."""
    out = out or argv[argv.index("--out") + 1]
    assert cli.main([*argv, "--no-progress"]) == 0
    return read_results(out)


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def check_records(results: dict, *, schemes: set[str], classification: bool) -> None:
    records = results["records"]
    assert records and {r["scheme"] for r in records} == schemes
    for record in records:
        assert all(key in record for key in SCHEMA) and ("S" in record or "p" in record)
        assert math.isfinite(record["mse"]) and record["mse"] >= 0 and math.isfinite(record["mse_ci"])
    with_agreement = [r for r in records if "agreement" in r]
    assert len(with_agreement) == (len(records) if classification else 0)  # every record of a classifier, no other
    assert all(0 <= r["agreement"] <= 1 and math.isfinite(r["agreement_ci"]) for r in with_agreement)


def check_outputs(folder, plot: str, table: str) -> None:
    """What a command wrote says what its results.json says: ``table.md`` is the table of its records (``table``,
    after the title line), ``results.csv`` has one row per record with the same values, and the plot is an image
    with something drawn on it."""
    import csv

    import matplotlib.image

    results = read_results(folder)
    title, body = (folder / "table.md").read_text().split("\n\n", 1)
    assert title and body == table
    with (folder / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(results["records"])
    for row, record in zip(rows, results["records"]):
        assert row["scheme"] == record["scheme"] and float(row["mse"]) == pytest.approx(record["mse"], rel=1e-12)
        assert all(row[key] == "" if value is None else row[key] != "" for key, value in record.items())
    image = matplotlib.image.imread(folder / plot)
    assert image.ndim == 3 and min(image.shape[:2]) > 200 and image.std() > 0.01  # not a blank canvas


def test_demo_quick_writes_results_and_reuses_the_cached_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default output folder is a fresh one under ./torchgcc-results/demo
    assert cli.main(["demo", "--quick", "--no-progress"]) == 0
    (folder,) = (tmp_path / "torchgcc-results" / "demo").iterdir()
    results = read_results(folder)
    assert f"wrote {folder.relative_to(tmp_path)}/" in capsys.readouterr().out
    check_outputs(folder, "stragglers.png", straggler_study.docs_table(results))
    check_records(results, schemes={"gcc", "natural", "bacc"}, classification=True)
    config = results["config"]
    assert config["seed"] == 0 and not config["model_from_cache"] and config["test_accuracy"] > 0.9
    assert sorted({r["S"] for r in results["records"]}) == [0, 8, 16]
    by = {(r["scheme"], r["S"]): r for r in results["records"]}
    assert by["gcc", 16]["mse"] > by["gcc", 0]["mse"]  # more stragglers, larger error
    assert "agreement" in (tmp_path / "torchgcc-results" / "demo" / folder.name / "table.md").read_text()

    def fail(*args, **kwargs):
        raise AssertionError("the second run must load the cached model")

    monkeypatch.setattr(model_cache, "train_classifier", fail)
    again = run("demo", "--quick", "--out", str(tmp_path / "again"))
    assert again["config"]["model_from_cache"] and again["config"]["model_cache"] == config["model_cache"]
    assert again["records"] == results["records"]  # same seed, same model, same masks


@pytest.mark.parametrize("model", ["lenet5", "vit"])
def test_reproduce_stragglers_quick(tmp_path, monkeypatch, model):
    fast = model_cache.TrainConfig(epochs=1)  # the full training is not what is under test here
    monkeypatch.setattr(model_cache, "default_train_config", lambda name: fast)
    results = run(
        "reproduce",
        "stragglers",
        "--quick",
        "--model",
        model,
        "--seed",
        "1",
        "--lambda-dec",
        "1e-6",
        "--stragglers",
        "0,5",
        "--out",
        str(tmp_path),
    )
    check_outputs(tmp_path, "stragglers.png", straggler_study.docs_table(results))
    check_records(results, schemes={"gcc", "natural", "bacc"}, classification=True)
    config = results["config"]
    assert config["model"] == model and config["seed"] == 1 and config["straggler_counts"] == [0, 5]
    assert sorted({r["S"] for r in results["records"]}) == [0, 5]
    assert config["gcc"] == {"lambda_dec": 1e-6} and config["gcc_lambda_dec"] == 1e-6


def test_reproduce_polynomial_quick_lcc_exact_then_unstable(tmp_path):
    results = run("reproduce", "polynomial", "--quick", "--out", str(tmp_path))
    check_outputs(tmp_path, "polynomial.png", polynomial_study.docs_table(results))
    check_records(results, schemes={"gcc", "lcc"}, classification=False)
    limit = results["config"]["threshold_stragglers"]
    by = {(r["scheme"], r["S"]): r["mse"] for r in results["records"]}
    stragglers = sorted({s for _, s in by})
    assert limit in stragglers and max(stragglers) > limit
    assert all(by["lcc", s] < 1e-10 for s in stragglers if s <= limit)
    assert all(by["gcc", s] < by["lcc", s] for s in stragglers if s > limit)


def test_reproduce_rates_quick_reports_slopes_under_the_oracle(tmp_path):
    results = run("reproduce", "rates", "--quick", "--out", str(tmp_path))
    assert (tmp_path / "rates.png").stat().st_size > 0
    check_records(results, schemes={"gcc", "natural", "bacc"}, classification=False)
    config, slopes = results["config"], results["slopes"]
    assert {"gcc oracle S=2 vs N", "bacc oracle S=4 vs N", "gcc oracle N=32 vs S", "gcc bernoulli p=0.1 vs N"} <= set(
        slopes
    )
    assert all(math.isfinite(slope["slope"]) for slope in slopes.values())
    by = {(r["scheme"], r["adversary"], r["N"], r.get("S")): r for r in results["records"]}
    widest = {key: record for key, record in by.items() if key[1] == "widest_gap"}
    assert widest  # the rule's block is one of the blocks the oracle tries: the oracle is never below it
    for (scheme, _, n, s), record in widest.items():
        oracle = by[scheme, "oracle", n, s]
        assert all(o >= w for o, w in zip(oracle["mse_by_seed"], record["mse_by_seed"]))
    assert results["brute_force"]["largest_relative_difference"] < 1e-9
    assert config["seeds"] == [0, 1] and config["torch_threads"] >= 1 and len(config["load_average"]) == 3


@pytest.mark.parametrize(
    "argv", [["demo"], ["reproduce"], ["reproduce", "stragglers"], ["reproduce", "polynomial"], ["reproduce", "rates"]]
)
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "--quick" in capsys.readouterr().out or argv == ["reproduce"]


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--lambda-dec", "-1"],
        ["demo", "--lambda-enc", "gcv"],
        ["reproduce", "stragglers", "--model", "resnet"],
        ["reproduce"],
    ],
)
def test_bad_arguments_exit_with_usage(argv):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reproduce", "stragglers", "--stragglers", "0,31"], "--stragglers must lie in [0, 30]"),
        (["reproduce", "stragglers", "--data", "mnist"], "--data mnist needs --data-dir DIR"),
        (["reproduce", "stragglers", "--data", "cifar10", "--data-dir", "/nope"], "add --download to let"),
        (["reproduce", "stragglers", "--data", "cifar10", "--data-dir", "{empty}"], "holds no intact copy of cifar10"),
        (["demo", "--threads", "0"], "--threads must be at least 1"),
        (["serve-bench", "--quick", "--latency-param", "p_slow=abc"], "p_slow must be a finite number in [0, 1]"),
    ],
)
def test_user_errors_are_one_line_before_any_work(argv, message, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv = [arg.format(empty=tmp_path / "empty") for arg in argv]
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"torchgcc: error: {err.split('error: ', 1)[1]}" and message in err and err.count("\n") == 1
    assert [path.name for path in tmp_path.iterdir()] == ["empty"] and not any((tmp_path / "empty").iterdir())


@pytest.mark.parametrize("command", [["demo", "--quick"], ["profile", "--quick"], ["reproduce", "rates", "--quick"]])
def test_an_output_path_that_cannot_be_a_folder_stops_the_run_before_it_starts(command, tmp_path, capsys):
    """--out naming an existing file used to let the whole run finish, then fail writing (26 lines, nothing saved)."""
    (tmp_path / "f").write_text("mine")
    for out, message in ((tmp_path / "f", "is an existing file"), (tmp_path / "f" / "sub", "is a file, not a folder")):
        assert cli.main([*command, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("torchgcc: error: --out ") and message in err and err.count("\n") == 1
    assert (tmp_path / "f").read_text() == "mine"


def test_version(capsys):
    import torchgcc

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out == f"torchgcc {torchgcc.__version__}\n"


def test_reproduce_help_lists_every_experiment_once(capsys):
    from torchgcc.app.experiments import EXPERIMENTS

    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--help"])
    listed = [
        line.split()[0] for line in capsys.readouterr().out.splitlines() if line[:5].strip() and line[:4] == "    "
    ]
    assert [name for name in listed if name in EXPERIMENTS] == list(EXPERIMENTS)


def test_help_imports_neither_torch_nor_optional_dependencies():
    done = python(
        "import sys; from torchgcc.app import cli\n"
        "try: cli.main(['--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'numpy', 'rich', 'tqdm'}))"
    )
    assert done.returncode == 0, done.stderr
    assert "demo" in done.stdout and done.stdout.strip().endswith("[]")


def test_core_works_and_imports_nothing_optional_when_no_extra_is_installed():
    """Every optional dependency made unimportable, as after ``pip install torchgcc`` without extras."""
    from torchgcc.optional import EXTRAS

    done = python(
        f"import sys\nfor name in {sorted(EXTRAS)}: sys.modules[name] = None\n"
        "import torch, torchgcc\n"
        "for name in torchgcc.__all__: getattr(torchgcc, name)\n"  # every public name and subpackage
        "import torchgcc.codes, torchgcc.functional, torchgcc.stragglers, torchgcc.coded_module\n"
        "import torchgcc.points, torchgcc.metrics, torchgcc.registry, torchgcc.testing, torchgcc.timing\n"
        "import torchgcc.gradient_coding.distributed_training, torchgcc.distributed.process_group, torchgcc.workers\n"
        "import torchgcc.distributed.launch, torchgcc.serving\n"
        "from torchgcc.metrics import CodedMetrics, argmax_agreement, mse\n"
        "code = torchgcc.make_code('bacc', num_inputs=4, num_workers=12)\n"
        "y = torchgcc.CodedModule(torch.nn.Linear(3, 2), torchgcc.GCC(4, 12))(torch.randn(8, 3))\n"
        "assert y.shape == (8, 2)\n"
        "try:\n    torchgcc.metrics.ArgmaxAgreement\nexcept ImportError as error:\n    print(error)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(EXTRAS)} and sys.modules[m]))"
    )
    assert done.returncode == 0, done.stderr
    message, loaded = done.stdout.strip().splitlines()
    assert loaded == "[]" and "'experiments' extra" in message


def test_a_missing_extra_is_named_in_one_line():
    done = python(
        "import sys; sys.modules['matplotlib'] = None\n"
        "from torchgcc.app import cli; sys.exit(cli.main(['demo', '--quick']))"
    )
    assert done.returncode == 2
    assert done.stderr == (
        "torchgcc: error: matplotlib is not installed; it comes with the 'experiments' extra: "
        "pip install 'torchgcc[experiments]' (or pip install -e '.[experiments]' in a checkout)\n"
    )


def test_an_unknown_executor_task_suggests_close_timm_names():
    from torchgcc.app.workloads import timm_workload

    with pytest.raises(ValueError, match=r"unknown task 'resnet19': .*; did you mean resnet18"):
        timm_workload("resnet19")
    with pytest.raises(ValueError, match=r"unknown task 'xyzzy': .*; see timm.list_models\(\)$"):
        timm_workload("xyzzy")
