"""Image classification data as standardised tensors with a fixed train/test split.

``digits`` (scikit-learn's bundled 8x8 handwritten digits) works offline and is the default everywhere.
``mnist``, ``cifar10`` and ``cifar100`` read torchvision datasets from ``data_dir`` (downloading them when
``download=True``), ``imagenet32`` its official numpy batches from ``data_dir``; they are for users with the data or
a network, never for tests.

>>> split = load_dataset("digits", seed=0)
>>> split.train_x.shape, split.test_x.shape
(torch.Size([1438, 1, 8, 8]), torch.Size([359, 1, 8, 8]))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.utils.data import TensorDataset

from torchgcc.app.cli import UsageError
from torchgcc.registry import Registry

__all__ = ["DATASETS", "DataSplit", "check_data_dir", "list_datasets", "load_dataset", "register_dataset"]


@dataclass(frozen=True)
class DataSplit:
    """Standardised images and integer labels.

    ``train_x``: ``(M_train, C, H, W)`` float32, ``train_y``: ``(M_train,)`` int64, likewise for ``test_*``.
    Every channel is standardised with the TRAIN mean and standard deviation.
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int

    @property
    def in_channels(self) -> int:
        return self.train_x.shape[1]

    @property
    def image_size(self) -> int:
        return self.train_x.shape[-1]

    def train_dataset(self) -> TensorDataset:
        """The training split as a ``TensorDataset`` of ``(image, label)`` pairs."""
        return TensorDataset(self.train_x, self.train_y)

    def test_dataset(self) -> TensorDataset:
        """The test split as a ``TensorDataset`` of ``(image, label)`` pairs."""
        return TensorDataset(self.test_x, self.test_y)


DatasetLoader = Callable[..., DataSplit]

#: Registered loaders: ``name -> loader(*, data_dir, download, seed) -> DataSplit``.
DATASETS: Registry[DatasetLoader] = Registry("dataset")

#: Decorator that adds a loader to :data:`DATASETS` under a name.
register_dataset = DATASETS.register


def list_datasets() -> list[str]:
    """Names accepted by :func:`load_dataset`."""
    return DATASETS.names()


def check_data_dir(name: str, data_dir: str | Path | None, download: bool) -> None:
    """Raise :class:`UsageError` (one line naming ``--data-dir`` and ``--download``) unless the torchvision dataset
    ``name`` can be read from, or downloaded to, ``data_dir``: before any work (it reads no data)."""
    if data_dir is None:
        raise UsageError(f"--data {name} needs --data-dir DIR (add --download to let torchvision fetch it there)")
    folder = Path(data_dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--data-dir {data_dir} is a file; name the folder that holds (or will hold) {name}")
    if not download and not folder.is_dir():
        raise UsageError(
            f"--data-dir {data_dir} does not exist; point it at the folder that holds {name}, or add --download "
            "to let torchvision fetch it there"
        )


def load_dataset(name: str, *, data_dir: str | Path | None = None, download: bool = False, seed: int = 0) -> DataSplit:
    """Load the registered dataset ``name`` as a standardised :class:`DataSplit`.

    ``seed`` fixes the train/test split of datasets that do not ship one (digits). ``data_dir`` and ``download``
    are passed to torchvision for the others.
    """
    return DATASETS[name](data_dir=data_dir, download=download, seed=seed)


def _standardise(
    name: str,
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    num_classes: int,
) -> DataSplit:
    mean = train_x.mean(dim=(0, 2, 3), keepdim=True)
    std = train_x.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-8)
    return DataSplit(
        name=name,
        train_x=((train_x - mean) / std).float().contiguous(),
        train_y=train_y.long(),
        test_x=((test_x - mean) / std).float().contiguous(),
        test_y=test_y.long(),
        num_classes=num_classes,
    )


@register_dataset("digits")
def load_digits(
    *, data_dir: str | Path | None = None, download: bool = False, seed: int = 0, test_fraction: float = 0.2
) -> DataSplit:
    """scikit-learn's 1797 8x8 digits, split 80/20 by a permutation seeded with ``seed`` (offline)."""
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8)
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    num_test = round(test_fraction * len(labels))
    test, train = order[:num_test], order[num_test:]
    return _standardise("digits", images[train], labels[train], images[test], labels[test], num_classes=10)


def _torchvision_loader(name: str, dataset_class: str, num_classes: int) -> DatasetLoader:
    def load(*, data_dir: str | Path | None = None, download: bool = False, seed: int = 0) -> DataSplit:
        import torchvision

        check_data_dir(name, data_dir, download)
        cls = getattr(torchvision.datasets, dataset_class)
        try:
            parts = [cls(root=str(data_dir), train=train, download=download) for train in (True, False)]
        except RuntimeError:  # torchvision's "Dataset not found or corrupted. You can use download=True ..."
            if download:
                raise
            raise UsageError(
                f"--data-dir {data_dir} holds no intact copy of {name}; add --download to let torchvision fetch it "
                "there"
            ) from None
        tensors = []
        for part in parts:
            images = torch.as_tensor(part.data, dtype=torch.float32) / 255.0
            images = images.unsqueeze(1) if images.dim() == 3 else images.permute(0, 3, 1, 2)  # NHW or NHWC
            tensors += [images, torch.as_tensor(part.targets, dtype=torch.int64)]
        return _standardise(name, *tensors, num_classes=num_classes)

    load.__doc__ = f"torchvision {dataset_class} from ``data_dir`` (its own train/test split; ``seed`` unused)."
    return load


for _name, _cls, _classes in (("mnist", "MNIST", 10), ("cifar10", "CIFAR10", 10), ("cifar100", "CIFAR100", 100)):
    register_dataset(_name)(_torchvision_loader(_name, _cls, _classes))


@register_dataset("imagenet32")
def load_imagenet32(*, data_dir: str | Path | None = None, download: bool = False, seed: int = 0) -> DataSplit:
    """Downsampled ImageNet 32x32 (Chrabaszcz et al. 2017; the PGC simulations' data) from its official numpy
    batches in ``data_dir``: ``train_data_batch_*.npz`` and ``val_data.npz``, each with ``data`` ``(M, 3072)`` uint8
    (channel-major) and ``labels`` 1..1000. It cannot be downloaded here (it needs an image-net.org account).
    The full training set takes about 16 GB as float32."""
    if data_dir is None or download:
        raise UsageError(
            "imagenet32 needs --data-dir with train_data_batch_*.npz and val_data.npz "
            "(downloaded from image-net.org; --download is not supported)"
        )
    folder = Path(data_dir)
    train_files = sorted(folder.glob("train_data_batch_*.npz"))
    if not train_files or not (folder / "val_data.npz").exists():
        raise UsageError(f"--data-dir {folder} lacks train_data_batch_*.npz or val_data.npz (ImageNet 32x32)")

    def read(files: list[Path]) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [np.load(f) for f in files]
        x = torch.from_numpy(np.concatenate([p["data"] for p in parts])).reshape(-1, 3, 32, 32).float() / 255.0
        y = torch.from_numpy(np.concatenate([p["labels"] for p in parts]).astype(np.int64)) - 1
        return x, y

    return _standardise("imagenet32", *read(train_files), *read([folder / "val_data.npz"]), num_classes=1000)
