"""The subcommands of ``torchgcc`` and the command lines of the torchrun entry points, one module each.

A subcommand module exposes ``register(subparsers)``, which adds its parser and sets ``func``; an entry point's
module exposes ``main(argv) -> int``.
"""
