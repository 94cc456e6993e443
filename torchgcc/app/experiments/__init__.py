"""The studies behind ``torchgcc reproduce``: one module per experiment, every one of the same shape.

An experiment module ``<name>_study.py`` defines

- ``Config``: a frozen dataclass of its settings (sizes, seeds, schemes), with ``DEFAULT`` (the published run) and
  ``QUICK`` (``--quick``: minutes at most on two CPU cores);
- ``add_arguments(parser)``: its own command-line options (the run options of
  :func:`torchgcc.app.options.add_run_arguments` are added for it);
- ``configure(args) -> Config``: the settings of parsed options (raising :class:`torchgcc.app.cli.UsageError`
  for values no run can use);
- ``run(config, *, progress) -> ExperimentResult``: the computation, returning records, the config dict and
  extra JSON entries (:class:`torchgcc.app.results.ExperimentResult`); it writes nothing;
- ``report(result, out, *, console) -> list[Path]``: prints the table, writes ``results.json``, ``results.csv``,
  ``table.md`` and the plots into ``out`` and returns the written paths.

:data:`EXPERIMENTS` lists them by their ``reproduce`` name; a module is imported only when its experiment runs.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXPERIMENTS", "load_experiment"]

#: ``reproduce`` name -> (module under ``torchgcc.app.experiments``, one-line summary), in ``--help`` order.
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "stragglers": (
        "straggler_study",
        "Fig. 2: MSE and argmax agreement (RelAcc) vs S for GCC, natural-spline GCC and BACC (LeNet5 or ViT)",
    ),
    "polynomial": ("polynomial_study", "Fig. 3: GCC vs LCC on a quadratic task as S crosses LCC's recovery threshold"),
    "rates": ("rates_study", "Fig. 4: log-log MSE vs N, worst-case and Bernoulli stragglers, with fitted slopes"),
    "noisy": ("noise_study", "noisy workers: MSE vs N and vs sigma for noise-aware, natural, GCV GCC and BACC"),
    "adversarial": ("adversarial_study", "adversarial workers: worst-case error vs N for q = N^a adversaries"),
    "manifold": ("manifold_study", "manifold-aware encoding ablated on the same groups, six workloads"),
    "training": ("training_study", "gradient coding: DGD, IS-SGD, GC, IS-GC, PGC trained under stragglers"),
    "sagc-trl": (
        "sagc_trl_study",
        "SAGC inside TRL's GRPOTrainer: static G vs adaptive G, dynamic sampling and a deadline, tiny model on CPU",
    ),
    "serving": (
        "serving_study",
        "coded serving under open-loop load: median/p99/p99.9 vs rate for uncoded, replication, hedging, codes",
    ),
    "adaptive-wait": (
        "adaptive_wait_study",
        "coded inference with an adaptive wait count N - S vs every fixed S as the latency tail changes",
    ),
}


def load_experiment(name: str) -> ModuleType:
    """The module of the experiment ``name`` (a key of :data:`EXPERIMENTS`)."""
    return importlib.import_module(f"torchgcc.app.experiments.{EXPERIMENTS[name][0]}")
