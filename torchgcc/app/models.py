"""Image classifiers used by the experiments: a LeNet5-style CNN, a small timm VisionTransformer, a small MLP and
torchvision's ResNet-18.

Both are built from the input geometry so that the same name works for 8x8 digits, 28x28 MNIST and 32x32 CIFAR:

>>> model = build_model("lenet5", in_channels=1, image_size=8, num_classes=10)
>>> model(torch.zeros(4, 1, 8, 8)).shape
torch.Size([4, 10])

New architectures register themselves in :data:`MODELS` with :func:`register_model`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from torchgcc.registry import Registry

__all__ = ["LeNet5", "MODELS", "build_model", "list_models", "register_model", "small_vit"]

ModelBuilder = Callable[..., nn.Module]

#: Registered model builders: ``name -> builder(*, in_channels, image_size, num_classes) -> nn.Module``.
MODELS: Registry[ModelBuilder] = Registry("model")

#: Decorator that adds a builder to :data:`MODELS` under a name.
register_model = MODELS.register


def list_models() -> list[str]:
    """Names accepted by :func:`build_model`."""
    return MODELS.names()


def build_model(name: str, *, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    """Build the registered model ``name`` for ``(in_channels, image_size, image_size)`` images.

    Returns an ``nn.Module`` mapping ``(M, in_channels, image_size, image_size)`` to logits ``(M, num_classes)``.
    """
    return MODELS[name](in_channels=in_channels, image_size=image_size, num_classes=num_classes)


class LeNet5(nn.Module):
    """LeNet5-style CNN: two conv + ReLU + max-pool stages, then three fully connected layers (120, 84, classes).

    The convolutions use "same" padding with 5x5 kernels for images of 16 pixels or more and 3x3 kernels for
    smaller ones (8x8 digits), so any square size divisible by 4 works.

    Shapes: ``(M, in_channels, image_size, image_size) -> (M, num_classes)``.
    """

    def __init__(self, *, in_channels: int = 1, image_size: int = 28, num_classes: int = 10) -> None:
        super().__init__()
        if image_size < 4 or image_size % 4:
            raise ValueError(f"LeNet5 needs an image size divisible by 4, got {image_size}")
        kernel = 5 if image_size >= 16 else 3
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, kernel, padding=kernel // 2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, kernel, padding=kernel // 2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 16 * (image_size // 4) ** 2
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(flat, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


@register_model("lenet5")
def _lenet5(*, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    return LeNet5(in_channels=in_channels, image_size=image_size, num_classes=num_classes)


@register_model("vit")
def small_vit(*, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    """A small timm ``VisionTransformer`` (no pretrained weights) sized for tiny images.

    Patches of 2 pixels for images under 16 pixels (8x8 digits: 16 tokens) and 4 pixels otherwise
    (MNIST: 49 tokens, CIFAR: 64 tokens); width 64, depth 4, 4 heads, MLP ratio 2, class-token pooling.
    """
    from timm.models.vision_transformer import VisionTransformer

    patch = 2 if image_size < 16 else 4
    if image_size % patch:
        raise ValueError(f"ViT needs an image size divisible by its patch size {patch}, got {image_size}")
    return VisionTransformer(
        img_size=image_size,
        patch_size=patch,
        in_chans=in_channels,
        num_classes=num_classes,
        embed_dim=64,
        depth=4,
        num_heads=4,
        mlp_ratio=2.0,
    )


@register_model("mlp")
def _mlp(*, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    """Flatten, 64 tanh units, logits."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(in_channels * image_size**2, 64), nn.Tanh(), nn.Linear(64, num_classes)
    )


@register_model("resnet18")
def _resnet18(*, in_channels: int, image_size: int, num_classes: int) -> nn.Module:
    """torchvision ResNet-18 (random weights, ImageNet stem as in the PGC artifact), ``in_channels`` inputs."""
    import torchvision

    model = torchvision.models.resnet18(num_classes=num_classes)
    if in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model
