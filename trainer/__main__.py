"""Entry point: ``python -m trainer``.

Stop signals are caught first, before torch or transformers are imported (seconds), so a SIGTERM
during start-up leads to the graceful stop (exit 75) instead of death by signal (exit 143).
"""

from . import early_signals

early_signals.install()

import sys  # noqa: E402

from .cli import main  # noqa: E402

sys.exit(main())
