"""Test kit for codes: the contract every code must pass, shipped with the package so that a code a user registers
(``torchgcc.register_code``) can be checked against it from the user's own tests.

Needs torch only (no pytest import): :class:`CodeContract` is a plain base class whose ``test_*`` methods use
``assert``, so pytest collects a subclass named ``Test...``, and ``unittest`` runs one that also derives from
``unittest.TestCase``.
"""

from torchgcc.testing.code_contract import CodeContract, contract_data

__all__ = ["CodeContract", "contract_data"]
