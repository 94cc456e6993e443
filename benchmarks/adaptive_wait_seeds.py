"""How often the adaptive wait count passes the bench-latency acceptance: the same scenario over many seeds.

One ``torchgcc bench-latency --adaptive-wait`` run takes about half an hour and is one draw of the delays. This
script replays its scenario in one process for many seeds, so a single run's verdict can be read against the
pass rate. Per seed and step it draws the ``(N,)`` worker delays from the same latency model and generator as the
executor (``LatencyStragglers(TailChange(...), seed=seed)``), runs the same ``mlp`` task through GCC (default
decoder), and
decodes every scheme from the fastest ``N - S`` results. What it does not reproduce is the executor's own
overhead: a step's latency is the model latency (the ``(N - S)``-th fastest delay) plus an overhead drawn from
``--overhead-from``, the measured-minus-model latencies of a committed bench run (bootstrap), and the controller
observes arrival times = delays plus the adaptive step's overhead (the executor measures arrivals, not delays).

Per seed it applies the acceptance test (:func:`torchgcc.control.wait_count.compare_with_fixed`: the reference is
the most accurate fixed S whose p99 meets the deadline; the adaptive row passes if its p99 is no higher and its
argmax agreement no lower) and writes every seed's rows and the pass rates:

    python benchmarks/adaptive_wait_seeds.py --out benchmarks/results/adaptive_wait_seeds.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tqdm import tqdm

import torchgcc
from torchgcc.app.wait_count_verdict import compare_with_fixed
from torchgcc.app.workloads import mlp_workload
from torchgcc.coded_module import group_samples
from torchgcc.control.wait_count import WaitCountController
from torchgcc.stragglers import LatencyStragglers, TailChange


def overhead_pool(path: Path) -> torch.Tensor:
    """Measured minus model step latency ``(R,)`` of the coded rows of a bench-latency ``steps.jsonl``."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return torch.tensor(
        [r["latency_s"] - r["model_latency_s"] for r in rows if r["S"] is not None], dtype=torch.float64
    )


def run_seed(seed: int, args: argparse.Namespace, overheads: torch.Tensor) -> dict:
    """One replay of the scenario: per scheme its p99 latency and mean agreement, and the verdict."""
    n, k = args.num_workers, args.num_inputs
    code = torchgcc.make_code("gcc", num_inputs=k, num_workers=n)
    task = mlp_workload(seed=seed, batch_size=args.batch_size)
    latency = LatencyStragglers(TailChange(args.shift, args.scale, args.scale_after, args.change_at), seed=seed)
    pick = torch.Generator().manual_seed(10_000 + seed)
    policy = WaitCountController(
        n,
        deadline=args.deadline,
        budget=args.budget,
        candidates=range(max(args.fixed) + 1),
        discount=args.discount,
        eta=2.0,
        warmup=args.warmup,
        max_step=args.max_step,
        change_level=args.change_level,
        seed=seed,
    )
    schemes = [*args.fixed, "adaptive"]
    latencies = {s: [] for s in schemes}
    agreements = {s: [] for s in schemes}
    chosen = []
    for step in range(args.steps):
        delays = latency.sample_delays(1, n)[0]  # (N,) seconds, drawn as the executor draws them
        order = delays.argsort()
        x = group_samples(task.batch(step), k)  # (B, K, in)
        with torch.no_grad():
            reference = task.model(x).argmax(-1)  # (B, K)
            coded = code.encoder(x)
            results = task.model(coded)  # (B, N, classes)
        adaptive_s = policy.choose()
        chosen.append(adaptive_s)
        step_overhead = overheads[torch.randint(len(overheads), (len(schemes),), generator=pick)]
        for scheme, overhead in zip(schemes, step_overhead.tolist()):
            s = adaptive_s if scheme == "adaptive" else scheme
            mask = torch.zeros(n, dtype=torch.bool)
            mask[order[: n - s]] = True
            decoded = code.decoder(results, mask.expand(len(x), n)).argmax(-1)
            latencies[scheme].append(float(delays[order[n - s - 1]]) + overhead)
            agreements[scheme].append(float((decoded == reference).double().mean()))
        arrivals = delays + step_overhead[-1]  # the adaptive scheme's step
        watched = arrivals.masked_fill(arrivals > args.deadline, float("inf"))
        policy.observe(watched, num_stragglers=adaptive_s, watched_until=args.deadline)
    rows = {
        str(s): {"p99": float(torch.tensor(latencies[s]).quantile(0.99)), "agreement": sum(agreements[s]) / args.steps}
        for s in schemes
    }
    fixed = [{"S": s, **rows[str(s)]} for s in args.fixed]
    verdict = compare_with_fixed(fixed, rows["adaptive"], args.deadline)
    return {
        "seed": seed,
        "rows": rows,
        "mean_S": sum(chosen) / len(chosen),
        "S_by_step": chosen,
        "changes": policy.controller.changes,
        "event_rate": policy.controller.event_rate,
        "verdict": verdict,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30, help="seeds 0 .. this - 1")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--change-at", type=int, default=150)
    parser.add_argument("--num-workers", type=int, default=24)
    parser.add_argument("--num-inputs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shift", type=float, default=0.3)
    parser.add_argument("--scale", type=float, default=0.06)
    parser.add_argument("--scale-after", type=float, default=0.15)
    parser.add_argument("--deadline", type=float, default=0.6)
    parser.add_argument("--budget", type=float, default=0.005)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--max-step", type=int, default=4)
    parser.add_argument("--discount", type=float, default=0.95)
    parser.add_argument("--change-level", type=float, default=0.01)
    parser.add_argument("--fixed", default="6,7,8,9,10,12,16", help="comma-separated fixed S rows")
    parser.add_argument(
        "--overhead-from",
        type=Path,
        default=Path("benchmarks/results/latency-adaptive/steps.jsonl"),
        help="a bench-latency steps.jsonl whose measured-minus-model latencies are the overheads",
    )
    parser.add_argument(
        "--executor-run",
        type=Path,
        default=None,
        help="a bench-latency results.json of the same scenario: report on how many steps its "
        "adaptive S equals this replay's for the same seed",
    )
    parser.add_argument("--out", type=Path, default=Path("torchgcc-results/adaptive_wait_seeds.json"))
    args = parser.parse_args()
    args.fixed = [int(s) for s in args.fixed.split(",")]
    torch.set_num_threads(1)
    overheads = overhead_pool(args.overhead_from)
    runs = [run_seed(seed, args, overheads) for seed in tqdm(range(args.seeds), desc="seeds")]
    verdicts = [r["verdict"] for r in runs]
    passed = {
        "p99": sum(v["adaptive_p99_no_worse"] for v in verdicts),
        "agreement": sum(v["adaptive_agreement_no_worse"] for v in verdicts),
        "both": sum(v["adaptive_p99_no_worse"] and v["adaptive_agreement_no_worse"] for v in verdicts),
    }
    executor = None
    if args.executor_run is not None:
        run = json.loads(args.executor_run.read_text())
        seed = run["config"]["seed"]
        executor_s = run["settings"][0]["adaptive_wait"]["S_by_step"]
        replay_s = next(r["S_by_step"] for r in runs if r["seed"] == seed)
        executor = {
            "seed": seed,
            "steps": len(executor_s),
            "same_S_steps": sum(a == b for a, b in zip(executor_s, replay_s)),
        }
        print(
            f"seed {seed}: the replay chose the executor's S on {executor['same_S_steps']} of {len(executor_s)} steps"
        )
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    settings["overheads"] = {
        "count": len(overheads),
        "median_s": float(overheads.median()),
        "p99_s": float(overheads.quantile(0.99)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "settings": settings,
                "passed_of": args.seeds,
                "passed": passed,
                "executor_comparison": executor,
                "runs": runs,
            },
            indent=1,
        )
    )
    print(f"{args.seeds} seeds, {args.steps} steps, tail change at step {args.change_at}")
    print(f"adaptive p99 no worse than the reference: {passed['p99']}/{args.seeds}")
    print(f"adaptive agreement no lower:               {passed['agreement']}/{args.seeds}")
    print(f"both (acceptance):                         {passed['both']}/{args.seeds}")
    references = [v["reference_S"] for v in verdicts]
    print("reference S per seed:", references)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
