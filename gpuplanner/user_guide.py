"""Where the user guide is: a built copy on this machine when there is one, otherwise the pages online.

The guide is the Markdown in ``docs/``, built by MkDocs (``make docs``) into ``build/site/`` of a
checkout. A frozen bundle or an installed wheel that carries a built copy has it in ``docs/`` beside its
resources (``sys._MEIPASS/docs``) or in ``gpuplanner/_docs``. Help > User guide opens the first
``index.html`` found; without one, :data:`ONLINE_USER_GUIDE`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent

#: The guide's pages as the repository shows them (GitHub renders the Markdown and its links).
ONLINE_USER_GUIDE = "https://github.com/gpuplanner/gpuplanner/blob/main/docs/index.md"


def local_guide_candidates() -> list[Path]:
    """The places a built guide's ``index.html`` may be, most specific first."""
    candidates = []
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        candidates.append(Path(frozen_root) / "docs" / "index.html")
    candidates.append(_PACKAGE_DIR / "_docs" / "index.html")
    candidates.append(_PACKAGE_DIR.parent / "build" / "site" / "index.html")
    return candidates


def local_user_guide() -> Path | None:
    """The built guide's ``index.html`` on this machine, or None."""
    for path in local_guide_candidates():
        if path.is_file():
            return path
    return None
