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
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchgcc") and "error:" in lines[0], lines


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


BIG = "99999999999999999999999"  # beyond torch's seed range


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["reproduce", "training", "--wait-budget", "2"], "--wait-budget"),
        (["reproduce", "training", "--wait-deadline", "0"], "--wait-deadline"),
        (["reproduce", "training", "--eval-every", "0"], "--eval-every"),
        (["reproduce", "training", "--seeds", "0"], "--seeds"),
        (["reproduce", "training", "--steps", "0"], "--steps"),
        (["reproduce", "training", "--batch-size", "0"], "--batch-size"),
        (["reproduce", "training", "--mean-delays", "0"], "--mean-delays"),
        (["reproduce", "training", "--mean-delays", "1,-1"], "--mean-delays"),
        (["reproduce", "training", "--stragglers", ","], "--stragglers"),
        (["reproduce", "training", "--stragglers", "12", "--schemes", "is-sgd"], "--stragglers 12"),
        (["reproduce", "training", "--stragglers", "1,4", "--schemes", "is-sgd,gc-fr"], "--stragglers 4"),
        (["reproduce", "training", "--models", "foo"], "--models"),
        (["reproduce", "training", "--reference-models", "foo"], "--reference-models"),
        (["reproduce", "training", "--lr", "-1"], "--lr"),
        (["reproduce", "training", "--target-loss", "nan"], "--target-loss"),
        (["reproduce", "training", "--seed", BIG], "--seed"),
        (["demo", "--lambda-enc", "inf"], "--lambda-enc"),
        (["demo", "--lambda-dec", "1e400"], "--lambda-dec"),
        (["profile", "--lambda-enc", "inf"], "--lambda-enc"),
        (["reproduce", "polynomial", "--lambda-dec", "inf"], "--lambda-dec"),
        (["reproduce", "stragglers", "--stragglers", ","], "--stragglers"),
        (["reproduce", "adaptive-wait", "--seed", BIG], "--seed"),
        (["reproduce", "rates", "--seed", "1.5"], "--seed"),
        (["bench-latency", "--nproc", "0"], "--nproc"),
        (["bench-latency", "--nproc", "1"], "--nproc"),
        (["bench-latency", "--straggle-probs", "2"], "--straggle-probs"),
        (["bench-latency", "--steps", "0"], "--steps"),
        (["bench-latency", "--adaptive-wait", "--wait-deadline", "1", "--wait-budget", "2"], "--wait-budget"),
        (["bench-latency", "--latency-model", "tail_change", "--latency-param", "shift=-1"], "--latency-param"),
    ],
)
def test_a_bad_option_is_one_error_line_naming_it_and_exit_2_before_any_work(
    argv, option, tmp_path, monkeypatch, capsys
):
    """Each of these used to end in a traceback with exit status 1, several only after training or after the
    job's processes had started (audit findings 3, 4 and 10). Now: one error line naming the option (argparse's,
    without its usage block, or torchgcc's, for a combination of options), exit status 2, nothing run, no folder
    made."""
    import time

    from torchgcc.app.commands import demo, profile, reproduce

    def no_work(*args, **kwargs):
        raise AssertionError("work started")

    for module, name in ((reproduce, "run_and_report"), (demo, "run_and_report"), (profile, "profile_coded_inference")):
        monkeypatch.setattr(module, name, no_work)
    monkeypatch.setattr("torchgcc.distributed.launch.launch", no_work)
    out = tmp_path / "out"
    started = time.perf_counter()
    try:
        code = cli.main([*argv, "--quick", "--out", str(out)])
    except SystemExit as exit_info:  # argparse's errors
        code = exit_info.code
    assert code == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and option in lines[0], lines
    assert "Traceback" not in err
    assert not out.exists() and time.perf_counter() - started < 30


def test_ctrl_c_ends_in_one_line_and_exit_130_without_a_traceback(tmp_path):
    """SIGINT used to print KeyboardInterrupt's traceback (audit finding 5). Sent once the training has started
    (its progress bar is on stderr), it stops the run before anything is written."""
    import os
    import signal
    import time

    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "torchgcc", "reproduce", "training", "--quick", "--threads", "1", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        # a shell that starts pytest in the background ignores SIGINT, and children inherit that: restore Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        seen, deadline = b"", time.monotonic() + 120
        while b"training runs" not in seen and time.monotonic() < deadline:
            chunk = os.read(process.stderr.fileno(), 4096)  # the bar redraws with \r: read bytes, not lines
            if not chunk:
                break
            seen += chunk
        assert b"training runs" in seen, seen.decode(errors="replace")
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    err = (seen + rest).decode(errors="replace")
    assert process.returncode == 130
    assert "Traceback" not in err and err.rstrip().splitlines()[-1] == "torchgcc: interrupted"
    assert not out.exists()


def test_an_interrupt_while_writing_leaves_the_folder_marked_incomplete(tmp_path, monkeypatch, capsys):
    """An interrupt between results.json and the plot used to leave a folder that looked complete."""
    from torchgcc.app.experiments import straggler_study
    from torchgcc.app.results import INCOMPLETE, ExperimentResult, write_results

    def report(result, out, *, console):
        write_results(out, config={}, records=[], required=())
        raise KeyboardInterrupt  # Ctrl-C before the plot

    monkeypatch.setattr(straggler_study, "run", lambda config, progress: ExperimentResult([], {}))
    monkeypatch.setattr(straggler_study, "report", report)
    out = tmp_path / "out"
    assert cli.main(["demo", "--quick", "--no-progress", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip() == "torchgcc: interrupted"
    assert sorted(path.name for path in out.iterdir()) == [INCOMPLETE, "results.csv", "results.json"]
    assert "interrupted" in (out / INCOMPLETE).read_text()


def test_a_finished_run_leaves_no_incomplete_marker(tmp_path):
    from torchgcc.app.results import INCOMPLETE, writing

    with writing(tmp_path / "out") as out:
        assert (out / INCOMPLETE).exists()
    assert not (out / INCOMPLETE).exists() and out.is_dir()
