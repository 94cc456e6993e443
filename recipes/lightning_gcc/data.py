"""Lightning DataModules for the recipes: MNIST, CIFAR-10/100, ImageNet (ImageFolder) and sklearn digits.

Every DataModule yields ``(images (M, C, H, W) float32, labels (M,) int64)`` batches and exposes
``num_classes`` and ``in_chans`` (linked to the model by the CLI). ``synthetic=True`` replaces the data with
seeded random images of the dataset's shape, so every recipe runs offline (tests, quick trials); the real
datasets keep torchvision's download / folder code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

Transform = Callable[[object], torch.Tensor]


def synthetic_images(
    *, num_samples: int, image_shape: tuple[int, int, int], num_classes: int, seed: int
) -> TensorDataset:
    """Seeded standard-normal images ``(num_samples, *image_shape)`` with uniform labels ``(num_samples,)``."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(num_samples, *image_shape, generator=generator)
    labels = torch.randint(num_classes, (num_samples,), generator=generator)
    return TensorDataset(images, labels)


class ImageClassificationData(LightningDataModule):
    """Train / val / test splits of an image classification dataset.

    Subclasses set ``num_classes`` and ``image_shape`` and implement :meth:`build_splits`.

    Args:
        root: dataset folder.
        batch_size: samples per batch; a multiple of the code's ``num_inputs`` keeps groups inside a batch.
        num_workers: DataLoader worker processes.
        synthetic: use seeded random images of the dataset's shape instead of the dataset.
        synthetic_size: number of synthetic images per split.
        val_size: training samples held out for validation (datasets without a validation split).
        download: let torchvision download the dataset into ``root``.
        seed: seed of the synthetic data and of the validation hold-out.
    """

    num_classes: int
    image_shape: tuple[int, int, int]

    def __init__(
        self,
        root: str = "data",
        batch_size: int = 128,
        num_workers: int = 2,
        synthetic: bool = False,
        synthetic_size: int = 64,
        val_size: int = 5000,
        download: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.root = Path(root)
        self.splits: dict[str, Dataset] = {}

    @property
    def in_chans(self) -> int:
        return self.image_shape[0]

    @property
    def image_size(self) -> int:
        return self.image_shape[-1]

    def build_splits(self) -> dict[str, Dataset]:
        """Return the ``"train"``, ``"val"`` and ``"test"`` datasets of the real data."""
        raise NotImplementedError

    def setup(self, stage: str) -> None:
        if self.splits:
            return
        if self.hparams.synthetic:
            self.splits = {
                split: synthetic_images(
                    num_samples=self.hparams.synthetic_size,
                    image_shape=self.image_shape,
                    num_classes=self.num_classes,
                    seed=self.hparams.seed + offset,
                )
                for offset, split in enumerate(("train", "val", "test"))
            }
        else:
            self.splits = self.build_splits()

    def hold_out(self, train: Dataset, evaluation: Dataset) -> tuple[Subset, Subset]:
        """Split one dataset read with train and eval transforms into disjoint train / val subsets."""
        val_size = self.hparams.val_size
        if not 0 < val_size < len(train):
            raise ValueError(f"val_size must be between 1 and {len(train) - 1} for this dataset, got {val_size}")
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(self.hparams.seed)).tolist()
        return Subset(train, order[val_size:]), Subset(evaluation, order[:val_size])

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.splits[split],
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


class TorchvisionData(ImageClassificationData):
    """A torchvision dataset with a ``train=`` flag (MNIST, CIFAR); validation is held out from train."""

    dataset_class: str
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def transforms(self, train: bool) -> Transform:
        from torchvision.transforms import v2

        augment = [v2.RandomCrop(self.image_shape[1:], padding=4), v2.RandomHorizontalFlip()] if train else []
        return v2.Compose(
            [v2.ToImage(), *augment, v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)]
        )

    def build_splits(self) -> dict[str, Dataset]:
        import torchvision

        cls = getattr(torchvision.datasets, self.dataset_class)
        download = self.hparams.download

        def read(train: bool, augment: bool) -> Dataset:
            return cls(self.root, train=train, transform=self.transforms(augment), download=download)

        train, val = self.hold_out(read(train=True, augment=True), read(train=True, augment=False))
        return {"train": train, "val": val, "test": read(train=False, augment=False)}


class MNISTData(TorchvisionData):
    """MNIST, 28x28 grey digits, 10 classes (no flips)."""

    num_classes = 10
    image_shape = (1, 28, 28)
    dataset_class = "MNIST"
    mean, std = (0.1307,), (0.3081,)

    def transforms(self, train: bool) -> Transform:
        from torchvision.transforms import v2

        return v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)])


class CIFAR10Data(TorchvisionData):
    """CIFAR-10, 32x32 colour images, 10 classes (random crop and flip for training)."""

    num_classes = 10
    image_shape = (3, 32, 32)
    dataset_class = "CIFAR10"
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class CIFAR100Data(CIFAR10Data):
    """CIFAR-100, 32x32 colour images, 100 classes."""

    num_classes = 100
    dataset_class = "CIFAR100"
    mean, std = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)


class ImageNetData(ImageClassificationData):
    """ImageNet in ImageFolder layout: ``root/train/<class>/*.JPEG`` and ``root/val/<class>/*.JPEG``.

    ``root/val`` is used for validation and testing. Set ``image_size`` for other resolutions.
    """

    num_classes = 1000
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

    def __init__(self, root: str = "data/imagenet", image_size: int = 224, **kwargs) -> None:
        super().__init__(root=root, **kwargs)
        self.image_shape = (3, image_size, image_size)

    def transforms(self, train: bool) -> Transform:
        from torchvision.transforms import v2

        size = self.image_shape[1]
        resize = (
            [v2.RandomResizedCrop(size), v2.RandomHorizontalFlip()]
            if train
            else [v2.Resize(round(size * 256 / 224)), v2.CenterCrop(size)]
        )
        return v2.Compose(
            [v2.ToImage(), *resize, v2.ToDtype(torch.float32, scale=True), v2.Normalize(self.mean, self.std)]
        )

    def build_splits(self) -> dict[str, Dataset]:
        from torchvision.datasets import ImageFolder

        val = ImageFolder(self.root / "val", transform=self.transforms(train=False))
        train = ImageFolder(self.root / "train", transform=self.transforms(train=True))
        return {"train": train, "val": val, "test": val}


class DigitsData(ImageClassificationData):
    """scikit-learn's bundled handwritten digits (1797 images, 8x8 grey, 10 classes): works offline.

    Reads :func:`torchgcc.app.data.load_dataset` ("digits": standardised, seeded 80/20 train/test
    split, the split of ``torchgcc reproduce``) and holds ``val_size`` training images out for validation.
    """

    num_classes = 10
    image_shape = (1, 8, 8)

    def __init__(self, val_size: int = 144, batch_size: int = 64, **kwargs) -> None:
        super().__init__(val_size=val_size, batch_size=batch_size, **kwargs)

    def build_splits(self) -> dict[str, Dataset]:
        from torchgcc.app.data import load_dataset

        split = load_dataset("digits", seed=self.hparams.seed)
        train = split.train_dataset()
        train, val = self.hold_out(train, train)
        return {"train": train, "val": val, "test": split.test_dataset()}
