"""``python -m torchgcc.distributed.launch --nproc P [--timeout S] -- JOB OPTIONS``: a thin entry point.

The launcher is :func:`torchgcc.distributed.launcher.launch`; its command line is :mod:`torchgcc.app.commands.launch`.
"""

import sys

from torchgcc.app.commands.launch import main

if __name__ == "__main__":
    sys.exit(main())
