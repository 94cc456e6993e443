"""``python -m torchgcc.distributed.launch --nproc P [--timeout S] -- JOB OPTIONS``: hands over to the application
(:mod:`torchgcc.app.commands.launch`)."""

import sys

from torchgcc.app.commands.launch import main

sys.exit(main())
