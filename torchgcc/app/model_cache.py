"""Train an image classifier once and cache its weights under the user cache directory.

The cache lives in ``$TORCHGCC_CACHE``, else ``$XDG_CACHE_HOME/torchgcc``, else ``~/.cache/torchgcc``; each file
is keyed by model, dataset, seed and training settings, so changing any of them retrains, and a missing file
retrains too. :func:`load_or_train` is the entry point.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from torchgcc.app.data import DataSplit
from torchgcc.app.evaluate import model_outputs
from torchgcc.app.models import build_model
from torchgcc.metrics import accuracy

__all__ = ["TrainConfig", "TrainedModel", "cache_dir", "default_train_config", "load_or_train", "train_classifier"]


@dataclass(frozen=True)
class TrainConfig:
    """AdamW training settings (cosine learning-rate decay over ``epochs``)."""

    epochs: int = 30
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 1e-4


#: Per-model defaults, tuned so that digits trains to >95% test accuracy in seconds (LeNet5) or tens of seconds (ViT).
_DEFAULT_CONFIGS: dict[str, TrainConfig] = {
    "lenet5": TrainConfig(epochs=30, lr=2e-3),
    "vit": TrainConfig(epochs=60, lr=1e-3, weight_decay=0.05),
}


def default_train_config(model_name: str) -> TrainConfig:
    """The training settings used for ``model_name`` unless the caller gives others."""
    return _DEFAULT_CONFIGS.get(model_name, TrainConfig())


@dataclass
class TrainedModel:
    """A trained classifier in eval mode with frozen weights, its test accuracy and where its weights live."""

    model: nn.Module
    test_accuracy: float
    path: Path
    from_cache: bool


def cache_dir() -> Path:
    """``$TORCHGCC_CACHE``, else ``$XDG_CACHE_HOME/torchgcc``, else ``~/.cache/torchgcc``."""
    if os.environ.get("TORCHGCC_CACHE"):
        return Path(os.environ["TORCHGCC_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "torchgcc"


def model_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    """:func:`torchgcc.metrics.accuracy` of ``model`` (put in eval mode) on ``images`` ``(M, C, H, W)`` against
    ``labels`` ``(M,)``."""
    return float(accuracy(model_outputs(model.eval(), images), labels))


def train_classifier(
    model: nn.Module, split: DataSplit, *, config: TrainConfig, seed: int = 0, progress: bool = True
) -> nn.Module:
    """Train ``model`` in place on ``split``'s training set with cross-entropy; returns it in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(split.train_dataset(), batch_size=config.batch_size, shuffle=True, generator=generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    bar = tqdm(range(config.epochs), desc=f"training on {split.name}", unit="epoch", disable=not progress, leave=False)
    for _ in bar:
        for images, labels in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            schedule.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return model.eval()


def _cache_path(model_name: str, split: DataSplit, seed: int, config: TrainConfig) -> Path:
    key = {
        "model": model_name,
        "data": split.name,
        "shape": list(split.train_x.shape[1:]),
        "classes": split.num_classes,
        "seed": seed,
        **asdict(config),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"{model_name}-{split.name}-seed{seed}-{digest}.pt"


def load_or_train(
    model_name: str,
    split: DataSplit,
    *,
    seed: int = 0,
    config: TrainConfig | None = None,
    progress: bool = True,
) -> TrainedModel:
    """Load the cached weights of ``model_name`` trained on ``split`` with ``seed``, or train and cache them.

    The model is initialised and trained under ``seed`` (the global RNG state is restored afterwards).
    """
    config = config or default_train_config(model_name)
    path = _cache_path(model_name, split, seed, config)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build_model(
            model_name, in_channels=split.in_channels, image_size=split.image_size, num_classes=split.num_classes
        )
        from_cache = path.exists()
        if from_cache:
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        else:
            train_classifier(model, split, config=config, seed=seed, progress=progress)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            torch.save(model.state_dict(), partial)
            partial.replace(path)
    model.eval().requires_grad_(False)
    return TrainedModel(
        model=model, test_accuracy=model_accuracy(model, split.test_x, split.test_y), path=path, from_cache=from_cache
    )
