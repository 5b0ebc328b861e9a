"""The window's settings: one INI file in the app's config folder, beside its other settings.

Window geometry, splitter positions, the current place, the planner's last inputs, the launch
dialog's last values and the alert thresholds live in ``window.ini`` in
:func:`gpuplanner.paths.config_dir` (``$GPUPLANNER_CONFIG_DIR`` or ``~/.config/gpuplanner``), so one
environment variable moves all of the app's settings. Earlier builds kept them in Qt's own
folder (``~/.config/GPU Planner/gpuplanner.ini`` on Linux); that file is copied over once, the first
time the new file is missing, and never written again.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from PySide6.QtCore import QSettings

from gpuplanner.paths import private_folder, window_settings_file

log = logging.getLogger(__name__)

LEGACY_ORGANIZATION = "GPU Planner"
LEGACY_APPLICATION = "gpuplanner"


def legacy_settings_file() -> Path:
    """Where Qt's organisation/application settings put the window's INI file before."""
    legacy = QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, LEGACY_ORGANIZATION, LEGACY_APPLICATION)
    return Path(legacy.fileName())


def migrate_legacy_settings(target: Path) -> bool:
    """Copy the old settings file to ``target`` when ``target`` does not exist yet; True when copied.

    A failed copy is logged and the app goes on with default settings (nothing of the old file is lost)."""
    if target.exists():
        return False
    source = legacy_settings_file()
    if source == target or not source.is_file():
        return False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError as exc:
        log.warning("could not copy the window settings from %s to %s: %s", source, target, exc)
        return False
    log.info("window settings copied from %s to %s", source, target)
    return True


def app_settings() -> QSettings:
    """The window's settings file (``window.ini`` in the config folder), migrated from the old place once."""
    path = window_settings_file()
    try:
        private_folder(path.parent)  # 0700: the settings folder is the user's alone
    except OSError as exc:
        log.warning("could not create the settings folder %s: %s", path.parent, exc)
    migrate_legacy_settings(path)
    return QSettings(str(path), QSettings.Format.IniFormat)
