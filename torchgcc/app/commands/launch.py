"""``python -m torchgcc.distributed.launch --nproc P [--timeout S] -- JOB OPTIONS``: the local launcher's command line.

Runs :func:`torchgcc.distributed.launch.launch` and prints rank 0's JSON lines on stdout as they appear, every
rank's process id on stderr at the start, and every rank's stderr and exit status at the end.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Sequence

from torchgcc.app.cli import Parser
from torchgcc.app.coded_job import EXIT_USAGE
from torchgcc.app.commands.distributed_job import JOB_PROG, add_job_arguments, settings_from
from torchgcc.distributed import launch

__all__ = ["main"]


def _stop(signum: int, frame: object) -> None:
    """SIGTERM or SIGINT: unwind into the launcher's clean-up (which kills every rank's process group and removes
    the temp folder); further signals are ignored so they cannot interrupt it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torchgcc.distributed.launch --nproc P [--timeout S] -- JOB OPTIONS``: rank 0's lines on stdout."""
    parser = Parser(
        prog="python -m torchgcc.distributed.launch",
        allow_abbrev=False,
        description=launch.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nproc", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before every process is killed")
    parser.add_argument("job", nargs=argparse.REMAINDER, help="options of python -m torchgcc.distributed")
    args = parser.parse_args(argv)
    job = args.job[1:] if args.job[:1] == ["--"] else args.job
    if args.nproc < 2:
        parser.error(f"--nproc must be at least 2 (a coordinator and a worker rank), got {args.nproc}")
    try:  # the job's own options, checked here once before any process starts
        settings = settings_from(add_job_arguments(Parser(prog=JOB_PROG, allow_abbrev=False)).parse_args(job))
        for name in ("kill_rank", "hang_rank"):  # the ranks that exist are known here, not to the job's settings
            rank = getattr(settings, name)
            if rank is not None and rank >= args.nproc:
                option = f"--{name.replace('_', '-')}"
                raise ValueError(
                    f"{option} {rank} is not a rank of --nproc {args.nproc} (worker ranks 1..{args.nproc - 1})"
                )
    except ValueError as error:
        print(f"{JOB_PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE

    def started(pids: list[int]) -> None:
        for rank, pid in enumerate(pids):
            print(f"rank {rank} pid {pid}", file=sys.stderr, flush=True)

    previous = {signum: signal.signal(signum, _stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        run = launch.launch(
            job,
            nproc=args.nproc,
            timeout_s=args.timeout,
            on_start=started,
            on_record=lambda record: print(json.dumps(record), flush=True),
        )
    except TimeoutError as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 124
    except KeyboardInterrupt as interrupt:
        print("interrupted: every process of the job was stopped and its temp folder removed", file=sys.stderr)
        return 143 if interrupt.args[:1] == (signal.SIGTERM,) else 130
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(run.stderr, file=sys.stderr)
    print(f"exit codes by rank: {run.returncodes}", file=sys.stderr)
    status = run.returncodes[0]
    return 128 - status if status < 0 else status  # killed by signal s: 128 + s, as a shell reports it
