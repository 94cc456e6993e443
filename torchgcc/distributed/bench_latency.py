"""``torchgcc bench-latency``: step latency of uncoded vs coded execution under one injected latency model.

One job (P local processes, spawned by :func:`torchgcc.distributed.launch.launch`) runs every scheme on the same
batches and the same per-step worker delays, one after the other, on the same ranks: uncoded waits for all N
workers, the coded schemes decode from the fastest N - S. Reported per scheme: median and p99 step latency (as
measured on the coordinator, encoding and decoding included), the p99 the latency model alone predicts
(``max`` of the delays for uncoded, the ``(N - S)``-th smallest for coded), and the accuracy cost against the
uncoded outputs (MSE, argmax agreement = RelAcc). Writes ``results.json``, ``steps.jsonl`` and ``latency.png``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from torchgcc.distributed.launch import launch

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bench-latency`` subcommand."""
    parser = subparsers.add_parser(
        "bench-latency",
        help="tail latency of uncoded vs coded (GCC, BACC) execution on local processes with injected latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nproc", type=int, default=5, help="processes: 1 coordinator + P-1 worker ranks")
    parser.add_argument("--codes", default="uncoded,gcc,bacc", help="comma-separated schemes")
    parser.add_argument("--num-workers", "-N", type=int, default=8)
    parser.add_argument("--num-inputs", "-K", type=int, default=4)
    parser.add_argument("--num-stragglers", "-S", type=int, default=3,
                        help="S (default 3: with 10%% stragglers among 8 workers, more than 3 straggle in under "
                             "1%% of steps, so S = 3 covers the p99; S = 2 leaves the p99 to 3-straggler steps)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--latency", default="shifted_exponential", help="latency model name (torchgcc.stragglers)")
    parser.add_argument("--latency-param", action="append", default=None, metavar="KEY=VALUE",
                        help="latency model parameter (default shift=0.011 scale=0.1: about 10%% of worker "
                             "delays exceed 3x the median delay)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before the job is killed")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/latency"), help="output folder")
    parser.set_defaults(func=run)


def _model_latency(delays: torch.Tensor, code: str, num_stragglers: int) -> float:
    """The step latency the delays alone imply: the slowest worker (uncoded) or the (N - S)-th fastest."""
    ordered = delays.sort().values
    return float(ordered[-1] if code == "uncoded" else ordered[len(ordered) - num_stragglers - 1])


def _table(summary: dict, reference: str | None) -> Table:
    table = Table(title="step latency and accuracy cost (same delays for every scheme)")
    for column in ("scheme", "median s", "p99 s", "p99 / uncoded", "model p99 s", "mean MSE", "median MSE", "RelAcc"):
        table.add_column(column, justify="left" if column == "scheme" else "right")
    base = summary[reference]["p99_latency_s"] if reference else None
    for name, row in summary.items():
        table.add_row(
            name,
            f"{row['median_latency_s']:.3f}",
            f"{row['p99_latency_s']:.3f}",
            "-" if base is None else f"{row['p99_latency_s'] / base:.2f}",
            f"{row['model_p99_latency_s']:.3f}",
            f"{row['mean_mse']:.2e}",
            f"{row['median_mse']:.2e}",
            f"{row['mean_agreement']:.3f}",
        )
    return table


def _plot(records: list[dict], summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_cdf, ax_mse) = plt.subplots(1, 2, figsize=(11, 4))
    for name in summary:
        latency = sorted(r["latency_s"] for r in records if r["code"] == name)
        fraction = [(i + 1) / len(latency) for i in range(len(latency))]
        (line,) = ax_cdf.step(latency, fraction, where="post", label=name)
        ax_cdf.axvline(summary[name]["p99_latency_s"], color=line.get_color(), linestyle=":", linewidth=1)
    ax_cdf.set_xlabel("step latency (s); dotted: p99")
    ax_cdf.set_ylabel("fraction of steps")
    ax_cdf.set_title("step latency, empirical CDF")
    ax_cdf.legend()
    names = [name for name in summary if name != "uncoded"]  # uncoded is exact: its MSE is 0
    if names:
        ax_mse.boxplot([[r["mse"] for r in records if r["code"] == n] for n in names], tick_labels=names)
        ax_mse.set_yscale("log")
    ax_mse.set_ylabel("MSE vs uncoded outputs (per step)")
    ax_mse.set_title("accuracy cost")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Launch the job, summarise, print the table and write the results."""
    from torchgcc.distributed.job import summarize

    console = Console()
    if not console.is_terminal:  # logs and pipes: do not squeeze the table into 80 columns
        console = Console(width=120)
    latency_params = args.latency_param if args.latency_param is not None else ["shift=0.011", "scale=0.1"]
    settings = {
        "nproc": args.nproc, "codes": args.codes, "N": args.num_workers, "K": args.num_inputs,
        "S": args.num_stragglers, "steps": args.steps, "latency": args.latency, "latency_params": latency_params,
        "batch_size": args.batch_size, "seed": args.seed, "mode": "injected", "task": "mlp",
    }
    job_args = [
        "--mode", "injected", "--code", args.codes, "--deadline", "0",
        "-N", str(args.num_workers), "-K", str(args.num_inputs), "-S", str(args.num_stragglers),
        "--steps", str(args.steps), "--latency", args.latency, "--batch-size", str(args.batch_size),
        "--seed", str(args.seed),
    ]
    for param in latency_params:
        job_args += ["--latency-param", param]
    console.print(f"running {args.steps} steps of {args.codes} on {args.nproc} processes ...")
    with tempfile.TemporaryDirectory() as folder:
        saved_path = Path(folder) / "steps.pt"
        job = launch([*job_args, "--save", str(saved_path)], nproc=args.nproc, timeout_s=args.timeout)
        if any(job.returncodes):
            console.print(f"[red]job failed with exit codes {job.returncodes}[/]\n{job.stderr}")
            return 1
        saved = torch.load(saved_path, weights_only=False)["steps"]
    records = job.steps
    for record, step in zip(records, saved):
        record["model_latency_s"] = _model_latency(step["delays"], record["code"], args.num_stragglers)
    summary = summarize(records)
    for name, row in summary.items():
        model = torch.tensor([r["model_latency_s"] for r in records if r["code"] == name], dtype=torch.float64)
        row["model_p99_latency_s"] = float(model.quantile(0.99))
    delays = torch.stack([s["delays"] for s in saved[:: len(summary)]])
    settings["straggler_fraction"] = float((delays > 3 * delays.median()).double().mean())
    reference = "uncoded" if "uncoded" in summary else None
    if reference:
        for row in summary.values():
            row["p99_ratio_vs_uncoded"] = row["p99_latency_s"] / summary[reference]["p99_latency_s"]
    console.print(_table(summary, reference))
    console.print(f"fraction of worker delays above 3x the median delay: {settings['straggler_fraction']:.3f}")

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"config": settings, "summary": summary}, indent=2))
    (args.out / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    _plot(records, summary, args.out / "latency.png")
    console.print(f"wrote {args.out / 'results.json'}, {args.out / 'steps.jsonl'}, {args.out / 'latency.png'}")
    return 0
