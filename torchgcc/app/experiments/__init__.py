"""Experiments behind the ``torchgcc demo`` and ``torchgcc reproduce`` commands.

Reusable building blocks, free of command-line concerns:

- :mod:`~torchgcc.app.models`: LeNet5-style CNN and a small timm ViT for 8x8 / 28x28 / 32x32 images.
- :mod:`~torchgcc.app.data`: digits (offline), MNIST, CIFAR10/100 as standardised tensors.
- :mod:`~torchgcc.app.model_cache`: train a classifier once and cache its weights.
- :mod:`~torchgcc.app.evaluate`: coded inference against the uncoded model, with 95% CIs.
- :mod:`~torchgcc.app.results`: ``results.json`` / ``results.csv``.
- :mod:`~torchgcc.app.plots`: the figures.
"""
