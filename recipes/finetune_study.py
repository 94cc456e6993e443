"""Does coded-aware fine-tuning help? Base model vs coded fine-tune vs plain fine-tune, on digits (offline).

1. ``fit`` the base classifier on digits;
2. ``fit`` two continuations from its weights for the same epochs and learning rate: THROUGH the code with fresh
   random stragglers every step (configs/finetune.yaml), and plainly (the control: is it the coding or just more
   training?);
3. ``coded_eval`` all three on the test set with the same seeded masks;
4. write ``finetune_study.json`` (settings, the three records per (code, S), checkpoints), plot the argmax
   agreement (RelAcc) and decoded accuracy against S for the three models (``finetune_study.png``) and print a table.

Each of the six stages prints a ``[i/6]`` line; the output folder defaults to a fresh
``torchgcc-results/finetune_study/<date>-<time>``.

    OMP_NUM_THREADS=1 python recipes/finetune_study.py --backbone torchgcc:vit
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from lightning_gcc import DigitsData, run
from lightning_gcc.cli import CONFIG_DIR
from torchgcc.app.options import fresh_output_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--backbone", default="torchgcc:vit", help="model (see lightning_gcc.backbones)")
    parser.add_argument("--base-epochs", type=int, default=60)
    parser.add_argument("--base-lr", type=float, default=1e-3)
    parser.add_argument("--finetune-epochs", type=int, default=20)
    parser.add_argument("--finetune-lr", type=float, default=5e-4)
    parser.add_argument("--num-inputs", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=24)
    parser.add_argument("--num-stragglers", type=int, default=6, help="S during fine-tuning")
    parser.add_argument("--eval-stragglers", default="[0,2,4,6,8,10]", help="S swept by coded_eval")
    parser.add_argument("--codes", default="[gcc,bacc]")
    parser.add_argument("--repeats", type=int, default=20, help="masks per test group and S")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default=None, help="output folder (default: a fresh torchgcc-results/finetune_study/<date>-<time>)"
    )
    args = parser.parse_args()
    out = Path(args.out) if args.out else fresh_output_dir("finetune_study")
    stage = iter(range(1, 7))
    common = [
        f"--model.backbone={args.backbone}",
        f"--seed_everything={args.seed}",
        "--trainer.enable_progress_bar=false",
    ]
    coded = [
        f"--model.coded.num_inputs={args.num_inputs}",
        f"--model.coded.num_workers={args.num_workers}",
        f"--model.coded.num_stragglers={args.num_stragglers}",
    ]

    def fit(name: str, extra: list[str]) -> str:
        print(f"[{next(stage)}/6] fit {name}", flush=True)
        cli = run(DigitsData, "digits.yaml", args=["fit", *common, f"--trainer.default_root_dir={out / name}", *extra])
        return cli.trainer.checkpoint_callback.last_model_path

    base = fit("base", [f"--trainer.max_epochs={args.base_epochs}", f"--model.lr={args.base_lr}"])
    tuned = [
        f"--trainer.max_epochs={args.finetune_epochs}",
        f"--model.lr={args.finetune_lr}",
        f"--model.init_from={base}",
    ]
    checkpoints = {
        "base": base,
        "coded_finetune": fit("coded_finetune", [f"--config={CONFIG_DIR / 'finetune.yaml'}", *tuned, *coded]),
        "plain_finetune": fit("plain_finetune", tuned),
    }
    results = {}
    for name, checkpoint in checkpoints.items():
        print(f"[{next(stage)}/6] coded_eval {name}", flush=True)
        run(
            DigitsData,
            "digits.yaml",
            args=[
                "coded_eval",
                *common,
                f"--ckpt_path={checkpoint}",
                f"--codes={args.codes}",
                f"--num_inputs={args.num_inputs}",
                f"--num_workers={args.num_workers}",
                f"--stragglers={args.eval_stragglers}",
                f"--repeats={args.repeats}",
                f"--seed={args.seed + 1}",
                f"--output_dir={out / name / 'coded_eval'}",
                f"--trainer.default_root_dir={out / name}",
            ],
        )
        results[name] = json.loads((out / name / "coded_eval" / "results.json").read_text())
    summary = {
        "settings": vars(args),
        "torchgcc_version": _source_version(),
        "checkpoints": checkpoints,
        "codes": results["base"]["config"]["code_repr"],
        "reference_accuracy": {name: result["records"][0]["reference_accuracy"] for name, result in results.items()},
        "records": {name: result["records"] for name, result in results.items()},
    }
    (out / "finetune_study.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot_study(summary, out / "finetune_study.png")
    print_table(summary)
    print(f"wrote {out / 'finetune_study.json'}, {out / 'finetune_study.png'}")


def _source_version() -> str:
    """``git describe`` of the torchgcc checkout (``-dirty`` when it has local changes), or "unknown"."""
    root = Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def plot_study(summary: dict, path: Path) -> None:
    """Argmax agreement (RelAcc) and decoded accuracy against S, one line per model and code, with 95% CIs."""
    from torchgcc.app.plots import plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    for color, (name, records) in zip(("C7", "C3", "C0"), summary["records"].items()):
        for style, scheme in zip(("-", ":"), dict.fromkeys(r["scheme"] for r in records)):
            rows = [r for r in records if r["scheme"] == scheme]
            for ax, metric in zip(axes, ("agreement", "accuracy")):
                ax.errorbar(
                    [r["S"] for r in rows],
                    [r[metric] for r in rows],
                    yerr=[r[f"{metric}_ci"] for r in rows],
                    color=color,
                    ls=style,
                    marker="o",
                    ms=3,
                    capsize=2,
                    label=f"{name} ({scheme})",
                )
    s = summary["settings"]
    axes[0].set(xlabel="stragglers S", ylabel="agreement (RelAcc)", title="agreement with each model's uncoded outputs")
    axes[1].set(xlabel="stragglers S", ylabel="accuracy", title="accuracy of the decoded outputs")
    axes[1].legend(fontsize=7)
    fig.suptitle(
        f"digits, {s['backbone']}, K={s['num_inputs']}, N={s['num_workers']}, fine-tuned with "
        f"S={s['num_stragglers']} random stragglers (seed {s['seed']})"
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_table(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="decoded outputs on the digits test set (95% CI over groups)")
    for column in ("model", "uncoded acc", "scheme", "S", "agreement", "decoded acc", "MSE"):
        table.add_column(column)
    for name, records in summary["records"].items():
        for r in records:
            table.add_row(
                name,
                f"{summary['reference_accuracy'][name]:.4f}",
                r["scheme"],
                str(r["S"]),
                f"{r['agreement']:.4f} ± {r['agreement_ci']:.4f}",
                f"{r['accuracy']:.4f} ± {r['accuracy_ci']:.4f}",
                f"{r['mse']:.3g}",
            )
    Console().print(table)


if __name__ == "__main__":
    main()
