"""``torchrun --nproc-per-node P -m torchgcc.gradient_coding.runtime [options]``: hands over to the application."""

import sys

from torchgcc.app.commands.gradient_coding_job import main

sys.exit(main())
