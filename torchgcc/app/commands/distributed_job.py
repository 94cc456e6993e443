"""``python -m torchgcc.distributed`` (under torchrun or the local launcher): the coded-inference job's command line.

Every rank parses the same options into a :class:`~torchgcc.app.coded_job.JobSettings` and validates them before
any process group is joined; a bad option ends every rank with status 2 and one line on rank 0's stderr. Rank 0
prints one JSON line per step and scheme, then a summary line; ``--save`` writes the kept tensors with
``torch.save``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Sequence

import torch

from torchgcc.app.cli import Parser
from torchgcc.app.code_names import code_name_choices
from torchgcc.app.coded_job import DEADLINE_S, EXIT_USAGE, JobSettings, Terminated, run_job
from torchgcc.app.logs import configure_logging
from torchgcc.app.results import plain
from torchgcc.app.workloads import WORKLOADS
from torchgcc.distributed.heartbeat import EXIT_COORDINATOR_LOST
from torchgcc.distributed.layout import LAYOUTS
from torchgcc.distributed.links import TRANSPORTS
from torchgcc.distributed.transport import STORE_VALUE_LIMIT
from torchgcc.distributed.worker import CoordinatorLost
from torchgcc.stragglers import LATENCY_MODELS, PLACEMENTS

__all__ = ["JOB_PROG", "add_job_arguments", "main", "parse_value", "settings_from"]

DEFAULTS = JobSettings()

#: How the job's command line is invoked (its ``prog``).
JOB_PROG = "torchrun --standalone --nproc-per-node P -m torchgcc.distributed"


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
    engine = parser.add_argument_group("engine")
    engine.add_argument(
        "--engine",
        choices=("torchrun", "ray"),
        default=DEFAULTS.engine,
        help="torchrun: ranks of torchrun or the local launcher; ray: this one process coordinates N Ray actors "
        "(no torchrun; needs the ray extra)",
    )
    engine.add_argument(
        "--max-restarts",
        type=int,
        default=DEFAULTS.max_restarts,
        help="--engine ray: how often Ray restarts a crashed actor (0: a dead actor stays lost)",
    )
    code = parser.add_argument_group("code")
    code.add_argument(
        "--scheme",
        "--code",
        dest="schemes",
        type=_names,
        default=",".join(DEFAULTS.schemes),
        help="comma-separated codes run on the same batches and delays, each optionally with its own S "
        f"(gcc:S=4) or an adaptive S (gcc:adaptive): {', '.join(code_name_choices())}",
    )
    code.add_argument(
        "--code-param",
        dest="code_params",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument of make_code, e.g. lambda_dec=1e-6 or degree=1 (ints, floats, "
        "true/false, none, strings; repeatable)",
    )
    code.add_argument(
        "--num-workers", "-N", type=int, default=DEFAULTS.num_workers, help="N coded workers (spread over ranks 1..P-1)"
    )
    code.add_argument("--num-inputs", "-K", type=int, default=DEFAULTS.num_inputs, help="K inputs per group")
    code.add_argument(
        "--num-stragglers", "-S", type=int, default=DEFAULTS.num_stragglers, help="S: decode once N - S results arrived"
    )
    code.add_argument(
        "--layout",
        choices=sorted(LAYOUTS),
        default=DEFAULTS.layout,
        help="worker layout: how the N workers are spread over the worker ranks",
    )

    run = parser.add_argument_group("run")
    run.add_argument("--steps", type=int, default=DEFAULTS.steps)
    run.add_argument(
        "--task",
        default=DEFAULTS.task,
        help=f"model: {sorted(WORKLOADS)} (tiny built-in) or any timm model name, e.g. resnet18 (random "
        "weights unless --checkpoint; seeded random images)",
    )
    run.add_argument("--image-size", type=int, default=DEFAULTS.image_size, help="image side of timm tasks")
    run.add_argument("--num-classes", type=int, default=DEFAULTS.num_classes, help="classes of timm tasks")
    run.add_argument("--checkpoint", help="state_dict file for the timm model")
    run.add_argument(
        "--batch-size",
        "-M",
        type=int,
        default=DEFAULTS.batch_size,
        help="samples per step: B = ceil(M / K) groups, each worker gets B coded inputs",
    )
    run.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default=DEFAULTS.transport,
        help="pg: payloads on a gloo pair per worker rank (the data plane); store: chunked values in "
        "the rendezvous store (fallback)",
    )
    run.add_argument(
        "--store-chunk-mb",
        type=float,
        default=DEFAULTS.store_chunk_mb,
        help=f"chunk size of the store transport (at most {STORE_VALUE_LIMIT / 2**20:.0f} MiB)",
    )
    run.add_argument(
        "--seed", type=int, default=DEFAULTS.seed, help="seeds the model, the data and the straggler models"
    )
    run.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=DEFAULTS.device,
        help="where workers run the model (cuda: cuda:LOCAL_RANK, one GPU per rank)",
    )
    run.add_argument("--threads", type=int, default=DEFAULTS.threads, help="torch threads per process")
    run.add_argument(
        "--check",
        action="store_true",
        help="also run the single-process CodedModule with the same mask and report the difference",
    )
    run.add_argument(
        "--save", metavar="PATH", type=Path, help="torch.save every step's inputs, mask, delays and outputs"
    )

    mode = parser.add_argument_group("mask mode")
    mode.add_argument(
        "--mode",
        choices=("simulated", "injected", "measured"),
        default=DEFAULTS.mode,
        help="simulated: the straggler model's mask; injected: workers sleep latency-model delays; "
        "measured: real completion order",
    )
    mode.add_argument(
        "--stragglers",
        dest="straggler_model",
        choices=("fixed", "bernoulli", "latency"),
        default=DEFAULTS.straggler_model,
        help="straggler model of the simulated mode",
    )
    mode.add_argument(
        "--straggler-placement",
        choices=PLACEMENTS,
        default=DEFAULTS.straggler_placement,
        help="where FixedStragglers puts the S stragglers",
    )
    mode.add_argument("--straggle-prob", type=float, default=DEFAULTS.straggle_prob, help="p of BernoulliStragglers")
    mode.add_argument(
        "--latency",
        choices=sorted(LATENCY_MODELS),
        default=DEFAULTS.latency,
        help="latency model of the injected mode (and of --stragglers latency)",
    )
    mode.add_argument(
        "--latency-param",
        dest="latency_params",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="latency model parameter in seconds, e.g. shift=0.01 scale=0.05 (repeatable)",
    )
    mode.add_argument(
        "--deadline",
        type=float,
        default=None,
        help=f"seconds after which a step decodes from what arrived (if enough); <= 0: no deadline (default: "
        f"{DEADLINE_S:g}, or in the injected mode {DEADLINE_S:g} after the delays' 99.9th percentile)",
    )
    mode.add_argument(
        "--step-timeout",
        type=float,
        default=DEFAULTS.step_timeout,
        help="seconds a step may wait for the decoder's minimum number of results before failing",
    )
    mode.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=DEFAULTS.heartbeat_timeout,
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
        "--wait-budget",
        type=float,
        default=DEFAULTS.wait_budget,
        help="allowed long-run fraction of steps over --wait-deadline",
    )
    wait.add_argument(
        "--wait-max-stragglers",
        type=int,
        help="largest S the controller may choose (candidates 0..this; default N - K)",
    )
    wait.add_argument(
        "--wait-warmup", type=int, default=DEFAULTS.wait_warmup, help="steps at the largest S before adapting"
    )
    wait.add_argument(
        "--wait-max-step",
        type=int,
        default=DEFAULTS.wait_max_step,
        help="largest change of S from one step to the next (a detected tail change may raise S further at once)",
    )
    wait.add_argument(
        "--wait-discount",
        type=float,
        default=DEFAULTS.wait_discount,
        help="forgetting factor of the controller's tail-risk posterior (memory ~1/(1 - this) steps)",
    )

    faults = parser.add_argument_group("fault injection")
    faults.add_argument("--kill-rank", type=int, help="worker rank that exits abruptly (os._exit) ...")
    faults.add_argument("--kill-step", type=int, default=DEFAULTS.kill_step, help="... when it receives this step")
    faults.add_argument(
        "--kill-exit-code",
        type=int,
        default=DEFAULTS.kill_exit_code,
        help="exit status of the killed rank (non-zero makes torchrun stop the whole job)",
    )
    faults.add_argument("--hang-rank", type=int, help="worker rank that blocks forever ...")
    faults.add_argument("--hang-step", type=int, default=DEFAULTS.hang_step, help="... from this step on")
    faults.add_argument(
        "--slow-worker",
        dest="slow_workers",
        type=int,
        action="append",
        default=[],
        help="coded worker index delayed by --slow-delay at every step (repeatable)",
    )
    faults.add_argument(
        "--slow-delay", type=float, default=DEFAULTS.slow_delay, help="seconds of the --slow-worker delay"
    )
    return parser


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def settings_from(args: argparse.Namespace) -> JobSettings:
    """The :class:`JobSettings` of parsed options (every field of it is an option's ``dest``)."""
    values = {f.name: getattr(args, f.name) for f in fields(JobSettings)}
    values.update(
        code_params=dict(args.code_params),
        latency_params=dict(args.latency_params),
        slow_workers=tuple(args.slow_workers),
        save=args.save is not None,
    )
    return JobSettings(**values)


def _print_record(record: dict) -> None:
    """A JSON line on stdout (valid JSON: NaN becomes null); an error record also as one line on stderr."""
    print(json.dumps(plain(record), allow_nan=False), flush=True)
    if record.get("event") == "error":
        print(f"[torchgcc] error: {record['error']}", file=sys.stderr, flush=True)


def _is_rank0() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and take part in the job; returns this rank's exit status."""
    parser = Parser(
        prog=JOB_PROG,
        description="Coded inference across torchrun ranks: rank 0 coordinates, ranks 1..P-1 host the N workers.",
        allow_abbrev=False,
    )
    args = add_job_arguments(parser).parse_args(argv)
    configure_logging()
    progress = None
    held: list[dict] = []  # the summary line waits for --save: once it is printed, the saved file is complete

    def emit(record: dict) -> None:
        if args.save is not None and record.get("event") == "summary":
            held.append(record)
        else:
            _print_record(record)

    try:
        settings = settings_from(args)
        if _is_rank0() and sys.stderr.isatty():
            from tqdm import tqdm

            progress = tqdm(total=settings.steps, desc="steps")
        outcome = run_job(
            settings,
            emit=emit,
            on_step=lambda step: progress is not None and progress.update(),
        )
    except (ValueError, TypeError) as error:  # a bad option: one line, no traceback, on rank 0 only
        if _is_rank0():
            print(f"torchgcc.distributed: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Terminated as error:  # a signal before the first step (the workers were starting): the error, no summary
        _print_record({"event": "error", "error": f"{type(error).__name__}: {error} (before the first step)"})
        return error.status
    except CoordinatorLost as error:  # a worker rank whose coordinator died: one line, non-zero
        # one write of the whole line: stderr is unbuffered, and print writes the text and its newline apart, so the
        # lines of ranks that lose their coordinator together (sharing torchrun's stderr) ran into one another
        sys.stderr.write(f"[torchgcc] {error}; exiting\n")
        return EXIT_COORDINATOR_LOST
    finally:
        if progress is not None:
            progress.close()
    if outcome is None:  # a worker rank
        return 0
    if args.save is not None:
        torch.save({"args": vars(args), **outcome.saved}, args.save)
    for record in held:
        _print_record(record)
    return outcome.status
