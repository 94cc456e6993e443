"""``torchrun --standalone --nproc-per-node P -m torchgcc.distributed [options]``: a thin entry point.

The command line is the application's (:mod:`torchgcc.app.commands.distributed_job`). The process ends with
``os._exit`` once the job returned and the output is flushed: a data-plane thread may still be blocked in a gloo
receive from a hung rank, and tearing the process group down under it at interpreter exit aborts the process
("terminate called without an active exception").
"""

import os
import sys

from torchgcc.app.commands.distributed_job import main

status = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
