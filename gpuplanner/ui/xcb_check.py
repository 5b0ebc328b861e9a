"""Before the window opens on X11: can Qt's xcb platform plugin load its libraries?

Qt 6.5+ needs ``libxcb-cursor0`` (and a few other X11 libraries) for its xcb plugin; pip's PySide6
does not bring them. Without them Qt prints a few ``qt.qpa.plugin`` lines and aborts the process.
:func:`missing_x11_library` loads the plugin file the way Qt would (``dlopen``) and, when the dynamic
loader cannot find one of its libraries, returns that library's name, so ``gpuplanner`` can say what
to install and exit cleanly instead (``make run`` checks and installs the whole set beforehand:
``tools/ensure_system_packages.sh --for run``).
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import PySide6

_MISSING = re.compile(r"(\S+\.so(?:\.\d+)*): cannot open shared object file")


def xcb_plugin() -> Path:
    """PySide6's own xcb platform plugin."""
    return Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"


def will_use_xcb(environ: Mapping[str, str]) -> bool:
    """True when Qt would start on X11: Linux, a DISPLAY, no Wayland session and no other platform asked."""
    if not sys.platform.startswith("linux"):
        return False
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.split(":")[0].split(";")[0] == "xcb"
    return bool(environ.get("DISPLAY")) and not environ.get("WAYLAND_DISPLAY")


def missing_x11_library(plugin: Path | None = None) -> str | None:
    """The library the plugin cannot find (``libxcb-cursor.so.0``), or None when it loads or is absent."""
    plugin = xcb_plugin() if plugin is None else plugin
    if not plugin.is_file():
        return None
    try:
        ctypes.CDLL(str(plugin), mode=os.RTLD_LAZY | ctypes.RTLD_LOCAL)
    except OSError as exc:
        found = _MISSING.search(str(exc))
        return found.group(1) if found else None
    return None


def debian_package(soname: str) -> str:
    """Debian's usual package name for a shared library: ``libxcb-cursor.so.0`` -> ``libxcb-cursor0``."""
    name, _, version = soname.partition(".so")
    version = version.lstrip(".").split(".")[0]
    name = name.lower()
    return f"{name}-{version}" if name[-1:].isdigit() and version else f"{name}{version}"


USUAL_PACKAGES = ("libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxkbcommon-x11-0")


def message(soname: str) -> str:
    packages = [debian_package(soname)]
    packages += [p for p in USUAL_PACKAGES if p not in packages]
    return (
        f"GPU Planner: the window cannot open on X11: Qt's xcb platform plugin needs {soname}, which is not "
        f"installed.\nOn Debian or Ubuntu install it (and the rest of Qt's X11 libraries) with:\n"
        f"  sudo apt-get install {' '.join(packages)}\n"
        "From a source checkout, `make run` (or tools/ensure_system_packages.sh --for run) checks and installs "
        "the whole set.\nWithout a display, `QT_QPA_PLATFORM=offscreen` or `xvfb-run -a gpuplanner` work; "
        "the command line (gpuplanner plan, compare, ...) never needs Qt."
    )


def check(environ: Mapping[str, str] | None = None) -> str | None:
    """The message to print when the window would fail inside Qt, else None."""
    environ = os.environ if environ is None else environ
    if not will_use_xcb(environ):
        return None
    soname = missing_x11_library()
    return None if soname is None else message(soname)
