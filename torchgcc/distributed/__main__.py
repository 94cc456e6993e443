"""``torchrun --standalone --nproc-per-node P -m torchgcc.distributed [options]``."""

import sys

from torchgcc.distributed.job import main

sys.exit(main())
