"""``python -m torchgcc`` is the ``torchgcc`` command."""

import sys

from torchgcc.cli import main

sys.exit(main())
