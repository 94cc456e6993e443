"""The torchgcc application: the ``torchgcc`` command, its experiments, reports and plots.

Everything here parses arguments, prints tables, draws plots or writes files; the library (every other
subpackage of :mod:`torchgcc`) never imports it (checked by import-linter, see docs/architecture.md).
"""
