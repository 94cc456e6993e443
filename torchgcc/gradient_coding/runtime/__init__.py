"""``torchrun --nproc-per-node P -m torchgcc.gradient_coding.runtime [options]``: the entry point (``__main__``).

The runtime is :mod:`torchgcc.gradient_coding.distributed_training`; its command line is
:mod:`torchgcc.app.commands.gradient_coding_job`.
"""
