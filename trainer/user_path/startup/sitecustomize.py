"""GPU Planner's start-up hook for a job under its monitor (``python -m trainer exec``).

The monitor puts this folder on the job's ``PYTHONPATH`` (unless ``gpuplanner run --no-auto-hooks`` or
``GPUPLANNER_AUTO_HOOKS=0``), so every Python process of the job runs it at start-up: it registers GPU
Planner's callback when a ``transformers.Trainer`` or Lightning ``Trainer`` is constructed
(:func:`gpuplanner_telemetry.install_auto_hooks`), so an unmodified script reports loss and tokens/s.
Then it runs the ``sitecustomize`` it shadows (a distribution's or a virtual environment's), as Python
would have. It never stops the job: a failure is one line on stderr.
"""

import os
import sys


def _install() -> None:
    try:
        import gpuplanner_telemetry  # type: ignore[import-not-found]  # (beside it on the job's PYTHONPATH)

        gpuplanner_telemetry.install_auto_hooks()
    except Exception as exc:
        sys.stderr.write(f"gpuplanner: the start-up hook is not installed ({exc})\n")


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.realpath(__file__))
    path = [p for p in sys.path if os.path.realpath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_install()
_chain()
