"""``torchrun --nproc-per-node P -m torchgcc.gradient_coding.runtime [options]``: a thin entry point.

The runtime is :mod:`torchgcc.gradient_coding.distributed_training`; its command line is
:mod:`torchgcc.app.commands.gradient_coding_job`.
"""

import sys

from torchgcc.app.commands.gradient_coding_job import main

if __name__ == "__main__":
    sys.exit(main())
