"""``torchrun --standalone --nproc-per-node P -m torchgcc.distributed [options]``: a thin entry point.

The command line is the application's (:mod:`torchgcc.app.commands.distributed_job`). Before torch is imported it
sets ``TORCH_CPP_LOG_LEVEL=ERROR`` unless it is set, as the local launcher does for its ranks: c10 reads it once, at
import, and its warnings of failed store calls carry C++ stack traces (one per call of every rank when torchrun's
agent, which holds the store, is killed); each rank's own one-line error says what happened. The process ends with
``os._exit`` once the job returned and the output is flushed: a data-plane thread may still be blocked in a gloo
receive from a hung rank, and tearing the process group down under it at interpreter exit aborts the process
("terminate called without an active exception").
"""

import os
import sys

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from torchgcc.app.commands.distributed_job import main  # noqa: E402  (after the log level: it imports torch)

status = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
