"""``torchgcc bench-latency``: step latency against accuracy of uncoded, replication and coded execution.

For every setting (N, K) and straggler probability p, one job of P local processes (spawned by
:func:`torchgcc.distributed.launch.launch`) runs every scheme on the same batches and the **same per-step worker
delays**, one after the other, on the same ranks. Worker delays are bimodal: ``fast`` seconds, or ``slow`` with
probability p (times a uniform jitter). The schemes, all at the same N:

- ``uncoded``: the batch split into N shares; waits for all N.
- ``replication``: each input on r = N / K workers; waits until every input has one copy (exact outputs).
- ``gcc``, ``natural`` (natural-spline GCC), ``bacc``: each at two S, ``(N - K) / 2`` and ``N - K``; decode from
  the fastest ``N - S``.

With ``--adaptive-wait`` a setting instead runs ``uncoded``, GCC at every S of ``--wait-stragglers`` and
``gcc:adaptive``, whose S a :class:`~torchgcc.control.wait_count.WaitCountController` chooses before every step
(deadline ``--wait-deadline``, budget ``--wait-budget``); ``--latency-model tail_change`` gives delays whose tail
changes mid-run. Each such setting also reports the steps over the deadline, the p99 after the change, the
distribution of the adaptive S, and the acceptance comparison with the most accurate fixed S meeting the deadline.

Reported per scheme: median and p99 step latency (measured on the coordinator, encoding and decoding included),
the p99 the delays alone imply ("model p99"), MSE and argmax agreement (RelAcc) with the uncoded model's outputs
as means with 95% CIs over steps. Writes ``results.json``, ``results.csv``, ``steps.jsonl`` and ``frontier.png``
(p99 latency against agreement and MSE), and with ``--adaptive-wait`` also ``adaptive_wait.png`` (the adaptive S
and step latency of every step beside the reference fixed S), into a fresh folder under
``./torchgcc-results/bench-latency/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Sequence

import torch

__all__ = ["register", "run"]

CODES = ("gcc", "natural", "bacc")


def register(subparsers: argparse._SubParsersAction, argv: Sequence[str] = ()) -> None:
    """Add the ``bench-latency`` subcommand (every value checked as it is parsed: a bad one exits 2 before any
    process starts)."""
    from torchgcc.app.options import comma_list, integer, number, seed

    positive = number(low=0, low_open=True)
    parser = subparsers.add_parser(
        "bench-latency",
        help="latency vs accuracy of uncoded, replication, GCC, natural-spline GCC and BACC on local processes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--nproc", type=integer(minimum=2), default=5, help="processes: 1 coordinator + P-1 worker ranks (>= 2)"
    )
    parser.add_argument("--settings", default="8x4,24x8", help="comma-separated NxK settings")
    parser.add_argument(
        "--straggle-probs",
        type=comma_list(number(low=0, high=1)),
        default="0.05,0.2",
        help="comma-separated straggler probabilities p",
    )
    parser.add_argument("--fast", type=positive, default=0.02, help="seconds of a fast worker")
    parser.add_argument("--slow", type=positive, default=0.3, help="seconds of a straggler")
    parser.add_argument("--steps", type=integer(minimum=1), default=200, help="steps per setting")
    parser.add_argument("--batch-size", type=integer(minimum=1), default=64, help="samples per step (tiny MLP task)")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--quick", action="store_true", help="20 steps per setting (a smoke run)")
    parser.add_argument("--timeout", type=positive, default=1800.0, help="seconds before a setting's job is killed")
    parser.add_argument(
        "--latency-model",
        default=None,
        help="latency model of the injected delays instead of the bimodal one (e.g. tail_change; "
        "--straggle-probs, --fast and --slow are then unused)",
    )
    parser.add_argument(
        "--latency-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="parameter of --latency-model, e.g. shift=0.1 scale=0.02 scale_after=0.05 change_at=150 (repeatable)",
    )
    parser.add_argument(
        "--adaptive-wait",
        action="store_true",
        help="run uncoded, GCC at every --wait-stragglers S and gcc:adaptive (S chosen per step)",
    )
    parser.add_argument("--wait-deadline", type=positive, default=None, help="seconds: the adaptive wait's deadline")
    parser.add_argument(
        "--wait-budget",
        type=number(low=0, high=1, high_open=True),
        default=0.01,
        help="allowed fraction of adaptive steps over --wait-deadline",
    )
    parser.add_argument(
        "--wait-warmup", type=integer(minimum=0), default=1, help="adaptive steps at S = N - K before adapting"
    )
    parser.add_argument(
        "--wait-max-step", type=integer(minimum=1), default=4, help="largest change of the adaptive S per step"
    )
    parser.add_argument(
        "--wait-discount",
        type=number(low=0, low_open=True, high=1),
        default=0.95,
        help="forgetting factor of the adaptive wait's tail-risk posterior (memory ~1/(1 - this) steps)",
    )
    parser.add_argument(
        "--wait-stragglers",
        type=comma_list(integer(minimum=0)),
        default=None,
        help="comma-separated fixed S of GCC beside the adaptive row (default 0, 2, ..., N - K)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: a fresh ./torchgcc-results/bench-latency/<time>/)",
    )
    parser.set_defaults(func=run)


def stragglers_of(num_workers: int, num_inputs: int) -> list[int]:
    """The two S each code runs at: half of and all of the ``N - K`` redundant workers."""
    return sorted({max((num_workers - num_inputs) // 2, 1), num_workers - num_inputs})


def wait_stragglers_of(args: argparse.Namespace, num_workers: int, num_inputs: int) -> list[int]:
    """The fixed S of GCC run beside ``gcc:adaptive``."""
    if args.wait_stragglers is None:
        return list(range(0, num_workers - num_inputs + 1, 2))
    return sorted(set(args.wait_stragglers))


def schemes_of(num_workers: int, num_inputs: int, adaptive_s: list[int] | None = None) -> list[str]:
    """The schemes of a setting; with ``adaptive_s`` (the fixed S beside it): uncoded, GCC at each, gcc:adaptive."""
    if adaptive_s is not None:
        return ["uncoded", *(f"gcc:S={s}" for s in adaptive_s), "gcc:adaptive"]
    return ["uncoded", "replication"] + [
        f"{code}:S={s}" for code in CODES for s in stragglers_of(num_workers, num_inputs)
    ]


def model_latency(delays: torch.Tensor, scheme: str, num_inputs: int, stragglers: int | None = None) -> float:
    """The step latency the delays ``(N,)`` alone imply for ``scheme``.

    uncoded: the slowest worker; replication: the slowest input's fastest copy; a code run with ``stragglers``
    S (default: parsed from its name ``name:S=s``): the ``(N - s)``-th fastest worker.
    """
    if scheme == "uncoded":
        return float(delays.max())
    if scheme == "replication":
        return float(delays.reshape(num_inputs, -1).min(-1).values.max())
    s = int(scheme.rpartition("=")[2]) if stragglers is None else stragglers
    return float(delays.sort().values[len(delays) - s - 1])


def _parse_settings(text: str) -> list[tuple[int, int]]:
    settings = []
    for item in text.split(","):
        n, sep, k = item.strip().partition("x")
        if not (sep and n.isdigit() and k.isdigit()) or int(n) % int(k):
            raise ValueError(f"--settings: {item!r} is not NxK with N a multiple of K (e.g. 8x4)")
        settings.append((int(n), int(k)))
    return settings


def _run_setting(args, num_workers: int, num_inputs: int, p: float, steps: int, progress) -> dict:
    """One job: every scheme on the same delays; returns the setting's records and summary."""
    from torchgcc.app.coded_job import summarize
    from torchgcc.distributed.launch import launch

    fixed_s = wait_stragglers_of(args, num_workers, num_inputs) if args.adaptive_wait else None
    schemes = schemes_of(num_workers, num_inputs, fixed_s)
    latency = args.latency_model or "bimodal"
    latency_params = (
        list(args.latency_param)
        if args.latency_model
        else [f"fast={args.fast}", f"slow={args.slow}", f"p_slow={p}", "jitter=0.5"]
    )
    job_args = [
        "--mode",
        "injected",
        "--code",
        ",".join(schemes),
        "--deadline",
        "0",
        "-N",
        str(num_workers),
        "-K",
        str(num_inputs),
        "-S",
        "0",
        "--steps",
        str(steps),
        "--latency",
        latency,
        "--batch-size",
        str(args.batch_size),
        "--seed",
        str(args.seed),
    ]
    if args.adaptive_wait:
        job_args += [
            "--wait-deadline",
            str(args.wait_deadline),
            "--wait-budget",
            str(args.wait_budget),
            "--wait-max-stragglers",
            str(max(fixed_s)),
            "--wait-warmup",
            str(args.wait_warmup),
            "--wait-max-step",
            str(args.wait_max_step),
            "--wait-discount",
            str(args.wait_discount),
        ]
    for param in latency_params:
        job_args += ["--latency-param", param]
    label = f"p={p}" if args.latency_model is None else latency
    task = progress.add_task(f"N={num_workers} K={num_inputs} {label}", total=steps * len(schemes))
    with tempfile.TemporaryDirectory(prefix="torchgcc-bench-") as folder:
        saved_path = Path(folder) / "steps.pt"
        job = launch(
            [*job_args, "--save", str(saved_path)],
            nproc=args.nproc,
            timeout_s=args.timeout,
            on_record=lambda record: progress.advance(task) if "step" in record else None,
        )
        if any(job.returncodes):
            raise RuntimeError(
                f"the N={num_workers} K={num_inputs} p={p} job failed with exit codes "
                f"{job.returncodes}:\n{job.stderr[-4000:]}"
            )
        saved = torch.load(saved_path, weights_only=False)["steps"]
    records = job.steps
    for record, step in zip(records, saved):
        record.update(
            N=num_workers,
            K=num_inputs,
            p=p,
            model_latency_s=model_latency(step["delays"], record["scheme"], num_inputs, stragglers=record.get("S")),
        )
    summary = summarize(records)
    for name, row in summary.items():
        model = torch.tensor([r["model_latency_s"] for r in records if r["scheme"] == name], dtype=torch.float64)
        row["model_p99_latency_s"] = float(model.quantile(0.99))
        row["p99_vs_uncoded"] = row["p99_latency_s"] / summary["uncoded"]["p99_latency_s"]
    delays = torch.stack([s["delays"] for s in saved[:: len(schemes)]])
    setting = {
        "N": num_workers,
        "K": num_inputs,
        "p": p,
        "S": fixed_s or stragglers_of(num_workers, num_inputs),
        "latency": latency,
        "latency_params": latency_params,
        "steps": steps,
        "straggler_fraction": float((delays > (args.fast + args.slow) / 2).double().mean())
        if args.latency_model is None
        else None,
        "schemes": summary,
        "records": records,
    }
    if args.adaptive_wait:
        setting["adaptive_wait"] = _adaptive_report(args, records, summary, job.of("summary")[0], fixed_s, steps)
    return setting


def _adaptive_report(
    args, records: list[dict], summary: dict, job_summary: dict, fixed_s: list[int], steps: int
) -> dict:
    """Steps over the deadline and p99 after the tail change per scheme (added to ``summary``), the adaptive S,
    and the comparison with the most accurate fixed S meeting the deadline."""
    from torchgcc.app.wait_count_verdict import compare_with_fixed

    change_at = dict(_key_values(args.latency_param)).get("change_at", steps // 2)
    for name, row in summary.items():
        latency = torch.tensor([r["latency_s"] for r in records if r["scheme"] == name], dtype=torch.float64)
        row["over_deadline"] = float((latency > args.wait_deadline).double().mean())
        row["p99_after_change_s"] = float(latency[int(change_at) :].quantile(0.99)) if change_at < steps else None
    fixed = [
        {"S": s, "p99": summary[f"gcc:S={s}"]["p99_latency_s"], "agreement": summary[f"gcc:S={s}"]["agreement"]}
        for s in fixed_s
    ]
    adaptive = summary["gcc:adaptive"]
    policy = job_summary["wait_policies"]["gcc:adaptive"]
    return {
        "deadline_s": args.wait_deadline,
        "budget": args.wait_budget,
        "change_at_step": change_at,
        "warmup": args.wait_warmup,
        "max_step": args.wait_max_step,
        "discount": args.wait_discount,
        "S_by_step": [r["S"] for r in records if r["scheme"] == "gcc:adaptive"],
        "stragglers_distribution": policy["stragglers_distribution"],
        "event_rate": policy["event_rate"],
        "detected_changes": policy["changes"],
        "verdict": compare_with_fixed(
            fixed, {"p99": adaptive["p99_latency_s"], "agreement": adaptive["agreement"]}, args.wait_deadline
        ),
    }


def _key_values(items: list[str]) -> list[tuple[str, object]]:
    from torchgcc.app.commands.distributed_job import parse_value

    return [(key, parse_value(value)) for key, _, value in (item.partition("=") for item in items)]


def _delays_label(setting: dict, prefix: str = "") -> str:
    """The straggler probability of a bimodal setting, else the latency model's name."""
    return setting["latency"] if setting["p"] is None else f"{prefix}{setting['p']:g}"


def _family(scheme: str) -> str:
    """The plot family of a scheme name: 'adaptive' for CODE:adaptive, else the code or baseline name."""
    return "adaptive" if scheme.endswith(":adaptive") else scheme.partition(":")[0]


def _table(results: list[dict]):
    from rich.table import Table

    table = Table(title="step latency and accuracy (same delays for every scheme of a setting)")
    for column in ("N", "K", "p", "scheme", "median s", "p99 s", "model p99 s", "MSE (95% CI)", "agreement (95% CI)"):
        table.add_column(column, justify="left" if column == "scheme" else "right")
    for setting in results:
        for name, row in setting["schemes"].items():
            table.add_row(
                str(setting["N"]),
                str(setting["K"]),
                _delays_label(setting),
                name,
                f"{row['median_latency_s']:.3f}",
                f"{row['p99_latency_s']:.3f}",
                f"{row['model_p99_latency_s']:.3f}",
                f"{row['mse']:.2e} ± {row['mse_ci']:.1e}",
                f"{row['agreement']:.3f} ± {row['agreement_ci']:.3f}",
            )
    return table


def plot_frontier(results: list[dict], path: Path) -> None:
    """One column per setting: p99 latency against agreement (top) and MSE (bottom), one marker per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(4.2 * len(results), 7), squeeze=False)
    styles = {
        "uncoded": ("k", "s"),
        "replication": ("tab:red", "D"),
        "gcc": ("tab:blue", "o"),
        "natural": ("tab:green", "^"),
        "bacc": ("tab:orange", "v"),
        "adaptive": ("tab:purple", "*"),
    }
    for column, setting in enumerate(results):
        top, bottom = axes[0, column], axes[1, column]
        for family, (colour, marker) in styles.items():
            rows = [(n, r) for n, r in setting["schemes"].items() if _family(n) == family]
            if not rows:
                continue
            x = [r["p99_latency_s"] for _, r in rows]
            top.errorbar(
                x,
                [r["agreement"] for _, r in rows],
                yerr=[r["agreement_ci"] for _, r in rows],
                color=colour,
                marker=marker,
                linestyle="-" if len(rows) > 1 else "none",
                label=family,
            )
            bottom.plot(
                x,
                [max(r["mse"], 1e-12) for _, r in rows],
                color=colour,
                marker=marker,
                linestyle="-" if len(rows) > 1 else "none",
                label=family,
            )
            for name, row in rows:
                if ":" in name:
                    top.annotate(
                        name.partition(":")[2],
                        (row["p99_latency_s"], row["agreement"]),
                        fontsize=7,
                        textcoords="offset points",
                        xytext=(3, 3),
                    )
        if "adaptive_wait" in setting:
            for ax in (top, bottom):
                ax.axvline(setting["adaptive_wait"]["deadline_s"], color="grey", ls="--", lw=1, label="wait deadline")
        top.set_title(f"N={setting['N']}, K={setting['K']}, {_delays_label(setting, prefix='p=')}")
        top.set_ylabel("agreement with uncoded (RelAcc)")
        bottom.set_yscale("log")
        bottom.set_ylabel("MSE vs uncoded (1e-12 = exact)")
        bottom.set_xlabel("p99 step latency (s)")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_adaptive_wait(results: list[dict], records: list[dict], path: Path) -> None:
    """One column per setting with an ``adaptive_wait`` report: the adaptive S of every step against the
    reference fixed S (top), and both schemes' step latencies against the deadline (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [setting for setting in results if "adaptive_wait" in setting]
    fig, axes = plt.subplots(2, len(shown), figsize=(6.5 * len(shown), 6), squeeze=False, sharex="col")
    for column, setting in enumerate(shown):
        report = setting["adaptive_wait"]
        reference = report["verdict"].get("reference_S")
        top, bottom = axes[0, column], axes[1, column]
        top.step(
            range(len(report["S_by_step"])), report["S_by_step"], where="post", color="tab:purple", label="adaptive S"
        )
        names = {"gcc:adaptive": ("tab:purple", "adaptive")}
        if reference is not None:
            top.axhline(reference, color="tab:blue", ls=":", label=f"reference fixed S = {reference}")
            names[f"gcc:S={reference}"] = ("tab:blue", f"fixed S = {reference}")
        for name, (colour, label) in names.items():
            latency = [
                r["latency_s"]
                for r in records
                if r["scheme"] == name and (r["N"], r["K"], r["p"]) == (setting["N"], setting["K"], setting["p"])
            ]
            bottom.plot(latency, color=colour, lw=0.8, label=label)
        bottom.axhline(report["deadline_s"], color="grey", ls="--", lw=1, label="deadline")
        for ax in (top, bottom):
            if report["change_at_step"] < len(report["S_by_step"]):
                ax.axvline(report["change_at_step"], color="tab:red", lw=0.8, alpha=0.6, label="tail change")
            ax.legend(fontsize=7)
        top.set_title(f"N={setting['N']}, K={setting['K']}, {_delays_label(setting, prefix='p=')}")
        top.set_ylabel("stragglers tolerated S")
        bottom.set_ylabel("step latency (s)")
        bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    """Run every setting, print the table and write the results; Ctrl-C / SIGTERM stop every process cleanly."""
    from rich.console import Console
    from rich.progress import Progress

    from torchgcc.app.cli import UsageError
    from torchgcc.app.coded_job import JobSettings
    from torchgcc.app.results import writing

    console = Console() if Console().is_terminal else Console(width=140)
    try:
        settings = _parse_settings(args.settings)
        probs = list(args.straggle_probs) if args.latency_model is None else [None]
        if args.adaptive_wait and args.wait_deadline is None:
            raise ValueError("--adaptive-wait needs --wait-deadline SECONDS (> 0)")
        if args.adaptive_wait and args.wait_stragglers is not None:
            for n, k in settings:
                if max(args.wait_stragglers) > n - k:
                    raise ValueError(f"--wait-stragglers must lie in [0, N - K] = [0, {n - k}] for {n}x{k}")
        if args.latency_model is not None:  # a bad name or parameter fails here, not in the job's processes
            from torchgcc.stragglers import LatencyStragglers

            try:
                LatencyStragglers(args.latency_model, seed=0, **dict(_key_values(args.latency_param)))
            except (TypeError, ValueError, OSError) as error:
                given = " ".join(f"--latency-param {item}" for item in args.latency_param)
                raise ValueError(f"--latency-model {args.latency_model} {given}: {error}".replace("  ", " ")) from None
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from None
    steps = 20 if args.quick else args.steps
    out = args.out or Path("torchgcc-results") / "bench-latency" / datetime.now().strftime("%Y%m%d-%H%M%S")
    previous = signal.signal(signal.SIGTERM, _terminate)
    load_before = os.getloadavg()
    results = []
    try:
        with Progress(console=console, transient=False) as progress:
            for num_workers, num_inputs in settings:
                for p in probs:
                    results.append(_run_setting(args, num_workers, num_inputs, p, steps, progress))
    except KeyboardInterrupt:
        console.print("interrupted: every job process was stopped; nothing written")
        return 130
    except (RuntimeError, TimeoutError) as error:
        console.print(f"error: {error}")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    console.print(_table(results))

    with writing(out):  # an interrupt while writing leaves the marker INCOMPLETE in out
        config = {  # lists as given (comma-separated), as the committed results hold them
            key: str(value)
            if isinstance(value, Path)
            else ",".join(map(str, value))
            if isinstance(value, tuple)
            else value
            for key, value in vars(args).items()
            if key != "func"
        }
        config.update(steps=steps, task="mlp", mode="injected", command="torchgcc bench-latency")
        config.update(
            load_average_before=list(load_before),
            load_average_after=list(os.getloadavg()),
            threads_per_process=JobSettings.threads,  # every rank of the job: the job's default --threads
        )
        records = [r for setting in results for r in setting.pop("records")]
        (out / "results.json").write_text(json.dumps({"config": config, "settings": results}, indent=2))
        with open(out / "results.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["N", "K", "p", "scheme", *next(iter(results[0]["schemes"].values())).keys()])
            for setting in results:
                for name, row in setting["schemes"].items():
                    writer.writerow([setting["N"], setting["K"], setting["p"], name, *row.values()])
        (out / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        plot_frontier(results, out / "frontier.png")
        plots = "frontier.png"
        if args.adaptive_wait:
            plot_adaptive_wait(results, records, out / "adaptive_wait.png")
            plots += ", adaptive_wait.png"
    console.print(f"wrote {out / 'results.json'} (and results.csv, steps.jsonl, {plots})")
    return 0
