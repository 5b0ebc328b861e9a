"""Find the data files the app ships (`resources/`), wherever the app runs from.

Three layouts are supported, tried in this order:
- a frozen bundle (PyInstaller sets ``sys._MEIPASS``; the spec copies ``resources/`` there),
- an installed wheel (the build copies ``resources/`` to ``gpuplanner/_resources``),
- a source checkout or editable install (``resources/`` beside the ``gpuplanner`` package).
"""

from __future__ import annotations

import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


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
