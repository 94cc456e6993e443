"""Choosing GCC's default decoder smoothing on a suite split into a tuning half and a held-out half.

The two halves share no workload and no seed; the unseen third split shares neither with them (its tanh MLP and
digits MLP run at other noise levels and seeds):

- ``--split tuning`` (seeds 0 and 1): the tanh MLP of ``benchmarks/lambda_rule.py`` (20 -> 64 -> 10, float64) with
  exact results (``tanh``) and with Gaussian noise of absolute standard deviation 1e-3 / 1e-2 on every worker's
  result (``tanh_noise1e-3``, ``tanh_noise1e-2``); the same MLP with ReLU / GELU (``relu``, ``gelu``); a 20 -> 256
  -> 10 tanh MLP (``tanh_wide``); the digits LeNet5 and ViT of the experiments (trained once and cached,
  :func:`torchgcc.app.model_cache.load_or_train`), float32, and both again with bfloat16 workers
  (:class:`torchgcc.noise.LowPrecisionWorkers`, measured against the float32 model);
- ``--split held-out`` (seeds 4 and 5): MLPs 20 -> 64 -> 10 with ``sin(2 x)`` (``sin``), softplus (``softplus``),
  ``|x|`` (``abs``), ELU (``elu``) activations, a two-hidden-layer tanh MLP (``deep_tanh``), SiLU with noise 3e-3
  (``silu_noise3e-3``), softplus with noise 3e-2 (``softplus_noise3e-2``), softsign with noise 1e-3
  (``softsign_noise1e-3``), and the digits MLP classifier (``mlp``), LeNet5 and ViT trained under the held-out seeds
  with noise 1e-2 on their logits (``lenet5_noise1e-2``, ``vit_noise1e-2``);
- ``--split unseen`` (seeds 6 and 7, never run before), added after the default rule was chosen and not looked at
  while choosing it, to check that the held-out verdict did not come from designing against the held-out half: MLPs
  20 -> 64 -> 10 with Mish (``mish``), hardtanh (``hardtanh``, kinks at +-1), sigmoid with noise 1e-2
  (``sigmoid_noise1e-2``), a three-hidden-layer GELU MLP (``deep_gelu``), the tanh MLP with noise 1e-1
  (``tanh_noise1e-1``), the digits MLP classifier with noise 1e-2 on its logits (``mlp_noise1e-2``) and the ViT with
  noise 3e-3 (``vit_noise3e-3``);
- ``--split fresh`` (seeds 8 and 9), added after the validated calibration (``CodedModule.calibrate``, measured on
  every split by ``benchmarks/lambda_derived_rules.py``) was designed on the three splits above and fixed, and not
  looked at before: MLPs 20 -> 64 -> 10 with leaky ReLU (slope 0.1: ``leaky_relu``), SELU with noise 1e-2
  (``selu_noise1e-2``), tanhshrink (``tanhshrink``), a 20 -> 32 -> 10 CELU MLP with noise 3e-3
  (``celu_narrow_noise3e-3``), a two-hidden-layer softplus MLP (``deep_softplus``), and LeNet5 and the ViT trained
  under these seeds with noise 3e-3 and 3e-2 on their logits (``lenet5_noise3e-3``, ``vit_noise3e-2``);
- ``--split fresh2`` (seeds 10 and 11), added after the fresh split's verdict, with nothing changed in between, for
  a second measurement on data the validated calibration never saw: MLPs 20 -> 64 -> 10 with hardswish
  (``hardswish``), log-sigmoid (``logsigmoid``), a 20 -> 256 -> 10 softsign MLP with noise 3e-2
  (``softsign_wide_noise3e-2``), a two-hidden-layer ReLU6 MLP with noise 1e-3 (``deep_relu6_noise1e-3``), a
  20 -> 16 -> 10 GELU MLP (``gelu_narrow``), the digits MLP classifier with noise 3e-2 (``mlp_noise3e-2``) and the ViT
  with bfloat16 workers and noise 1e-2 (``vit_bf16_noise1e-2``);
- ``--split fresh3`` (seeds 12 and 13), added after the fresh2 split's verdict, with nothing changed in the rules
  since the validated calibration was fixed, for a third measurement on data it never saw: MLPs 20 -> 64 -> 10 with
  softshrink (``softshrink``), hardsigmoid with noise 1e-2 (``hardsigmoid_noise1e-2``), ELU with noise 1e-1
  (``elu_noise1e-1``), a 20 -> 256 -> 10 SiLU MLP (``silu_wide``), a three-hidden-layer Mish MLP with noise 3e-3
  (``deep_mish_noise3e-3``), the digits MLP classifier with bfloat16 workers (``mlp_bf16``), LeNet5 with bfloat16
  workers and noise 3e-2 (``lenet5_bf16_noise3e-2``) and the ViT with noise 1e-3 (``vit_noise1e-3``);
- ``--split fresh4`` (seeds 14 and 15), added after the validated calibration was changed on the evidence of all six
  splits above (its one-standard-error guard dropped: the least mean share is taken) and a ``CodedModule``'s first
  forward made to validate, both fixed before this split first ran: MLPs 20 -> 64 -> 10 with PReLU (initial slope
  0.25) and noise 1e-2 (``prelu_noise1e-2``), a three-hidden-layer SiLU MLP (``deep_silu``), a 20 -> 256 -> 10
  ``sin(2 x)`` MLP with noise 3e-3 (``sin_wide_noise3e-3``), GELU's tanh approximation with noise 3e-2
  (``gelu_tanh_noise3e-2``), a 20 -> 32 -> 10 ReLU6 MLP (``relu6_narrow``), hardshrink (``hardshrink``, jumps at
  +-0.5), LeNet5 with noise 1e-1 (``lenet5_noise1e-1``) and the ViT with bfloat16 workers and noise 3e-3
  (``vit_bf16_noise3e-3``);
- ``--split fresh5`` (seeds 16 and 17), added after the validated calibration came to decode each calibration group
  under drawn straggler sets with a one-standard-error rule toward interpolation, both fixed before this split first
  ran: a 20 -> 256 -> 10 softplus MLP with noise 1e-2 (``softplus_wide_noise1e-2``), a two-hidden-layer ELU MLP with
  noise 3e-2 (``deep_elu_noise3e-2``), a 20 -> 16 -> 10 tanh MLP (``tanh_narrow``), a 20 -> 256 -> 10 SELU MLP with
  noise 1e-3 (``selu_wide_noise1e-3``), a three-hidden-layer sigmoid MLP (``deep_sigmoid``), LeNet5 with noise 3e-2
  (``lenet5_noise3e-2``), the digits MLP classifier with noise 1e-1 (``mlp_noise1e-1``) and the ViT with bfloat16
  workers and noise 3e-2 (``vit_bf16_noise3e-2``).

Settings (K, N): every workload at (4, 8) and (8, 16) with S = 0, 1, ..., N - K stragglers, and at its large
setting, (10, 40) for the MLPs and (8, 32) for the classifiers, with S in {0, N/8, N/4, N/2}. A cell is one
(workload, seed, K, N, S). Stragglers are placed at random (:class:`~torchgcc.stragglers.FixedStragglers`, the same
masks for every rule and workload: seed ``10^6 seed + 1000 N + S``, ``+ 500`` for the calibration batch); the noise is
seeded by ``10^6 seed + 1000 N + K`` (``+ 1`` for BACC's results); the seed also seeds the MLP weights and inputs
and the classifiers' training.

Rules: ``natural`` (lambda_dec = 0), ``spacing``, ``gcv`` (per group, every call), the library's ``default``
(``GCC(K, N)``), the practitioner's alternative BACC (Berrut encoder and decoder, its own coded inputs and worker
results, the same masks), and the candidate pooled rules the default was chosen from, each a bandwidth ratio from the
GCV scores of the same calibration batch: ``pooled`` (the pooled GCV minimiser), ``previous`` (the former default:
one candidate below that minimiser, scoring groups of at least five results, the spacing ratio without any),
``one_se`` (the smallest ratio whose pooled score is within one standard error of the minimum) and ``halved`` (the
minimiser halved, the gap correction for exact results alone); the default implements
:mod:`torchgcc.functional.decoder_smoothing` (the minimiser divided by ``2^(1 - rho)``). The default
calibrates on the first batch it decodes; as a user would, each cell builds a FRESH default code, lets it calibrate on
a held-out first batch (the first ``--calibration-groups`` groups, under their own masks) and measures it, like every
other rule, on the remaining groups only.

Per cell: each rule's MSE against the uncoded (float32 / float64) model outputs and its ratio to the best of
natural / spacing / GCV. The criterion for the default: ratio <= 1.10 in every cell, and never worse than BACC in a
cell where natural-spline GCC is not. Writes JSON (settings, seeds, load average, threads, wall time, one row per
cell, every rule's worst ratio, the failing cells), progress on stderr:

    python benchmarks/lambda_suite.py --split tuning      # ./torchgcc-results/lambda_suite/tuning.json
    python benchmarks/lambda_suite.py --split held-out    # ./torchgcc-results/lambda_suite/held-out.json
    python benchmarks/lambda_suite.py --split unseen      # ./torchgcc-results/lambda_suite/unseen.json
    python benchmarks/lambda_suite.py --split fresh       # ./torchgcc-results/lambda_suite/fresh.json
    python benchmarks/lambda_suite.py --split fresh2      # ./torchgcc-results/lambda_suite/fresh2.json
    python benchmarks/lambda_suite.py --split fresh3      # ./torchgcc-results/lambda_suite/fresh3.json
    python benchmarks/lambda_suite.py --split fresh4      # ./torchgcc-results/lambda_suite/fresh4.json
    python benchmarks/lambda_suite.py --split fresh5      # ./torchgcc-results/lambda_suite/fresh5.json
    python benchmarks/lambda_suite.py --quick             # seconds: 400 MLP inputs, one mask per group, one seed
    python benchmarks/lambda_suite.py --split held-out --calibration-groups 1 --out held-out-pool1.json  # a first
                                                          # batch of one group (the default pools 16 when it can)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

import torchgcc
import torchgcc.codes.gcc
from torchgcc.app.data import load_dataset
from torchgcc.app.evaluate import model_outputs
from torchgcc.app.model_cache import load_or_train
from torchgcc.coded_module import group_samples
from torchgcc.codes.gcc import BANDWIDTH_RATIO, GCV_POOL, GCV_RATIOS, SplineDecoder, pooled_groups, spacing_lambda
from torchgcc.functional.decoder_smoothing import informative_groups
from torchgcc.functional.gcv import gcv_scores
from torchgcc.noise import LowPrecisionWorkers
from torchgcc.stragglers import FixedStragglers

#: GCC's decoder rules (``lambda_dec``) measured as the library builds them; every GCC rule shares the natural encoder.
RULES = {"natural": 0.0, "spacing": "spacing", "gcv": "gcv", "default": "adaptive"}
#: The rules the default is measured against.
BASELINES = ("natural", "spacing", "gcv")
#: The candidate pooled rules (each a bandwidth ratio from the pooled GCV scores of the calibration batch).
CANDIDATES = ("pooled", "previous", "one_se", "halved")
#: The default may be at most this much worse than the best baseline in a cell.
TOLERANCE = 1.10
#: Each model family's large (K, N); every workload also runs at these small settings, S = 0 .. N - K.
LARGE = {"mlp": (10, 40), "digits": (8, 32)}
SMALL = ((4, 8), (8, 16))


@dataclass(frozen=True)
class Workload:
    """What the workers run, the uncoded reference, the inputs ``(M, *in)``, the model family and the noise."""

    workers: Callable[[torch.Tensor], torch.Tensor]
    reference: Callable[[torch.Tensor], torch.Tensor]
    inputs: torch.Tensor
    family: str
    sigma: float = 0.0


def mlp(hidden: int, activation: torch.nn.Module, *, layers: int = 1) -> torch.nn.Module:
    """A 20 -> hidden (-> hidden ...) -> 10 float64 MLP with ``layers`` hidden layers (weights from torch's RNG)."""
    sizes = [20] + [hidden] * layers
    parts: list[torch.nn.Module] = []
    for width_in, width_out in zip(sizes, sizes[1:]):
        parts += [torch.nn.Linear(width_in, width_out), activation]
    return torch.nn.Sequential(*parts, torch.nn.Linear(hidden, 10)).double()


class Sin(torch.nn.Module):
    """``sin(2 x)``: an activation with more oscillation than tanh."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(2 * x)


class Abs(torch.nn.Module):
    """``|x|``: a kink at zero, like ReLU but symmetric."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs()


def _mlps(seed: int, samples: int) -> tuple[dict[str, torch.nn.Module], torch.Tensor]:
    """Every MLP of both halves (drawn in a fixed order from ``seed``) and the ``samples`` Gaussian inputs."""
    torch.manual_seed(seed)
    models = {
        "tanh": mlp(64, torch.nn.Tanh()),
        "relu": mlp(64, torch.nn.ReLU()),
        "gelu": mlp(64, torch.nn.GELU()),
        "tanh_wide": mlp(256, torch.nn.Tanh()),
        "sin": mlp(64, Sin()),
        "softplus": mlp(64, torch.nn.Softplus()),
        "abs": mlp(64, Abs()),
        "deep_tanh": mlp(64, torch.nn.Tanh(), layers=2),
        "silu": mlp(64, torch.nn.SiLU()),
        "elu": mlp(64, torch.nn.ELU()),
        "softsign": mlp(64, torch.nn.Softsign()),
        "mish": mlp(64, torch.nn.Mish()),
        "hardtanh": mlp(64, torch.nn.Hardtanh()),
        "sigmoid": mlp(64, torch.nn.Sigmoid()),
        "deep_gelu": mlp(64, torch.nn.GELU(), layers=3),
        "leaky_relu": mlp(64, torch.nn.LeakyReLU(0.1)),
        "selu": mlp(64, torch.nn.SELU()),
        "tanhshrink": mlp(64, torch.nn.Tanhshrink()),
        "celu_narrow": mlp(32, torch.nn.CELU()),
        "deep_softplus": mlp(64, torch.nn.Softplus(), layers=2),
        "hardswish": mlp(64, torch.nn.Hardswish()),
        "softsign_wide": mlp(256, torch.nn.Softsign()),
        "logsigmoid": mlp(64, torch.nn.LogSigmoid()),
        "deep_relu6": mlp(64, torch.nn.ReLU6(), layers=2),
        "gelu_narrow": mlp(16, torch.nn.GELU()),
        "softshrink": mlp(64, torch.nn.Softshrink(0.5)),
        "hardsigmoid": mlp(64, torch.nn.Hardsigmoid()),
        "silu_wide": mlp(256, torch.nn.SiLU()),
        "deep_mish": mlp(64, torch.nn.Mish(), layers=3),
        "prelu": mlp(64, torch.nn.PReLU()),
        "deep_silu": mlp(64, torch.nn.SiLU(), layers=3),
        "sin_wide": mlp(256, Sin()),
        "gelu_tanh": mlp(64, torch.nn.GELU(approximate="tanh")),
        "relu6_narrow": mlp(32, torch.nn.ReLU6()),
        "hardshrink": mlp(64, torch.nn.Hardshrink(0.5)),
        "softplus_wide": mlp(256, torch.nn.Softplus()),
        "deep_elu": mlp(64, torch.nn.ELU(), layers=2),
        "tanh_narrow": mlp(16, torch.nn.Tanh()),
        "selu_wide": mlp(256, torch.nn.SELU()),
        "deep_sigmoid": mlp(64, torch.nn.Sigmoid(), layers=3),
    }
    x = torch.randn(samples, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return models, x


#: Every workload: ``name -> (MLP name or digits model, noise sigma, bfloat16 workers)``.
WORKLOADS = {
    "tanh": ("tanh", 0.0, False),
    "tanh_noise1e-3": ("tanh", 1e-3, False),
    "tanh_noise1e-2": ("tanh", 1e-2, False),
    "relu": ("relu", 0.0, False),
    "gelu": ("gelu", 0.0, False),
    "tanh_wide": ("tanh_wide", 0.0, False),
    "lenet5": ("digits:lenet5", 0.0, False),
    "lenet5_bf16": ("digits:lenet5", 0.0, True),
    "vit": ("digits:vit", 0.0, False),
    "vit_bf16": ("digits:vit", 0.0, True),
    "sin": ("sin", 0.0, False),
    "softplus": ("softplus", 0.0, False),
    "abs": ("abs", 0.0, False),
    "deep_tanh": ("deep_tanh", 0.0, False),
    "silu_noise3e-3": ("silu", 3e-3, False),
    "softplus_noise3e-2": ("softplus", 3e-2, False),
    "elu": ("elu", 0.0, False),
    "softsign_noise1e-3": ("softsign", 1e-3, False),
    "mlp": ("digits:mlp", 0.0, False),
    "lenet5_noise1e-2": ("digits:lenet5", 1e-2, False),
    "vit_noise1e-2": ("digits:vit", 1e-2, False),
    "mish": ("mish", 0.0, False),
    "hardtanh": ("hardtanh", 0.0, False),
    "sigmoid_noise1e-2": ("sigmoid", 1e-2, False),
    "deep_gelu": ("deep_gelu", 0.0, False),
    "tanh_noise1e-1": ("tanh", 1e-1, False),
    "mlp_noise1e-2": ("digits:mlp", 1e-2, False),
    "vit_noise3e-3": ("digits:vit", 3e-3, False),
    "leaky_relu": ("leaky_relu", 0.0, False),
    "selu_noise1e-2": ("selu", 1e-2, False),
    "tanhshrink": ("tanhshrink", 0.0, False),
    "celu_narrow_noise3e-3": ("celu_narrow", 3e-3, False),
    "deep_softplus": ("deep_softplus", 0.0, False),
    "lenet5_noise3e-3": ("digits:lenet5", 3e-3, False),
    "vit_noise3e-2": ("digits:vit", 3e-2, False),
    "hardswish": ("hardswish", 0.0, False),
    "softsign_wide_noise3e-2": ("softsign_wide", 3e-2, False),
    "logsigmoid": ("logsigmoid", 0.0, False),
    "deep_relu6_noise1e-3": ("deep_relu6", 1e-3, False),
    "gelu_narrow": ("gelu_narrow", 0.0, False),
    "mlp_noise3e-2": ("digits:mlp", 3e-2, False),
    "vit_bf16_noise1e-2": ("digits:vit", 1e-2, True),
    "softshrink": ("softshrink", 0.0, False),
    "hardsigmoid_noise1e-2": ("hardsigmoid", 1e-2, False),
    "silu_wide": ("silu_wide", 0.0, False),
    "elu_noise1e-1": ("elu", 1e-1, False),
    "deep_mish_noise3e-3": ("deep_mish", 3e-3, False),
    "mlp_bf16": ("digits:mlp", 0.0, True),
    "lenet5_bf16_noise3e-2": ("digits:lenet5", 3e-2, True),
    "vit_noise1e-3": ("digits:vit", 1e-3, False),
    "prelu_noise1e-2": ("prelu", 1e-2, False),
    "deep_silu": ("deep_silu", 0.0, False),
    "sin_wide_noise3e-3": ("sin_wide", 3e-3, False),
    "gelu_tanh_noise3e-2": ("gelu_tanh", 3e-2, False),
    "relu6_narrow": ("relu6_narrow", 0.0, False),
    "hardshrink": ("hardshrink", 0.0, False),
    "lenet5_noise1e-1": ("digits:lenet5", 1e-1, False),
    "vit_bf16_noise3e-3": ("digits:vit", 3e-3, True),
    "softplus_wide_noise1e-2": ("softplus_wide", 1e-2, False),
    "deep_elu_noise3e-2": ("deep_elu", 3e-2, False),
    "tanh_narrow": ("tanh_narrow", 0.0, False),
    "selu_wide_noise1e-3": ("selu_wide", 1e-3, False),
    "deep_sigmoid": ("deep_sigmoid", 0.0, False),
    "lenet5_noise3e-2": ("digits:lenet5", 3e-2, False),
    "mlp_noise1e-1": ("digits:mlp", 1e-1, False),
    "vit_bf16_noise3e-2": ("digits:vit", 3e-2, True),
}

#: The two halves: their workloads and seeds (disjoint).
SPLITS = {
    "tuning": (
        ("tanh", "tanh_noise1e-3", "tanh_noise1e-2", "relu", "gelu", "tanh_wide")
        + ("lenet5", "lenet5_bf16", "vit", "vit_bf16"),
        (0, 1),
    ),
    "held-out": (
        ("sin", "softplus", "abs", "elu", "deep_tanh", "silu_noise3e-3", "softplus_noise3e-2", "softsign_noise1e-3")
        + ("mlp", "lenet5_noise1e-2", "vit_noise1e-2"),
        (4, 5),
    ),
    "unseen": (
        ("mish", "hardtanh", "sigmoid_noise1e-2", "deep_gelu", "tanh_noise1e-1", "mlp_noise1e-2", "vit_noise3e-3"),
        (6, 7),
    ),
    "fresh": (
        ("leaky_relu", "selu_noise1e-2", "tanhshrink", "celu_narrow_noise3e-3", "deep_softplus")
        + ("lenet5_noise3e-3", "vit_noise3e-2"),
        (8, 9),
    ),
    "fresh2": (
        ("hardswish", "softsign_wide_noise3e-2", "logsigmoid", "deep_relu6_noise1e-3", "gelu_narrow")
        + ("mlp_noise3e-2", "vit_bf16_noise1e-2"),
        (10, 11),
    ),
    "fresh3": (
        ("softshrink", "hardsigmoid_noise1e-2", "silu_wide", "elu_noise1e-1", "deep_mish_noise3e-3")
        + ("mlp_bf16", "lenet5_bf16_noise3e-2", "vit_noise1e-3"),
        (12, 13),
    ),
    "fresh4": (
        ("prelu_noise1e-2", "deep_silu", "sin_wide_noise3e-3", "gelu_tanh_noise3e-2", "relu6_narrow", "hardshrink")
        + ("lenet5_noise1e-1", "vit_bf16_noise3e-3"),
        (14, 15),
    ),
    "fresh5": (
        ("softplus_wide_noise1e-2", "deep_elu_noise3e-2", "tanh_narrow", "selu_wide_noise1e-3", "deep_sigmoid")
        + ("lenet5_noise3e-2", "mlp_noise1e-1", "vit_bf16_noise3e-2"),
        (16, 17),
    ),
}


def workloads(names: tuple[str, ...], seed: int, samples: int, digits_samples: int) -> dict[str, Workload]:
    """The workloads ``names`` of ``seed``: ``samples`` MLP inputs, the first ``digits_samples`` digits test images."""
    models, x = _mlps(seed, samples)
    split = images = None
    suite = {}
    for name in names:
        model_name, sigma, bf16 = WORKLOADS[name]
        if model_name.startswith("digits:"):
            if split is None:
                split = load_dataset("digits", seed=seed)
                images = split.test_x[:digits_samples]
            model = load_or_train(model_name.split(":")[1], split, seed=seed, progress=False).model
            workers = LowPrecisionWorkers(model, torch.bfloat16) if bf16 else model
            suite[name] = Workload(workers, model, images, "digits", sigma)
        else:
            suite[name] = Workload(models[model_name], models[model_name], x, "mlp", sigma)
    return suite


def settings(family: str) -> list[tuple[int, int, list[int]]]:
    """``(K, N, S values)`` of a model family."""
    small = [(k, n, list(range(n - k + 1))) for k, n in SMALL]
    k, n = LARGE[family]
    return small + [(k, n, [0, n // 8, n // 4, n // 2])]


def worker_results(code: torch.nn.Module, workload: Workload, groups: torch.Tensor, noise_seed: int) -> torch.Tensor:
    """``(B, N, *out)``: the workers' outputs on ``code``'s coded inputs, plus the workload's seeded noise."""
    coded = code.encoder(groups)
    results = model_outputs(workload.workers, coded.flatten(0, 1)).unflatten(0, coded.shape[:2])
    noise = torch.randn(results.shape, generator=torch.Generator().manual_seed(noise_seed), dtype=results.dtype)
    return results + workload.sigma * noise


def noise_seed(seed: int, n: int, k: int) -> int:
    """The seed of a setting's noise on GCC's worker results (BACC's: this plus 1)."""
    return seed * 1_000_000 + n * 1000 + k


def gcc_results(workload: Workload, seed: int, k: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A setting's GCC worker results ``(groups, N, *out)`` (natural-spline encoder, the workload's seeded noise) and
    the reference model's outputs ``(groups, K, *out)``: what every GCC rule of its cells decodes and is measured
    against."""
    groups = group_samples(workload.inputs, k)
    results = worker_results(torchgcc.GCC(k, n, lambda_dec=0.0), workload, groups, noise_seed(seed, n, k))
    return results, group_samples(model_outputs(workload.reference, workload.inputs), k)


def rebuilt_cells(paths: list[Path], args, keep: Callable[[dict], bool]):
    """``(path, record, workload)`` for every cell of the suite JSONs ``paths`` that ``keep(record)`` keeps, the
    workloads built as the suite built them; sets ``args.repeats`` and ``args.calibration_groups`` from each suite's
    config before its cells (what :func:`cell_masks` and :func:`measured` read)."""
    for path in paths:
        suite = json.loads(path.read_text())
        config = suite["config"]
        args.repeats, args.calibration_groups = config["repeats"], config["calibration_groups"]
        cells = [record for record in suite["records"] if keep(record)]
        for seed in sorted({record["seed"] for record in cells}):
            names = tuple(dict.fromkeys(record["workload"] for record in cells if record["seed"] == seed))
            built = workloads(names, seed, config["samples"], config["digits_samples"])
            for record in (record for record in cells if record["seed"] == seed):
                yield path, record, built[record["workload"]]


def mse(estimate: torch.Tensor, truth: torch.Tensor) -> float:
    return torch.mean((estimate.double() - truth.double()) ** 2).item()


def pooled_system(
    decoder: SplineDecoder, results: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a score of the candidates :data:`GCV_RATIOS` reads, for the groups the default pools (evenly spaced, at
    most ``GCV_POOL`` and about 1024 results): the survivors' knots ``(G, W)``, their counts ``(G,)``, their results
    compacted in knot order ``(G, W, d)`` float64 and the candidates ``mu = n lam`` ``(G, L)``."""
    pooled = min(len(mask), pooled_groups(decoder.num_workers))
    index = torch.linspace(0, len(mask) - 1, pooled).round().long()
    survivors = decoder.survivors(mask[index])
    flat = results[index].reshape(pooled, decoder.num_workers, -1).double()
    width = min(decoder.num_workers, survivors.order.shape[-1])
    order = survivors.order[:, :width].clamp(max=decoder.num_workers - 1)
    compacted = flat.gather(1, order.unsqueeze(-1).expand(-1, -1, flat.shape[-1]))
    ratios = torch.tensor(GCV_RATIOS, dtype=torch.float64)
    mu = survivors.counts.unsqueeze(-1) * spacing_lambda(survivors.counts.unsqueeze(-1), ratios)
    return survivors.knots[:, :width], survivors.counts, compacted, mu


def pooled_scores(
    decoder: SplineDecoder, results: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """GCV scores ``(G, L)`` of the candidates :data:`GCV_RATIOS` for the groups the default pools
    (:func:`pooled_system`), and their result counts ``(G,)``."""
    knots, counts, compacted, mu = pooled_system(decoder, results, mask)
    return gcv_scores(knots, counts, compacted, mu), counts


def candidate_ratios(scores: torch.Tensor, counts: torch.Tensor) -> dict[str, float]:
    """The bandwidth ratio of every rule of :data:`CANDIDATES` from pooled scores ``(G, L)`` and counts ``(G,)``."""
    ratios = list(GCV_RATIOS)
    informative = informative_groups(scores)
    if not informative.any():
        return {"pooled": 0.0, "previous": BANDWIDTH_RATIO, "one_se": 0.0, "halved": 0.0}
    kept = scores[informative]
    mean = kept.mean(dim=0)
    best = int(mean.argmin())
    standard_error = float(kept[:, best].std()) / math.sqrt(len(kept)) if len(kept) > 1 else math.inf
    within = (mean <= mean[best] + standard_error).nonzero().flatten()
    five = scores[counts >= 5]
    previous = max(int(five.mean(dim=0).argmin()) - 1, 0) if len(five) else None
    return {
        "pooled": ratios[best],
        "previous": BANDWIDTH_RATIO if previous is None else ratios[previous],
        "one_se": ratios[int(within[0])],
        "halved": ratios[best] / 2,
    }


def cell_masks(seed: int, n: int, s: int, groups: int, args) -> tuple[torch.Tensor, torch.Tensor]:
    """A cell's seeded ``(N,)``-wide masks of ``s`` stragglers: ``(calibration_groups, N)`` for the groups the rules
    calibrate on, and ``((groups - calibration_groups) * repeats, N)`` for the measured ones (:func:`measured`)."""
    mask_seed = seed * 1_000_000 + n * 1000 + s
    held = args.calibration_groups
    calibration = FixedStragglers(s, seed=mask_seed + 500).sample(held, n)
    return calibration, FixedStragglers(s, seed=mask_seed).sample((groups - held) * args.repeats, n)


def measured(t: torch.Tensor, args) -> torch.Tensor:
    """The measured groups of ``t`` ``(groups, ...)``: all but the first ``calibration_groups``, ``repeats`` times."""
    return t[args.calibration_groups :].repeat(args.repeats, *([1] * (t.ndim - 1)))


def measure_cell(
    k: int, n: int, s: int, gcc: torch.Tensor, bacc: torch.Tensor, truth: torch.Tensor, seed: int, args
) -> dict:
    """One cell: every rule's MSE on the measured groups (all but the first ``calibration_groups``) under the same
    seeded masks, the default and the candidates calibrated first on the held-out groups under their own masks."""
    held = args.calibration_groups
    calibration_masks, masks = cell_masks(seed, n, s, len(gcc), args)
    ys, ys_bacc, target = (measured(t, args) for t in (gcc, bacc, truth))
    errors, chosen = {}, None
    for rule, lam in RULES.items():
        decoder = torchgcc.GCC(k, n, lambda_dec=lam).decoder  # fresh: the default calibrates on this cell's data
        if rule == "default":
            decoder(gcc[:held], calibration_masks)
            chosen = decoder.ratio.item()
        errors[rule] = mse(decoder(ys, masks), target)
    errors["bacc"] = mse(torchgcc.BACC(k, n).decoder(ys_bacc, masks), target)
    plain = torchgcc.GCC(k, n, lambda_dec=0.0).decoder
    ratios = candidate_ratios(*pooled_scores(plain, gcc[:held], calibration_masks))
    for rule, ratio in ratios.items():
        decoder = SplineDecoder(plain.alpha, plain.beta, lam=None, bandwidth_ratio=ratio, min_arrived=2)
        errors[rule] = mse(decoder(ys, masks), target)
    best = min(errors[rule] for rule in BASELINES)
    ratio_to_best = {rule: value / best for rule, value in errors.items()}
    within = ratio_to_best["default"] <= TOLERANCE
    not_worse_than_bacc = errors["default"] <= errors["bacc"] or errors["natural"] > errors["bacc"]
    return {
        "K": k,
        "N": n,
        "S": s,
        "mse": errors,
        "ratio_to_best": ratio_to_best,
        "best": min(BASELINES, key=errors.__getitem__),
        "default_ratio_chosen": chosen,
        "candidate_ratios": ratios,
        "within_tolerance": within,
        "not_worse_than_bacc": not_worse_than_bacc,
        "passes": within and not_worse_than_bacc,
    }


def summarise(rows: list[dict]) -> dict:
    """Every rule's worst ratio (and where), the cells above the tolerance per rule, the default's failing cells."""
    rules = list(rows[0]["ratio_to_best"])
    worst = {}
    for rule in rules:
        row = max(rows, key=lambda r: r["ratio_to_best"][rule])
        cell = [row["workload"], row["seed"], row["K"], row["N"], row["S"]]
        worst[rule] = {"ratio": row["ratio_to_best"][rule], "cell": cell}
    failing = [
        {
            "workload": r["workload"],
            "seed": r["seed"],
            "K": r["K"],
            "N": r["N"],
            "S": r["S"],
            "default_ratio_to_best": r["ratio_to_best"]["default"],
            "why": ", ".join(
                reason
                for reason, failed in (
                    (f"above {TOLERANCE}", not r["within_tolerance"]),
                    ("worse than BACC where natural is not", not r["not_worse_than_bacc"]),
                )
                if failed
            ),
        }
        for r in rows
        if not r["passes"]
    ]

    def fails(rule: str) -> int:
        return sum(
            r["ratio_to_best"][rule] > TOLERANCE
            or (r["mse"][rule] > r["mse"]["bacc"] and r["mse"]["natural"] <= r["mse"]["bacc"])
            for r in rows
        )

    above = {rule: sum(r["ratio_to_best"][rule] > TOLERANCE for r in rows) for rule in rules}
    criterion = {rule: fails(rule) for rule in rules if rule != "bacc"}
    return {
        "cells": len(rows),
        "worst": worst,
        "cells_above_tolerance": above,
        "cells_failing": criterion,
        "failing": failing,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=sorted(SPLITS), default="tuning", help="which half of the suite")
    parser.add_argument("--samples", type=int, default=2400, help="MLP inputs (groups: samples / K)")
    parser.add_argument("--digits-samples", type=int, default=359, help="digits test images used (at most 359)")
    parser.add_argument("--repeats", type=int, default=8, help="masks per measured group")
    parser.add_argument("--calibration-groups", type=int, default=16, help="held-out first batch the default sees")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--quick", action="store_true", help="seconds: 400 MLP inputs, 1 mask per group, one seed")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON (default ./torchgcc-results/lambda_suite/SPLIT.json)"
    )
    args = parser.parse_args(argv)
    names, seeds = SPLITS[args.split]
    if args.quick:
        args.samples, args.repeats, seeds = 400, 1, seeds[:1]
    args.out = args.out or Path("torchgcc-results/lambda_suite") / f"{args.split}.json"
    torch.set_num_threads(args.threads)
    load_before, start = os.getloadavg(), time.perf_counter()

    rows = []
    for seed in seeds:
        for name, workload in workloads(names, seed, args.samples, args.digits_samples).items():
            for k, n, stragglers in settings(workload.family):
                groups = group_samples(workload.inputs, k)
                if len(groups) <= args.calibration_groups:
                    raise SystemExit(f"{name}: {len(groups)} groups at K = {k}; need more than --calibration-groups")
                with torch.no_grad():
                    gcc, truth = gcc_results(workload, seed, k, n)
                    bacc = worker_results(torchgcc.BACC(k, n), workload, groups, noise_seed(seed, n, k) + 1)
                    for s in stragglers:
                        cell = measure_cell(k, n, s, gcc, bacc, truth, seed, args)
                        row = {"workload": name, "seed": seed, "sigma": workload.sigma, **cell}
                        rows.append(row)
                        ratios = " ".join(f"{rule}={value:.2f}" for rule, value in row["ratio_to_best"].items())
                        mark = "" if row["passes"] else "  FAIL"
                        print(
                            f"{name:18s} {seed} K={k:2d} N={n:2d} S={s:2d} {ratios}{mark}", file=sys.stderr, flush=True
                        )

    summary = summarise(rows)
    wall = time.perf_counter() - start
    for rule, worst in summary["worst"].items():
        print(f"{rule}: worst ratio {worst['ratio']:.3f} at {worst['cell']}", file=sys.stderr)
    print(f"default failing cells: {len(summary['failing'])} of {len(rows)} ({wall:.0f} s)", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    config = {**vars(args), "out": str(args.out), "workloads": list(names), "seeds": list(seeds)}
    config |= {"rules": {k: str(v) for k, v in RULES.items()}, "candidates": list(CANDIDATES)}
    config |= {"baselines": list(BASELINES), "tolerance": TOLERANCE, "large": LARGE, "small": SMALL}
    config |= {"default_pool": GCV_POOL, "default_candidates": list(GCV_RATIOS)}
    run = {"wall_s": wall, "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())}
    run |= {"threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "torch": torch.__version__}
    payload = {"config": config, "run": run, "summary": summary, "records": rows}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
