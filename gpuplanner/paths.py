"""Where the user's settings and data live (XDG base directories on Linux).

- settings (price overrides, own machines, the window's ``window.ini``): ``$GPUPLANNER_CONFIG_DIR`` or ``$XDG_CONFIG_HOME/gpuplanner``
  (default ``~/.config/gpuplanner``); on macOS ``~/Library/Application Support/gpuplanner``;
  on Windows ``%APPDATA%\\gpuplanner``.
- data (the run history database): ``$GPUPLANNER_DATA_DIR`` or ``$XDG_DATA_HOME/gpuplanner``
  (default ``~/.local/share/gpuplanner``).
- cache (prices fetched by ``gpuplanner catalog update``; safe to delete): ``$GPUPLANNER_CACHE_DIR`` or
  ``$XDG_CACHE_HOME/gpuplanner`` (default ``~/.cache/gpuplanner``); on macOS ``~/Library/Caches/gpuplanner``;
  on Windows ``%LOCALAPPDATA%\\gpuplanner\\cache``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None  # type: ignore[assignment]

APP_NAME = "gpuplanner"


def _platform_base(xdg_var: str, xdg_default: str) -> Path:
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA", Path.home() / "AppData" / "Roaming"))
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    value = os.environ.get(xdg_var)
    return Path(value) if value else Path.home() / xdg_default


def config_dir() -> Path:
    """Folder of the user's settings; not created here."""
    override = os.environ.get("GPUPLANNER_CONFIG_DIR")
    if override:
        return Path(override)
    return _platform_base("XDG_CONFIG_HOME", ".config") / APP_NAME


WINDOW_SETTINGS_NAME = "window.ini"


def window_settings_file() -> Path:
    """The window's settings (geometry, last inputs, alert thresholds): an INI file in the config folder."""
    return config_dir() / WINDOW_SETTINGS_NAME


def data_dir() -> Path:
    """Folder of the user's data (history database); not created here."""
    override = os.environ.get("GPUPLANNER_DATA_DIR")
    if override:
        return Path(override)
    return _platform_base("XDG_DATA_HOME", ".local/share") / APP_NAME


def cache_dir() -> Path:
    """Folder of data the app can fetch again (the updated price catalog); not created here."""
    override = os.environ.get("GPUPLANNER_CACHE_DIR")
    if override:
        return Path(override)
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / APP_NAME / "cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / APP_NAME
    value = os.environ.get("XDG_CACHE_HOME")
    return (Path(value) if value else Path.home() / ".cache") / APP_NAME


def private_folder(path: Path) -> Path:
    """Create ``path`` (with its parents) as a folder only its owner can open (0700), and tighten it to
    0700 when it exists and is the user's own: the settings folder and the history's folder hold host names,
    prices and run settings that other local users have no business reading. No-op for modes on Windows."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _tighten(path, 0o700)
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 when it is missing; tighten it to 0600 when it is the user's own
    and readable by others (a history written by an older version was 0644)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _tighten(path, 0o600)
    else:
        os.close(fd)


def _tighten(path: Path, mode: int) -> None:
    if sys.platform == "win32":
        return
    try:
        info = path.lstat()  # never through a link, never a device or a fifo
        ours = stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
        if ours and info.st_uid == os.getuid() and info.st_mode & 0o777 & ~mode:
            os.chmod(path, mode)
    except OSError:
        pass


@contextlib.contextmanager
def exclusive_lock(path: Path, wait: bool = True) -> Iterator[None]:
    """Hold an advisory ``flock`` on ``path`` (created if missing) for the ``with`` block: the one way two
    processes take turns at a read-modify-write of a shared file (the price cache's update, a search's study
    file set-up). With ``wait=False`` a lock another process holds raises ``BlockingIOError`` at once (a study
    is run by one process at a time). Where ``fcntl`` is missing (Windows) nothing is serialised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
