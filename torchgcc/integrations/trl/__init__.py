"""Straggler-aware group sizing inside TRL's ``GRPOTrainer`` (``pip install 'torchgcc[trl]'``; see docs/control.md).

- :class:`SAGCGRPOTrainer`: ``GRPOTrainer`` with the group size chosen per generation step by a controller from
  :func:`torchgcc.control.group_size_controller`, advantages by group id, optional deadline erasures and DAPO's
  dynamic sampling.
- :func:`group_advantages`, :func:`usable_groups`: the group statistics it uses, for groups of any size.
- :func:`char_tokenizer`, :func:`tiny_causal_lm`, :func:`addition_dataset`, :func:`exact_match`: a tiny model and a
  verifiable task, built in code, to run it offline on a CPU.
"""

from torchgcc.optional import require

require("trl", extra="trl")

from torchgcc.integrations.trl.addition_task import addition_dataset, exact_match  # noqa: E402
from torchgcc.integrations.trl.advantages import group_advantages, usable_groups  # noqa: E402
from torchgcc.integrations.trl.tiny_model import char_tokenizer, tiny_causal_lm  # noqa: E402
from torchgcc.integrations.trl.trainer import SAGCGRPOTrainer  # noqa: E402

__all__ = [
    "SAGCGRPOTrainer",
    "addition_dataset",
    "char_tokenizer",
    "exact_match",
    "group_advantages",
    "tiny_causal_lm",
    "usable_groups",
]
