"""``torchgcc profile``: the cost of coding next to the cost of the model.

For a timm model, K inputs per group, N workers, S stragglers and B groups, it times

- ``encode``: ``code.encoder`` on ``(B, K, C, H, W)`` images,
- ``forward``: the model on the ``B * N`` coded images (one batch),
- ``decode_construct``: building the decode matrices for the ``B`` masks (nothing is cached between calls),
- ``decode_apply``: applying matrices built beforehand to the results,
- ``decode``: decoding end to end (construction + application), the number in the ratio ``decode / forward``,

with warm-up runs, ``time.perf_counter`` on CPU and CUDA events on CUDA. ``--trace FILE`` records one more pass
of every stage under ``torch.profiler`` and exports a Chrome trace (open it in chrome://tracing or Perfetto).
The table is printed with rich; everything (settings, environment, times) is written as JSON to
``--out``/profile.json (default: a fresh ``./torchgcc-results/profile/<date>-<time>``).
"""

from __future__ import annotations

import argparse
import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from torchgcc.codes.maps import apply_linear
from torchgcc.optional import require
from torchgcc.timing import make_timer, summarize

__all__ = ["DTYPES", "ProfileSettings", "profile_coded_inference", "register"]

#: ``--dtype`` choices.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
}

#: Stages in the order they are timed and shown.
STAGES = ("encode", "forward", "decode_construct", "decode_apply", "decode")


@dataclass(frozen=True)
class ProfileSettings:
    """What ``torchgcc profile`` measures (see the module docstring)."""

    model: str = "resnet18"
    num_inputs: int = 8
    num_workers: int = 32
    num_stragglers: int | None = None  # None: N // 8
    groups: int = 1
    code: str = "gcc"
    device: str = "cpu"
    dtype: str = "float32"
    image_size: int | None = None  # None: the model's default input size
    num_classes: int = 1000
    warmup: int = 2
    repeats: int = 5
    seed: int = 0
    code_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def stragglers(self) -> int:
        return self.num_workers // 8 if self.num_stragglers is None else self.num_stragglers


def _build_model(settings: ProfileSettings) -> tuple[nn.Module, tuple[int, int, int]]:
    timm = require("timm")
    model = timm.create_model(settings.model, pretrained=False, num_classes=settings.num_classes)
    channels, height, width = model.pretrained_cfg.get("input_size", (3, 224, 224))
    if settings.image_size is not None:
        height = width = settings.image_size
    return model, (channels, height, width)


def profile_coded_inference(
    settings: ProfileSettings, *, trace: str | Path | None = None, progress: bool = False
) -> dict[str, Any]:
    """Time every stage of coded inference (see the module docstring) and return a JSON-ready report.

    Returns ``{"settings", "environment", "shapes", "stages": {stage: summary}, "per_group_ms",
    "decode_over_forward"}`` where a summary holds ``median_ms``, ``mean_ms``, ``std_ms``, ``min_ms``, ``times_ms``
    and the ratio compares medians. ``progress`` shows a bar over the stages.
    """
    import torchgcc
    from torchgcc.stragglers import FixedStragglers

    if settings.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {settings.dtype!r}")
    device, dtype = torch.device(settings.device), DTYPES[settings.dtype]
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but torch.cuda.is_available() is False")
    torch.manual_seed(settings.seed)
    model, image_shape = _build_model(settings)
    model = model.to(device=device, dtype=dtype).eval()
    code = torchgcc.make_code(
        settings.code, num_inputs=settings.num_inputs, num_workers=settings.num_workers, **settings.code_kwargs
    )
    code = code.to(device)
    num_groups, num_workers = settings.groups, settings.num_workers
    images = torch.randn(num_groups, settings.num_inputs, *image_shape, device=device, dtype=dtype)
    mask = FixedStragglers(num_stragglers=settings.stragglers, placement="random", seed=settings.seed)
    mask = mask.sample(num_groups, num_workers).to(device)

    with torch.inference_mode():
        coded = code.encoder(images)
        results = model(coded.flatten(0, 1)).unflatten(0, (num_groups, num_workers))
        flat = results.reshape(num_groups, num_workers, -1)
        code.decoder(results, mask)  # a calibrating decoder chooses its smoothing on the first call
        matrices = code.decoder.matrices(flat, mask)
        stages: dict[str, tuple[Callable[[], Any], Callable[[], Any] | None]] = {
            "encode": (lambda: code.encoder(images), None),
            "forward": (lambda: model(coded.flatten(0, 1)), None),
            "decode_construct": (lambda: code.decoder.matrices(flat, mask), None),
            "decode_apply": (lambda: apply_linear(matrices, flat), None),
            "decode": (lambda: code.decoder(results, mask), None),
        }
        timer = make_timer(device)
        summaries = {}
        bar = require("tqdm").tqdm(STAGES, desc="profiling stages", disable=not progress, leave=False)
        for name in bar:
            bar.set_postfix(stage=name)
            fn, setup = stages[name]
            times = timer.measure(fn, warmup=settings.warmup, repeats=settings.repeats, setup=setup)
            summaries[name] = summarize(times)
        if trace is not None:
            _export_trace(stages, device, Path(trace))

    forward = summaries["forward"]["median_ms"]
    return {
        "settings": {**asdict(settings), "num_stragglers": settings.stragglers},
        "environment": _environment(device),
        "shapes": {"images": list(images.shape), "coded": list(coded.shape), "results": list(results.shape)},
        "stages": summaries,
        "per_group_ms": {name: summary["median_ms"] / num_groups for name, summary in summaries.items()},
        "decode_over_forward": summaries["decode"]["median_ms"] / forward,
        "trace": None if trace is None else str(trace),
    }


def _export_trace(
    stages: dict[str, tuple[Callable[[], Any], Callable[[], Any] | None]], device: torch.device, path: Path
) -> None:
    """One pass of every stage under ``torch.profiler``, each in its own ``record_function`` range."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities, record_shapes=True) as prof:
        for name, (fn, setup) in stages.items():
            if setup is not None:
                setup()
            with record_function(f"torchgcc/{name}"):
                fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))


def _environment(device: torch.device) -> dict[str, Any]:
    import os

    return {
        "load_average": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
    }


def print_report(report: dict[str, Any]) -> None:
    """Print the stage table and the decode / forward ratio with rich."""
    from rich.table import Table

    from torchgcc.app.tables import make_console

    s = report["settings"]
    forward = report["stages"]["forward"]["median_ms"]
    table = Table(
        title=f"{s['model']} {s['code']}: K={s['num_inputs']} N={s['num_workers']} S={s['num_stragglers']} "
        f"groups={s['groups']} {s['device']} {s['dtype']}"
    )
    for column in ("stage", "median ms", "mean ms", "std ms", "per group ms", "% of fwd"):
        table.add_column(column, justify="left" if column == "stage" else "right", no_wrap=True)
    for name, summary in report["stages"].items():
        table.add_row(
            name,
            f"{summary['median_ms']:.4g}",
            f"{summary['mean_ms']:.4g}",
            f"{summary['std_ms']:.2g}",
            f"{report['per_group_ms'][name]:.4g}",
            f"{100 * summary['median_ms'] / forward:.3g}",
        )
    console = make_console()
    console.print(table)
    console.print(f"decode / forward = {100 * report['decode_over_forward']:.3g}%")


def _check_arguments(args: argparse.Namespace) -> None:
    """Turn the user errors the run would hit late (after model creation) into one-line usage errors."""
    from torchgcc.app.cli import UsageError
    from torchgcc.codes import list_codes, make_code

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(
            f"--device {args.device}: no CUDA device is available here (torch.cuda.is_available() is "
            f"False); use --device cpu"
        )
    if args.code.lower() not in list_codes():
        raise UsageError(f"unknown --code {args.code!r}; choose one of {list_codes()}")
    for option in ("num_inputs", "num_workers", "groups", "repeats", "num_classes", "image_size"):
        given = getattr(args, option)
        if given is not None and given < 1:
            raise UsageError(f"--{option.replace('_', '-')} must be at least 1, got {given}")
    if args.warmup is not None and args.warmup < 0:
        raise UsageError(f"--warmup must be at least 0, got {args.warmup}")
    try:
        code = make_code(args.code, num_inputs=args.num_inputs, num_workers=args.num_workers)
    except ValueError as error:
        raise UsageError(f"--num-inputs {args.num_inputs} --num-workers {args.num_workers}: {error}") from None
    stragglers = args.num_workers // 8 if args.num_stragglers is None else args.num_stragglers
    most = args.num_workers - code.min_arrived
    if not 0 <= stragglers <= most:
        raise UsageError(
            f"--num-stragglers must lie in [0, {most}] ({args.code} decodes from at least {code.min_arrived} of "
            f"N={args.num_workers} results), got {stragglers}"
        )
    timm = require("timm")
    if not timm.is_model(args.model):
        import difflib

        close = difflib.get_close_matches(args.model, timm.list_models(), n=5, cutoff=0.6)
        raise UsageError(
            f"unknown timm --model {args.model!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "; see timm.list_models()")
        )


def _run(args: argparse.Namespace) -> int:
    from torchgcc.app.options import apply_threads, gcc_options, output_dir
    from torchgcc.app.results import writing
    from torchgcc.optional import check_extra

    output = output_dir(args) / "profile.json"  # checked before any work, as is the extra
    check_extra("experiments")
    apply_threads(args)
    _check_arguments(args)
    defaults = ProfileSettings()
    settings = ProfileSettings(
        model=args.model,
        num_inputs=args.num_inputs,
        num_workers=args.num_workers,
        num_stragglers=args.num_stragglers,
        groups=args.groups,
        code=args.code.lower(),
        device=args.device,
        dtype=args.dtype,
        image_size=args.image_size,
        num_classes=args.num_classes,
        warmup=1 if args.quick and args.warmup is None else (defaults.warmup if args.warmup is None else args.warmup),
        repeats=2
        if args.quick and args.repeats is None
        else (defaults.repeats if args.repeats is None else args.repeats),
        seed=args.seed,
        code_kwargs=gcc_options(args) if args.code.lower() == "gcc" else {},
    )
    report = profile_coded_inference(settings, trace=args.trace, progress=args.progress)
    print_report(report)
    with writing(output.parent):
        output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {output}" + (f" and the Chrome trace {args.trace}" if args.trace else ""))
    return 0


def register(subparsers: argparse._SubParsersAction, argv: Sequence[str] = ()) -> None:
    """Add the ``profile`` subcommand (with the run options and ``--lambda-dec`` / ``--lambda-enc``)."""
    from torchgcc.app.options import DefaultsHelpFormatter, add_gcc_arguments, add_run_arguments

    defaults = ProfileSettings()
    parser = subparsers.add_parser(
        "profile",
        help="time encode, decode and the model forward of coded inference",
        description=__doc__.split("\n\n")[0],
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--model", default=defaults.model, help="timm model name (random weights)")
    parser.add_argument("--num-inputs", type=int, default=defaults.num_inputs, help="K, inputs per group")
    parser.add_argument("--num-workers", type=int, default=defaults.num_workers, help="N, workers per group")
    parser.add_argument(
        "--num-stragglers", type=int, default=None, help="S, random stragglers per group (default: N // 8)"
    )
    parser.add_argument("--groups", type=int, default=defaults.groups, help="B, groups in one batch")
    parser.add_argument("--code", default=defaults.code, help="registered code name")
    parser.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default=defaults.dtype, choices=sorted(DTYPES), help="model and data dtype")
    parser.add_argument("--image-size", type=int, default=None, help="image size (default: the model's input size)")
    parser.add_argument("--num-classes", type=int, default=defaults.num_classes, help="model outputs")
    parser.add_argument(
        "--warmup", type=int, default=None, help=f"untimed runs per stage (default {defaults.warmup}; --quick: 1)"
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help=f"timed runs per stage (default {defaults.repeats}; --quick: 2)"
    )
    parser.add_argument("--trace", default=None, help="export a torch.profiler Chrome trace to this file")
    add_run_arguments(parser, name="profile")
    add_gcc_arguments(parser)
    parser.set_defaults(func=_run)
