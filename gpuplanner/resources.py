"""Find the data files the app ships (`resources/`), wherever the app runs from.

Three layouts are supported, tried in this order:
- a frozen bundle (PyInstaller sets ``sys._MEIPASS``; the spec copies ``resources/`` there),
- an installed wheel (the build copies ``resources/`` to ``gpuplanner/_resources``),
- a source checkout or editable install (``resources/`` beside the ``gpuplanner`` package).

:func:`trainer_source_dir` finds the trainer's *sources* (the payload uploaded to GPU hosts and run
by a Python that has torch): ``sys._MEIPASS/payload/trainer`` in the frozen bundle, otherwise the
importable ``trainer`` package folder.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent

#: Where the PyInstaller spec puts the trainer's sources inside the bundle (relative to ``_MEIPASS``).
FROZEN_PAYLOAD_DIR = "payload"


def is_frozen() -> bool:
    """True inside the PyInstaller bundle."""
    return bool(getattr(sys, "frozen", False)) and bool(getattr(sys, "_MEIPASS", None))


def resources_dir() -> Path:
    """Return the folder that holds the shipped data files."""
    candidates = []
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        candidates.append(Path(frozen_root) / "resources")
    candidates.append(_PACKAGE_DIR / "_resources")
    candidates.append(_PACKAGE_DIR.parent / "resources")
    for folder in candidates:
        if folder.is_dir():
            return folder
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"GPU Planner's resources folder is missing (looked in: {tried})")


def resource_path(*parts: str) -> Path:
    """Path of one shipped file, e.g. ``resource_path("catalog", "gpus.toml")``."""
    path = resources_dir().joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"missing resource file: {path}")
    return path


def trainer_source_dir() -> Path:
    """Folder of the trainer package's ``.py`` sources (``.../trainer``), to upload or to run.

    Run it with ``PYTHONPATH=<this folder's parent> python -m trainer``. In the frozen bundle the
    trainer is not importable as source (PyInstaller compiles what it imports into an archive), so
    the spec ships a plain copy under ``_MEIPASS/payload/trainer``.
    """
    candidates: list[Path] = []
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        candidates.append(Path(frozen_root) / FROZEN_PAYLOAD_DIR / "trainer")
    spec = importlib.util.find_spec("trainer")
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) for p in spec.submodule_search_locations)
    candidates.append(_PACKAGE_DIR.parent / "trainer")
    for folder in candidates:
        if (folder / "__main__.py").is_file() and (folder / "protocol.py").is_file():
            return folder.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"the trainer's sources are missing (looked in: {tried})")
