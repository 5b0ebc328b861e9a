"""Entry point: ``python -m trainer``."""

import sys

from .cli import main

sys.exit(main())
