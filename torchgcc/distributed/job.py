"""The job every rank runs under ``torchrun ... -m torchgcc.distributed``: options, the coordinator loop, reports.

Rank 0 prints one JSON line per step and scheme, then a summary line; worker ranks serve until shutdown.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from typing import Sequence

import torch
import torch.distributed as dist

from torchgcc.coded_module import CodedModule
from torchgcc.distributed.arrival import Injected, Measured, Simulated
from torchgcc.distributed.coordinator import Coordinator, TooFewWorkersError
from torchgcc.distributed.faults import FaultPlan
from torchgcc.distributed.heartbeat import peak_rss_mb
from torchgcc.distributed.layout import LAYOUTS
from torchgcc.distributed.links import TRANSPORTS
from torchgcc.distributed.schemes import CodedScheme, make_scheme
from torchgcc.distributed.tasks import TASKS, Task, make_task
from torchgcc.distributed.transport import STORE_CHUNK_BYTES, STORE_VALUE_LIMIT, Channel, check_chunk_bytes, connect
from torchgcc.distributed.worker import serve
from torchgcc.metrics import argmax_agreement, mean_ci, mse
from torchgcc.optional import require
from torchgcc.stragglers import LATENCY_MODELS, PLACEMENTS, BernoulliStragglers, FixedStragglers, LatencyStragglers

__all__ = ["add_job_arguments", "run_job", "summarize"]

#: exit status when too few workers remain to decode (lost ranks, or a step timed out).
EXIT_TOO_FEW_WORKERS = 3
#: exit status when the store or the data plane failed on the coordinator's side.
EXIT_TRANSPORT = 4
#: exit status for a bad option (a one-line message, no traceback).
EXIT_USAGE = 2
#: exit status when the launcher terminated the coordinator (torchrun does so when another rank exits non-zero).
EXIT_TERMINATED = 143


class Terminated(RuntimeError):
    """The coordinator received SIGTERM."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated("terminated by the launcher (SIGTERM); torchrun does this when another rank exits non-zero")


def parse_value(text: str) -> int | float | bool | str | None:
    """``"1"`` -> 1, ``"1e-6"`` -> 1e-06, ``"true"`` -> True, ``"none"`` -> None, anything else stays a string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _key_value(text: str) -> tuple[str, int | float | bool | str | None]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.replace("-", "_"), parse_value(value)


def add_job_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of a distributed run (``python -m torchgcc.distributed`` under torchrun or the local launcher)."""
    code = parser.add_argument_group("code")
    code.add_argument(
        "--scheme",
        "--code",
        dest="code",
        default="gcc",
        help="comma-separated schemes run on the same batches and delays: 'uncoded', 'replication' "
        "or registered code names (gcc, natural, bacc, lcc)",
    )
    code.add_argument(
        "--code-param",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument of make_code, e.g. lambda_dec=1e-6 or degree=1 (ints, floats, "
        "true/false, none, strings; repeatable)",
    )
    code.add_argument("--num-workers", "-N", type=int, default=8, help="N coded workers (spread over ranks 1..P-1)")
    code.add_argument("--num-inputs", "-K", type=int, default=4, help="K inputs per group")
    code.add_argument("--num-stragglers", "-S", type=int, default=2, help="S: decode once N - S results arrived")
    code.add_argument(
        "--layout",
        choices=sorted(LAYOUTS),
        default="round_robin",
        help="worker layout: how the N workers are spread over the worker ranks",
    )

    run = parser.add_argument_group("run")
    run.add_argument("--steps", type=int, default=10)
    run.add_argument(
        "--task",
        default="mlp",
        help=f"model: {sorted(TASKS)} (tiny built-in) or any timm model name, e.g. resnet18 (random "
        "weights unless --checkpoint; seeded random images)",
    )
    run.add_argument("--image-size", type=int, default=224, help="image side of timm tasks")
    run.add_argument("--num-classes", type=int, default=1000, help="classes of timm tasks")
    run.add_argument("--checkpoint", help="state_dict file for the timm model")
    run.add_argument(
        "--batch-size",
        "-M",
        type=int,
        default=64,
        help="samples per step: B = ceil(M / K) groups, each worker gets B coded inputs",
    )
    run.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="pg",
        help="pg: payloads on a gloo pair per worker rank (the data plane); store: chunked values in "
        "the rendezvous store (fallback)",
    )
    run.add_argument(
        "--store-chunk-mb",
        type=float,
        default=STORE_CHUNK_BYTES / 2**20,
        help=f"chunk size of the store transport (at most {STORE_VALUE_LIMIT / 2**20:.0f} MiB)",
    )
    run.add_argument("--seed", type=int, default=0, help="seeds the model, the data and the straggler models")
    run.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where workers run the model (cuda: cuda:LOCAL_RANK, one GPU per rank)",
    )
    run.add_argument("--threads", type=int, default=1, help="torch threads per process")
    run.add_argument(
        "--check",
        action="store_true",
        help="also run the single-process CodedModule with the same mask and report the difference",
    )
    run.add_argument("--save", metavar="PATH", help="torch.save every step's inputs, mask, delays and outputs")

    mode = parser.add_argument_group("mask mode")
    mode.add_argument(
        "--mode",
        choices=("simulated", "injected", "measured"),
        default="simulated",
        help="simulated: the straggler model's mask; injected: workers sleep latency-model delays; "
        "measured: real completion order",
    )
    mode.add_argument(
        "--stragglers",
        choices=("fixed", "bernoulli", "latency"),
        default="fixed",
        help="straggler model of the simulated mode",
    )
    mode.add_argument(
        "--straggler-placement",
        choices=PLACEMENTS,
        default="random",
        help="where FixedStragglers puts the S stragglers",
    )
    mode.add_argument("--straggle-prob", type=float, default=0.1, help="p of BernoulliStragglers")
    mode.add_argument(
        "--latency",
        choices=sorted(LATENCY_MODELS),
        default="shifted_exponential",
        help="latency model of the injected mode (and of --stragglers latency)",
    )
    mode.add_argument(
        "--latency-param",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="latency model parameter in seconds, e.g. shift=0.01 scale=0.05 (repeatable)",
    )
    mode.add_argument(
        "--deadline",
        type=float,
        default=1.0,
        help="seconds after which a step decodes from what arrived (if enough); <= 0: no deadline",
    )
    mode.add_argument(
        "--step-timeout",
        type=float,
        default=30.0,
        help="seconds a step may wait for the decoder's minimum number of results before failing",
    )
    mode.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=2.0,
        help="seconds of silence after which a worker rank is declared lost",
    )

    wait = parser.add_argument_group("adaptive wait count (schemes named 'CODE:adaptive', e.g. gcc:adaptive)")
    wait.add_argument(
        "--wait-deadline",
        type=float,
        help="seconds: a step whose (N - S)-th result comes later is a straggler event; the "
        "coordinator records late arrivals up to this time after decoding",
    )
    wait.add_argument(
        "--wait-budget", type=float, default=0.01, help="allowed long-run fraction of steps over --wait-deadline"
    )
    wait.add_argument(
        "--wait-max-stragglers",
        type=int,
        help="largest S the controller may choose (candidates 0..this; default N - K)",
    )
    wait.add_argument("--wait-warmup", type=int, default=1, help="steps at the largest S before adapting")
    wait.add_argument(
        "--wait-max-step",
        type=int,
        default=4,
        help="largest change of S from one step to the next (a detected tail change may raise S further at once)",
    )
    wait.add_argument(
        "--wait-discount",
        type=float,
        default=0.95,
        help="forgetting factor of the controller's tail-risk posterior (memory ~1/(1 - this) steps)",
    )

    faults = parser.add_argument_group("fault injection")
    faults.add_argument("--kill-rank", type=int, help="worker rank that exits abruptly (os._exit) ...")
    faults.add_argument("--kill-step", type=int, default=0, help="... when it receives this step")
    faults.add_argument(
        "--kill-exit-code",
        type=int,
        default=0,
        help="exit status of the killed rank (non-zero makes torchrun stop the whole job)",
    )
    faults.add_argument("--hang-rank", type=int, help="worker rank that blocks forever ...")
    faults.add_argument("--hang-step", type=int, default=0, help="... from this step on")
    faults.add_argument(
        "--slow-worker",
        type=int,
        action="append",
        default=[],
        help="coded worker index delayed by --slow-delay at every step (repeatable)",
    )
    faults.add_argument("--slow-delay", type=float, default=5.0, help="seconds of the --slow-worker delay")
    return parser


def _fault_plan(args: argparse.Namespace) -> FaultPlan:
    return FaultPlan(
        kill_rank=args.kill_rank,
        kill_step=args.kill_step,
        kill_exit_code=args.kill_exit_code,
        hang_rank=args.hang_rank,
        hang_step=args.hang_step,
        slow_workers=tuple(args.slow_worker),
        slow_delay_s=args.slow_delay,
    )


def _arrival_mode(args: argparse.Namespace, *, min_arrived: int) -> Simulated | Injected | Measured:
    latency_params = dict(args.latency_param)
    if args.mode == "measured":
        return Measured(num_stragglers=args.num_stragglers)
    latency = LatencyStragglers(args.latency, num_stragglers=args.num_stragglers, seed=args.seed, **latency_params)
    if args.mode == "injected":
        return Injected(latency, num_stragglers=args.num_stragglers)
    stragglers = {
        "fixed": lambda: FixedStragglers(args.num_stragglers, args.straggler_placement, seed=args.seed),
        "bernoulli": lambda: BernoulliStragglers(args.straggle_prob, min_arrived=min_arrived, seed=args.seed),
        "latency": lambda: latency,
    }[args.stragglers]()
    return Simulated(stragglers)


def _wait_policy(args: argparse.Namespace, name: str):
    """A fresh :class:`WaitCountController` for the scheme ``name`` if it is ``CODE:adaptive``, else None."""
    if not name.endswith(":adaptive"):
        return None
    if args.wait_deadline is None or args.wait_deadline <= 0:
        raise ValueError("an adaptive scheme needs --wait-deadline SECONDS (> 0), the latency it keeps steps under")
    if args.mode == "simulated":
        raise ValueError("an adaptive wait count needs arrivals to wait for: use --mode injected or measured")
    from torchgcc.control.wait_count import WaitCountController

    largest = args.num_workers - args.num_inputs if args.wait_max_stragglers is None else args.wait_max_stragglers
    return WaitCountController(
        args.num_workers,
        deadline=args.wait_deadline,
        budget=args.wait_budget,
        stragglers=range(largest + 1),
        discount=args.wait_discount,
        warmup=args.wait_warmup,
        max_step=args.wait_max_step,
        seed=args.seed,
    )


def summarize(records: list[dict]) -> dict[str, dict[str, float]]:
    """Per scheme: steps, median and p99 step latency, MSE and argmax agreement (RelAcc) as mean and 95% CI
    half-width over steps (``1.96 * std / sqrt(steps)``), median MSE, the samples left without a result, and the
    mean S (NaN for the schemes without one)."""
    summary = {}
    for name in dict.fromkeys(r["scheme"] for r in records):
        rows = [r for r in records if r["scheme"] == name]
        latency = torch.tensor([r["latency_s"] for r in rows], dtype=torch.float64)
        errors = torch.tensor([r["mse"] for r in rows], dtype=torch.float64)
        mean_mse, mse_ci = mean_ci(errors)
        agreement, agreement_ci = mean_ci(torch.tensor([r["agreement"] for r in rows], dtype=torch.float64))
        summary[name] = {
            "steps": len(rows),
            "median_latency_s": float(latency.quantile(0.5)),
            "p99_latency_s": float(latency.quantile(0.99)),
            "mse": mean_mse,
            "mse_ci": mse_ci,
            "median_mse": float(errors.quantile(0.5)),
            "agreement": agreement,
            "agreement_ci": agreement_ci,
            "missing_samples": sum(len(r["missing"]) for r in rows),
            "mean_S": float(
                torch.tensor([math.nan if r.get("S") is None else r["S"] for r in rows], dtype=torch.float64).mean()
            ),
        }
    return summary


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def run_job(args: argparse.Namespace) -> int:
    """Run on every rank: rank 0 coordinates and returns the exit status, the others serve the coded workers."""
    torch.set_num_threads(args.threads)
    faults = _fault_plan(args)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but CUDA is not available on this machine: use --device cpu")
    if args.transport == "store":
        check_chunk_bytes(int(args.store_chunk_mb * 2**20))
    # built on every rank before joining, so a bad option stops every rank, not just the coordinator
    task = make_task(
        args.task,
        seed=args.seed,
        batch_size=args.batch_size,
        image_size=args.image_size,
        num_classes=args.num_classes,
        checkpoint=args.checkpoint,
    )
    names = [name.strip() for name in args.code.split(",")]
    schemes = [
        make_scheme(
            name,
            num_inputs=args.num_inputs,
            num_workers=args.num_workers,
            policy=_wait_policy(args, name),
            **dict(args.code_param),
        )
        for name in names
    ]
    if args.mode == "simulated" and any(not isinstance(s, CodedScheme) for s in schemes):
        raise ValueError("uncoded and replication wait for arrivals, not a drawn mask: use --mode injected or measured")
    mode = _arrival_mode(args, min_arrived=max(scheme.min_arrived for scheme in schemes))
    channel = connect()
    if channel.rank != 0:
        device = "cpu"
        if args.device == "cuda":
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
        serve(
            task.model,
            channel,
            device=device,
            faults=faults,
            transport=args.transport,
            chunk_bytes=int(args.store_chunk_mb * 2**20),
        )
        return 0

    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _coordinate(args, channel, task, schemes, mode, faults)
    finally:
        channel.request_shutdown()  # idempotent; also frees the workers when the coordinator fails early


def _coordinate(
    args: argparse.Namespace,
    channel: Channel,
    task: Task,
    schemes: list,
    mode: Simulated | Injected | Measured,
    faults: FaultPlan,
) -> int:
    """Rank 0's loop: every step, every scheme, one JSON line; then the summary. Returns the exit status."""
    num_groups = math.ceil(args.batch_size / args.num_inputs)
    deadline = args.deadline if args.deadline > 0 else None
    records: list[dict] = []
    saved: list[dict] = []
    status = 0
    started = time.monotonic()
    with Coordinator(
        channel,
        num_workers=args.num_workers,
        layout=args.layout,
        transport=args.transport,
        chunk_bytes=int(args.store_chunk_mb * 2**20),
        faults=faults,
        heartbeat_timeout_s=args.heartbeat_timeout,
        step_timeout_s=args.step_timeout,
    ) as coordinator:
        _emit(
            {
                "event": "start",
                "world_size": channel.world_size,
                "layout": coordinator.assignment,
                "transport": args.transport,
            }
        )
        try:
            tqdm = require("tqdm").tqdm
            for step in tqdm(range(args.steps), desc="steps", disable=not sys.stderr.isatty()):
                x = task.batch(step)
                with torch.no_grad():
                    reference = task.model(x)
                plan = mode.plan(num_groups, args.num_workers)
                for scheme in schemes:
                    policy = getattr(scheme, "policy", None)
                    if policy is not None:
                        scheme.num_stragglers = policy.choose()
                    result = coordinator.step(
                        scheme,
                        x,
                        plan,
                        step=step,
                        deadline_s=deadline,
                        watch_s=None if policy is None else args.wait_deadline,
                    )
                    if policy is not None:
                        policy.observe(
                            result.arrival_s, stragglers=scheme.num_stragglers, watched_until=result.watched_s
                        )
                    have = torch.ones(len(x), dtype=torch.bool)
                    have[result.missing] = False  # samples without a result (replication at the deadline)
                    record = {
                        "step": step,
                        "scheme": scheme.name,
                        "latency_s": result.latency_s,
                        "compute_s": result.compute_s,
                        "payload_mb_per_rank": result.payload_bytes / 1e6,
                        "arrived": result.arrived,
                        "missing": result.missing,
                        "mse": float(mse(result.output[have], reference[have])) if have.any() else math.nan,
                        "agreement": float(argmax_agreement(result.output[have], reference[have]))
                        if have.any()
                        else math.nan,
                        "lost_workers": result.lost_workers,
                        "S": getattr(scheme, "num_stragglers", None) if isinstance(scheme, CodedScheme) else None,
                    }
                    if args.check and isinstance(scheme, CodedScheme):
                        with torch.no_grad():
                            single = CodedModule(task.model, scheme.code)(x, mask=result.mask)
                        record["max_abs_diff_single_process"] = float((single - result.output).abs().max())
                    records.append(record)
                    _emit(record)
                    if args.save:
                        saved.append(
                            {
                                "step": step,
                                "scheme": scheme.name,
                                "x": x,
                                "mask": result.mask,
                                "delays": result.delays,
                                "output": result.output,
                                "arrival_s": result.arrival_s,
                                "watched_s": result.watched_s,
                            }
                        )
        except (TooFewWorkersError, Terminated, dist.DistError) as error:
            print(f"[torchgcc] error: {error}", file=sys.stderr, flush=True)
            _emit({"event": "error", "error": f"{type(error).__name__}: {error}"})
            status = {TooFewWorkersError: EXIT_TOO_FEW_WORKERS, Terminated: EXIT_TERMINATED}.get(
                type(error), EXIT_TRANSPORT
            )
    lost = coordinator.lost_workers  # after close(), which also catches ranks that died near the end
    policies = {s.name: s.policy for s in schemes if getattr(s, "policy", None) is not None}
    if args.save:
        torch.save(
            {
                "args": vars(args),
                "steps": saved,
                "wait_policies": {name: p.state_dict() for name, p in policies.items()},
            },
            args.save,
        )
    _emit(
        {
            "event": "summary",
            "status": status,
            "steps": args.steps,
            "wall_s": time.monotonic() - started,
            "lost_workers": lost,
            "max_rss_mb": _max_rss_mb(channel),
            "schemes": summarize(records),
            "wait_policies": {
                name: {
                    "stragglers_distribution": p.stragglers_distribution(),
                    "event_rate": p.controller.event_rate,
                    "changes": p.controller.changes,
                }
                for name, p in policies.items()
            },
        }
    )
    return status


def _max_rss_mb(channel: Channel) -> dict[int, float]:
    """Peak resident memory per rank in MB (worker ranks report theirs when they exit; absent if they did not)."""
    peaks = {0: peak_rss_mb()}
    for rank in range(1, channel.world_size):
        key = f"rss/{rank}"
        if channel.store.check([key]):
            peaks[rank] = float(channel.store.get(key))
    return peaks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="torchrun --standalone --nproc-per-node P -m torchgcc.distributed",
        description="Coded inference across torchrun ranks: rank 0 coordinates, ranks 1..P-1 host the N workers.",
    )
    args = add_job_arguments(parser).parse_args(argv)
    try:
        return run_job(args)
    except (ValueError, TypeError) as error:  # a bad option: one line, no traceback
        print(f"torchgcc.distributed: error: {error}", file=sys.stderr)
        return EXIT_USAGE
