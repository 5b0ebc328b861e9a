"""Entry point: ``python -m trainer``.

Stop signals are caught first, before torch or transformers are imported (seconds), so a SIGTERM
during start-up leads to the graceful stop (exit 75) instead of death by signal (exit 143); a
launcher that starts the trainer with them blocked (GPU Planner's wrapper) closes the interpreter's
own start-up too (:func:`trainer.early_signals.install` unblocks them). The budget clock starts here
(:mod:`trainer.clock`), and a budget's watch with it (:mod:`trainer.startup_budget`). The CUDA allocator's settings are chosen before torch is imported
(:mod:`trainer.allocator`).
"""

from . import allocator, clock, early_signals

early_signals.install()
clock.mark()
allocator.configure()

import sys  # noqa: E402

from . import startup_budget  # noqa: E402

# the caps hold from here, before the trainer's own modules are imported (trainer/startup_budget.py)
startup_budget.arm_early(sys.argv[1:], (clock.started() or (0.0, None))[1])

from .cli import main  # noqa: E402

sys.exit(main())
