"""The Fig. 2 experiment: coded inference of a trained classifier as the number of stragglers S grows.

A classifier is trained on an image dataset (or loaded from the cache); its test set is split into groups of K
images, each group is coded into N worker inputs with GCC, natural-spline GCC and BACC, and S random workers per
group straggle. Every scheme decodes the same masks. The records give MSE against the uncoded logits and argmax
agreement with the uncoded model (RelAcc) with 95% CIs, per scheme and S.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import torch

import torchgcc
from torchgcc.app.data import load_dataset
from torchgcc.app.evaluate import evaluate_sweep
from torchgcc.app.model_cache import load_or_train
from torchgcc.stragglers import FixedStragglers

__all__ = ["SCHEMES", "StragglerSweep", "run_straggler_sweep"]

#: Schemes compared, in table order.
SCHEMES: tuple[str, ...] = ("gcc", "natural", "bacc")


@dataclass(frozen=True)
class StragglerSweep:
    """Settings of one sweep over S at fixed ``(num_inputs, num_workers)`` = ``(K, N)``.

    ``gcc`` holds keyword arguments for the ``"gcc"`` code only (``lambda_enc`` / ``lambda_dec``; empty = library
    defaults). ``repeats`` masks are drawn per group and S.
    """

    model: str = "lenet5"
    data: str = "digits"
    num_inputs: int = 8
    num_workers: int = 32
    stragglers: tuple[int, ...] = (0, 4, 8, 12, 16)
    repeats: int = 10
    placement: str = "random"
    seed: int = 0
    gcc: Mapping[str, Any] = field(default_factory=dict)
    data_dir: str | None = None
    download: bool = False


def run_straggler_sweep(sweep: StragglerSweep, *, progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train (or load) the classifier and sweep S. Returns the records and a config dict for ``results.json``."""
    split = load_dataset(sweep.data, data_dir=sweep.data_dir, download=sweep.download, seed=sweep.seed)
    trained = load_or_train(sweep.model, split, seed=sweep.seed, progress=progress)
    codes = {
        scheme: torchgcc.make_code(
            scheme,
            num_inputs=sweep.num_inputs,
            num_workers=sweep.num_workers,
            **(dict(sweep.gcc) if scheme == "gcc" else {}),
        )
        for scheme in SCHEMES
    }
    settings = [
        ({"S": s}, FixedStragglers(num_stragglers=s, placement=sweep.placement, seed=1000 * sweep.seed + s))
        for s in sweep.stragglers
    ]
    records = evaluate_sweep(
        trained.model,
        split.test_x,
        codes=codes,
        settings=settings,
        repeats=sweep.repeats,
        progress=progress,
        desc=f"{sweep.model} on {sweep.data}",
    )
    config = {
        **asdict(sweep),
        "gcc_lambda_enc": codes["gcc"].lambda_enc,
        "gcc_lambda_dec": codes["gcc"].lambda_dec,
        "test_samples": len(split.test_y),
        "test_accuracy": trained.test_accuracy,
        "model_cache": str(trained.path),
        "model_from_cache": trained.from_cache,
        "torch": torch.__version__,
        "torchgcc": torchgcc.__version__,
    }
    return records, config
