"""Adapters to other frameworks, each behind its own extra and never imported by the rest of the library.

- :mod:`torchgcc.integrations.trl` (``pip install 'torchgcc[trl]'``): straggler-aware group sizing inside TRL's
  ``GRPOTrainer``.
"""
