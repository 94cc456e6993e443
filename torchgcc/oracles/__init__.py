"""Evaluation oracles: the worst stragglers and the worst attacks for a decoder, found by search.

Both read what no decoding system has (the exact outputs, and every worker's result), so they are for measuring a
decoder's worst case, never for serving:

- :func:`~torchgcc.oracles.stragglers.worst_stragglers`: per group, the ``S`` stragglers that maximise the MSE
  (exhaustive up to 200,000 sets; above, every block and pair of blocks and hill climbing from the worst);
- :func:`~torchgcc.oracles.attacks.worst_attacks`: per group, the attack by ``q`` adversaries that maximises the MSE
  (shifts over four decades at every block position, sign flips, random and constant values, greedy).
"""

from torchgcc.oracles.attacks import WorstAttacks, worst_attacks
from torchgcc.oracles.stragglers import WorstStragglers, worst_stragglers

__all__ = ["WorstAttacks", "WorstStragglers", "worst_attacks", "worst_stragglers"]
