"""``python -m torchgcc.rl``: a thin entry point; the command line is :mod:`torchgcc.app.commands.grpo`."""

from torchgcc.app.commands.grpo import main

raise SystemExit(main())
