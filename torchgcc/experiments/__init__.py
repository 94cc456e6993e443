"""Experiments behind the ``torchgcc demo`` and ``torchgcc reproduce`` commands.

Reusable building blocks, free of command-line concerns:

- :mod:`~torchgcc.experiments.models`: LeNet5-style CNN and a small timm ViT for 8x8 / 28x28 / 32x32 images.
- :mod:`~torchgcc.experiments.data`: digits (offline), MNIST, CIFAR10/100 as standardised tensors.
- :mod:`~torchgcc.experiments.training`: train a classifier once and cache its weights.
- :mod:`~torchgcc.experiments.evaluate`: coded inference against the uncoded model, with 95% CIs.
- :mod:`~torchgcc.experiments.results`: ``results.json`` / ``results.csv``.
- :mod:`~torchgcc.experiments.plots`: the figures.
"""
