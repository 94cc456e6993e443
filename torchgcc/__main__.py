"""``python -m torchgcc`` is the ``torchgcc`` command."""

import sys

from torchgcc.app.cli import main

sys.exit(main())
