"""``gpuplanner`` says which X11 library to install when Qt's xcb plugin could not load, instead of
letting Qt abort the process (the pip install has no ``make run`` to install them first)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuplanner.ui import app as ui_app
from gpuplanner.ui import xcb_check


@pytest.fixture
def plugin_missing_a_library(tmp_path: Path) -> Path:
    """A real shared object that needs ``libghost-x11.so.0``, which is then deleted (as a system without
    ``libxcb-cursor0`` lacks that one for ``libqxcb.so``)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a plugin with a missing library")
    ghost = tmp_path / "libghost-x11.so.0"
    source = tmp_path / "x.c"
    source.write_text("int ghost(void) { return 1; }\n")
    subprocess.run([compiler, "-shared", "-fPIC", "-Wl,-soname,libghost-x11.so.0", "-o", ghost, source], check=True)
    (tmp_path / "libghost-x11.so").symlink_to(ghost.name)
    source.write_text("int ghost(void);\nint plugin(void) { return ghost(); }\n")
    plugin = tmp_path / "libqxcb.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", plugin, source, f"-L{tmp_path}", "-lghost-x11"], check=True)
    ghost.unlink()
    (tmp_path / "libghost-x11.so").unlink()
    return plugin


def test_a_missing_library_is_named(plugin_missing_a_library: Path) -> None:
    assert xcb_check.missing_x11_library(plugin_missing_a_library) == "libghost-x11.so.0"
    assert xcb_check.missing_x11_library() is None  # this machine has Qt's X11 libraries (make test installs them)
    assert xcb_check.missing_x11_library(plugin_missing_a_library.parent / "absent.so") is None


def test_gpuplanner_says_what_to_install_and_exits(
    plugin_missing_a_library: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(xcb_check, "xcb_plugin", lambda: plugin_missing_a_library)
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("DISPLAY", ":0")
    assert ui_app.main([]) == 1
    err = capsys.readouterr().err
    assert "needs libghost-x11.so.0" in err
    assert "sudo apt-get install libghost-x11-0 libxcb-cursor0" in err
    assert "make run" in err and "QT_QPA_PLATFORM=offscreen" in err


@pytest.mark.parametrize(
    ("environ", "xcb"),
    [
        ({"DISPLAY": ":0"}, True),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, False),
        ({"QT_QPA_PLATFORM": "xcb"}, True),
        ({"QT_QPA_PLATFORM": "wayland;xcb"}, False),
        ({}, False),
    ],
)
def test_only_an_x11_start_is_checked(environ: dict[str, str], xcb: bool) -> None:
    assert xcb_check.will_use_xcb(environ) is xcb


@pytest.mark.parametrize(
    ("soname", "package"),
    [
        ("libxcb-cursor.so.0", "libxcb-cursor0"),
        ("libX11-xcb.so.1", "libx11-xcb1"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libxcb-render-util.so.0", "libxcb-render-util0"),
    ],
)
def test_debian_package_names(soname: str, package: str) -> None:
    assert xcb_check.debian_package(soname) == package
