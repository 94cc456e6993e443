"""Classification backbones by name: ``"timm:resnet18"``, ``"torchvision:resnet18"``, ``"torchgcc:lenet5"``.

A name is ``source:architecture``; a bare architecture means timm. Every backbone maps images
``(M, in_chans, image_size, image_size)`` to logits ``(M, num_classes)`` and starts from random weights
(no downloads). timm and torchvision models ignore ``image_size`` unless it is passed on as a keyword argument
(``img_size=32`` for a timm ViT); the torchgcc models (:mod:`torchgcc.app.models`) are built for it.
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

BackboneFactory = Callable[..., nn.Module]


def _timm(arch: str, *, num_classes: int, in_chans: int, image_size: int, **kwargs: Any) -> nn.Module:
    import timm

    return timm.create_model(arch, pretrained=False, num_classes=num_classes, in_chans=in_chans, **kwargs)


def _torchvision(arch: str, *, num_classes: int, in_chans: int, image_size: int, **kwargs: Any) -> nn.Module:
    import torchvision

    if in_chans != 3:
        raise ValueError(f"torchvision backbones take 3-channel images, got in_chans={in_chans}; use a timm backbone")
    return torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)


def _torchgcc(arch: str, *, num_classes: int, in_chans: int, image_size: int, **kwargs: Any) -> nn.Module:
    from torchgcc.app.models import build_model

    return build_model(arch, in_channels=in_chans, image_size=image_size, num_classes=num_classes, **kwargs)


#: Backbone sources: ``source -> factory(arch, *, num_classes, in_chans, image_size, **kwargs)``.
BACKBONE_SOURCES: dict[str, BackboneFactory] = {"timm": _timm, "torchvision": _torchvision, "torchgcc": _torchgcc}


def build_backbone(name: str, *, num_classes: int, in_chans: int, image_size: int, **kwargs: Any) -> nn.Module:
    """Build the backbone ``name`` (``"source:arch"``, source defaults to timm) with random weights.

    Args:
        name: e.g. ``"resnet18"``, ``"timm:vit_tiny_patch16_224"``, ``"torchvision:resnet18"``.
        num_classes: size of the logits.
        in_chans: image channels.
        image_size: image height and width.
        **kwargs: passed to the source's factory (e.g. ``img_size=32, patch_size=4`` for a timm ViT).
    """
    source, _, arch = name.rpartition(":")
    source = source or "timm"
    if source not in BACKBONE_SOURCES:
        raise ValueError(f"unknown backbone source {source!r} in {name!r}; choose from {sorted(BACKBONE_SOURCES)}")
    return BACKBONE_SOURCES[source](arch, num_classes=num_classes, in_chans=in_chans, image_size=image_size, **kwargs)
