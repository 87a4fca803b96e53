"""``python -m lstmnb`` (and ``torchrun -m lstmnb``) runs the CLI."""

import sys

from .cli import main

sys.exit(main())
