"""Start-up helpers shared by the front ends: import the history layer without sqlite-utils' optional
pandas support. Where pandas is installed (as it is for many who train models) sqlite-utils imports it
at once, for column types of pandas objects, which GPU Planner never stores; measured, that was about
0.3 s of CPU before the window's first paint. Code that imports pandas later gets it as usual."""

from __future__ import annotations

import sys


def import_history_without_pandas() -> None:
    """Import ``gpuplanner.history.db`` (and with it sqlite-utils) with pandas hidden for the while."""
    if "sqlite_utils" in sys.modules or "pandas" in sys.modules:
        return
    sys.modules["pandas"] = None  # type: ignore[assignment]  # an ImportError for sqlite-utils' optional import
    try:
        import gpuplanner.history.db  # noqa: F401
    finally:
        del sys.modules["pandas"]
