"""Retired: the workaround for PySide6 6.12.0's ``None`` reference-count bug is gone.

pyproject.toml excludes PySide6-Essentials 6.12.0, and ``tests/ui/test_qt_refcount.py`` fails the suite
if a PySide6 drops references again. :func:`install` does nothing; this module only remains because
``gpuplanner/ui/app.py`` still imports it. Delete it together with those two lines.
"""

from __future__ import annotations


def install() -> bool:
    """Does nothing (kept for the one remaining caller); returns False."""
    return False
